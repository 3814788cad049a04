package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// demoRun is the demo running in process.
type demoRun struct {
	out, errOut *testenv.Buffer
	cancel      context.CancelFunc
	done        chan struct{} // closed once the demo has ended
	code        int           // its exit code, once done
	base        string        // http://addr
	client      *http.Client  // reaches base
}

// startDemo runs the demo with args on pn (see demoInBubble).
func startDemo(t *testing.T, pn *testenv.PipeNet, args ...string) *demoRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &demoRun{out: &testenv.Buffer{}, errOut: &testenv.Buffer{}, cancel: cancel, done: make(chan struct{}),
		client: &http.Client{Transport: pn.Transport()}}
	env := &cli.Env{Stdout: d.out, Stderr: d.errOut, Getenv: func(string) string { return "" }}
	n := demoNet{listen: pn.Listen, transport: pn.Transport()}
	go func() {
		defer close(d.done)
		d.code = cli.ExitCode(env, runDemoOn(ctx, env, append([]string{"--addr", "127.0.0.1:0"}, args...), n))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(time.Minute):
			t.Errorf("the demo did not end a minute after Ctrl-C: %s", d.out)
		}
	})
	url := regexp.MustCompile(`dashboard  (http://\S+)/`)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := url.FindStringSubmatch(d.out.String()); m != nil {
			d.base = m[1]
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("the demo exited %d before serving: %s%s", d.code, d.out, d.errOut)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("the demo did not print its address: %s", d.out)
	return nil
}

// getJSON reads path of the demo's server into v.
func (d *demoRun) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := d.client.Get(d.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// getPage reads path of the demo's server as text.
func (d *demoRun) getPage(t *testing.T, path string) string {
	t.Helper()
	resp, err := d.client.Get(d.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v %s\n%s", path, resp.StatusCode, err, b, d.errOut)
	}
	return string(b)
}

// wait returns the exit code once the demo has ended.
func (d *demoRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(3 * time.Minute):
		t.Fatalf("the demo did not end: %s", d.out)
		return -1
	}
}

// The demo tells the seed's story: every job of sluice's side saves
// articles while its key refuses nothing, and the seed's scheduler beside
// it collects OTPM "too large" refusals;
// Ctrl-C stops it cleanly with a summary; run again on the same database
// it resumes where it stopped, nothing saved twice.
//
// The demo runs 720 times as fast as the clock it reads: on the wall
// clock, a call a loaded machine holds up in transit for a twentieth of a
// second reaches the simulator 36 s later on its clock than the governor
// admitted it, past the governor's Lag (40 ms of the wall clock), and
// the key may count it in a window the governor had already left. In
// the bubble (demoInBubble) no transit takes any of the clock's time: the
// key counts each call when the governor admitted it, whatever the load,
// and refusing none is what the governor did, not what the machine
// allowed.
func TestDemoSideBySideAndResume(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "devpick.db")
	demoInBubble(t, func(t *testing.T, pn *testenv.PipeNet) {
		testDemoSideBySideAndResume(t, pn, db)
	})
}

func testDemoSideBySideAndResume(t *testing.T, pn *testenv.PipeNet, db string) {
	d := startDemo(t, pn, "--db", db, "--for", "0", "--report-every", "1s")
	began := time.Now()
	var flows struct{ Flows []health.Flow }
	for {
		d.getJSON(t, "/v1/flows", &flows)
		done := map[string]int64{}
		for _, f := range flows.Flows {
			done[f.Name] = f.Done
		}
		if done["analysis"] > 0 && done["summary"] > 0 && done["title"] > 0 {
			break
		}
		if time.Since(began) > 90*time.Second {
			t.Fatalf("after %s sluice's jobs have done %v, want each > 0", time.Since(began).Round(time.Second), done)
		}
		time.Sleep(200 * time.Millisecond) // poll interval: until every job of sluice's side has saved (the loop's deadline bounds it)
	}
	t.Logf("every job of sluice's side saved articles %s of the bubble's clock after the start", time.Since(began).Round(100*time.Millisecond))
	var stats map[string]struct{ Requests, Succeeded, Rejected int64 }
	for {
		d.getJSON(t, "/sim/stats", &stats)
		if stats["naive"].Requests > 0 || time.Since(began) > 90*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond) // poll interval: until the seed's scheduler has sent (the loop's deadline bounds it)
	}
	if s := stats["sluice"]; s.Succeeded == 0 || s.Rejected != 0 {
		t.Errorf("sluice's key answered %d and refused %d, want some and none", s.Succeeded, s.Rejected)
	}
	if s := stats["naive"]; s.Requests == 0 {
		t.Errorf("the seed's scheduler sent nothing")
	}
	resp, err := d.client.Get(d.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET / (the dashboard): %d", resp.StatusCode)
	}
	var side demoSnapshot
	d.getJSON(t, "/demo.json", &side)
	if len(side.Sides) != 2 || side.Sides[0].Side != "naive" || side.Sides[1].Side != "sluice" {
		t.Fatalf("/demo.json has sides %+v, want naive and sluice", side.Sides)
	}
	if side.Resumed || side.Clock != "simulated time, ×720" {
		t.Errorf("the first run: resumed %v, clock %q", side.Resumed, side.Clock)
	}
	// The side-by-side page is the dashboard's: its layout and style, the
	// simulated clock named, and both sides' progress drawn once the
	// demo has kept two points of it.
	for {
		page := d.getPage(t, "/demo")
		for _, want := range []string{`<link rel="stylesheet" href="/assets/style.css?v=`, `<nav aria-label="Pages">`, "(simulated time, ×720)",
			"Per simulated hour", `data-side="naive"`, `data-side="sluice"`} {
			if !strings.Contains(page, want) {
				t.Fatalf("/demo has no %q:\n%s", want, page)
			}
		}
		if strings.Contains(page, "<svg") && strings.Contains(page, "Articles done per job, both sides") {
			break
		}
		if time.Since(began) > 3*time.Minute {
			t.Fatalf("/demo has no chart %s after the start:\n%s", time.Since(began).Round(time.Second), page)
		}
		time.Sleep(200 * time.Millisecond) // poll interval: until the demo has kept two points (the loop's deadline bounds it)
	}

	d.cancel() // Ctrl-C
	stop := time.Now()
	if code := d.wait(t); code != 0 {
		t.Fatalf("the demo exited %d after Ctrl-C: %s", code, d.errOut)
	}
	t.Logf("the demo stopped %s after Ctrl-C", time.Since(stop).Round(100*time.Millisecond))
	// Warnings may come — SQLite retries a busy lock — but never an error.
	for _, line := range strings.Split(d.errOut.String(), "\n") {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "panic") || strings.Contains(line, "context canceled") {
			t.Errorf("the demo wrote an error to stderr: %s", line)
		}
	}
	out := d.out.String()
	summary := out[strings.LastIndex(out, "In "):]
	for _, want := range []string{"provider refused (429/413)", "articles saved twice", "sluice's key refused 0"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the closing summary has no %q:\n%s", want, summary)
		}
	}
	if !regexp.MustCompile(`articles saved twice\s+0\s+0`).MatchString(summary) {
		t.Errorf("an article was saved twice:\n%s", summary)
	}
	first := lastSnapshot(t, d)

	// Again on the same database: the clock goes on from where it was,
	// and every count goes on from where it stopped.
	restart := time.Now()
	again := startDemo(t, pn, "--db", db, "--for", "30m")
	t.Logf("the second run served %s after its start", time.Since(restart).Round(100*time.Millisecond))
	var snap demoSnapshot
	again.getJSON(t, "/demo.json", &snap)
	if snap.At.Before(first.At) {
		t.Errorf("the second run starts at %v, before the first stopped (%v)", snap.At, first.At)
	}
	// It says it resumed, and its days go on from the first run's.
	if !strings.Contains(again.out.String(), "resumed  at simulated ") {
		t.Errorf("the second run does not say it resumed:\n%s", again.out)
	}
	if !snap.Resumed || snap.Elapsed < side.Elapsed || snap.Elapsed <= snap.RunElapsed {
		t.Errorf("the second run: resumed %v, %.0f s in (%.0f in this run), the first was %.0f s in", snap.Resumed, snap.Elapsed, snap.RunElapsed, side.Elapsed)
	}
	for i, s := range snap.Sides {
		for j, job := range s.Jobs {
			if prev := first.Sides[i].Jobs[j]; job.Done < prev.Done {
				t.Errorf("%s %s: %d done at the second start, %d at the first's end", s.Side, job.Name, job.Done, prev.Done)
			}
		}
	}
	if code := again.wait(t); code != 0 {
		t.Fatalf("the second run exited %d: %s", code, again.errOut)
	}
	t.Logf("the second run ended %s after its start", time.Since(restart).Round(100*time.Millisecond))
	if !regexp.MustCompile(`articles saved twice\s+0\s+0`).MatchString(again.out.String()) {
		t.Errorf("an article was saved twice over the two runs:\n%s", again.out)
	}
}

// lastSnapshot reads the simulated time and the counts of the last view
// the demo printed.
func lastSnapshot(t *testing.T, d *demoRun) demoSnapshot {
	t.Helper()
	out := d.out.String()
	view := out[strings.LastIndex(out, "DevPick's key"):]
	m := regexp.MustCompile(`simulated (\w+ \d+ \d\d:\d\d)`).FindStringSubmatch(view)
	if m == nil {
		t.Fatalf("no simulated time in the last view:\n%s", view)
	}
	at, err := time.Parse("Jan 2 15:04", m[1]) // the view's time is in UTC
	if err != nil {
		t.Fatal(err)
	}
	// The view shows no year. The bubble's clock, which the demo's started
	// at, starts at the first moment of 2000, and the demo runs an hour or
	// so of its own: the year is the test's.
	at = at.AddDate(time.Now().UTC().Year(), 0, 0)
	snap := demoSnapshot{At: at}
	for _, side := range []string{"the seed's scheduler", "sluice"} {
		i := strings.Index(view, "\n"+side+"\n")
		if i < 0 {
			t.Fatalf("no %s in the last view:\n%s", side, view)
		}
		var v demoSideView
		for _, job := range jobNames {
			re := regexp.MustCompile(`(?m)^  ` + job + `\s+(?:\[[#.]+\] ([\d,]+) / |-)`)
			m := re.FindStringSubmatch(view[i:])
			if m == nil {
				t.Fatalf("no %s line for %s:\n%s", job, side, view[i:])
			}
			var n int64
			fmt.Sscan(strings.ReplaceAll(m[1], ",", ""), &n)
			v.Jobs = append(v.Jobs, demoJobView{Name: job, Done: n})
		}
		snap.Sides = append(snap.Sides, v)
	}
	return snap
}

// demoInBubble runs f in a bubble (see testenv.InBubble), with a PipeNet
// for the demo to serve on and call its simulators over. Every party of
// the demo — sluice, the seed's scheduler, the simulators, the SQLite file
// — then reads the bubble's clock.
func demoInBubble(t *testing.T, f func(t *testing.T, pn *testenv.PipeNet)) {
	t.Helper()
	testenv.InBubble(t, func(t *testing.T) {
		pn := testenv.NewPipeNet()
		// Every goroutine of the bubble must have ended when f does: the
		// clients' idle connections too.
		t.Cleanup(pn.Transport().CloseIdleConnections)
		f(t, pn)
	})
}

// The closing line on sluice's key claims that every call fit only when
// the key refused none; a refusal on a compressed clock is explained by
// the transit the clock's speed magnifies.
func TestSluiceRefusalsLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		refused   int64
		speed     float64
		want, not []string
	}{
		{0, 720, []string{"sluice's key refused 0: every call was admitted only when it fit every limit"}, nil},
		{1, 720, []string{"sluice's key refused 1:", "later window than it was admitted in", "at ×720", cli.Span(36 * time.Second)}, []string{"every call was admitted"}},
		{3, 1, []string{"sluice's key refused 3:"}, []string{"every call was admitted", "×"}},
	} {
		got := sluiceRefusals(tc.refused, tc.speed)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("refused %d at ×%v: %q, want %q in it", tc.refused, tc.speed, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("refused %d at ×%v: %q, want no %q in it", tc.refused, tc.speed, got, n)
			}
		}
	}
}
