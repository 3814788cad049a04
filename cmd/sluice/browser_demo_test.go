package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// The demo the browser's walk starts on.
const (
	// browserDemoArticles is how many old articles the demo backfills: few,
	// so that sluice's jobs have saved some within minutes of simulated
	// time and then go on with the new articles.
	browserDemoArticles = 40
	// browserDemoKey is the provider key the demo names after Groq's
	// (docs/demo.md).
	browserDemoKey = "groq"
)

// browserDemo is "sluice demo" running in process, as the command line
// runs it, on a free loopback port.
type browserDemo struct {
	base        string // http://addr
	out, errOut *testenv.Buffer
	cancel      context.CancelFunc
	done        chan struct{} // closed once the demo has ended
	code        int           // its exit code, once done
	served      time.Time     // when it printed its address
}

// browserDemoSnapshot is what the walk needs of /demo.json.
type browserDemoSnapshot struct {
	Clock string `json:"clock"`
	Sides []struct {
		Side  string `json:"side"`
		Label string `json:"label"`
		Jobs  []struct {
			Name string `json:"name"`
			Done int64  `json:"done"`
		} `json:"jobs"`
	} `json:"sides"`
}

// browserAttempt is one attempt of a run's history: a row of the run
// page's History table, and one of GET /v1/runs/{id}/history's attempts.
type browserAttempt struct {
	Step      string `json:"step"`
	StepIndex int    `json:"step_index"`
	Attempt   int    `json:"attempt"`
	Status    string `json:"status"`
}

// startBrowserDemo starts the demo, at its default speed, on a new
// database, until the test ends (its Ctrl-C), and returns once it has
// printed the address it serves on.
func startBrowserDemo(t *testing.T) *browserDemo {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &browserDemo{out: &testenv.Buffer{}, errOut: &testenv.Buffer{}, cancel: cancel, done: make(chan struct{})}
	env := &cli.Env{Stdout: d.out, Stderr: d.errOut, Getenv: func(string) string { return "" }}
	args := []string{"demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "devpick.db"),
		"--articles", strconv.Itoa(browserDemoArticles), "--for", "0"}
	go func() {
		defer close(d.done)
		d.code = runMain(ctx, env, args)
	}()
	t.Cleanup(func() {
		if code := d.stop(t); code != 0 {
			t.Errorf("sluice demo exited %d after Ctrl-C: %s", code, d.errOut)
		} else if t.Failed() {
			t.Logf("sluice demo's log:\n%s", d.errOut)
		}
	})
	addr := regexp.MustCompile(`(?m)^dashboard  (http://\S+)/$`)
	testenv.WaitUntil(t, 20*time.Millisecond, func() (bool, string) {
		select {
		case <-d.done:
			t.Fatalf("sluice demo exited %d before serving: %s%s", d.code, d.out, d.errOut)
		default:
		}
		m := addr.FindStringSubmatch(d.out.String())
		if m == nil {
			return false, "sluice demo has not printed its address: " + d.out.String()
		}
		d.base, d.served = m[1], time.Now()
		return true, ""
	})
	return d
}

// stop stops the demo as Ctrl-C does and returns its exit code; again, the
// code it stopped with.
func (d *browserDemo) stop(t *testing.T) int {
	t.Helper()
	d.cancel()
	select {
	case <-d.done:
		return d.code
	case <-time.After(testenv.Budget):
		t.Fatalf("sluice demo did not end %s after Ctrl-C: %s", testenv.Budget, d.out)
		return -1
	}
}

// waitProgress waits until /demo.json shows articles done on both sides
// and the side-by-side page draws them, and returns that /demo.json.
func (d *browserDemo) waitProgress(t *testing.T) browserDemoSnapshot {
	t.Helper()
	var snap browserDemoSnapshot
	testenv.WaitUntil(t, 100*time.Millisecond, func() (bool, string) {
		snap = browserDemoSnapshot{}
		if err := d.getJSON("/demo.json", &snap); err != nil {
			return false, err.Error()
		}
		var seen []string
		ok := len(snap.Sides) == 2
		for _, s := range snap.Sides {
			var done int64
			for _, j := range s.Jobs {
				done += j.Done
			}
			ok = ok && done > 0
			seen = append(seen, fmt.Sprintf("%s: %d done", s.Side, done))
		}
		if !ok {
			return false, "/demo.json shows " + strings.Join(seen, ", ")
		}
		// The page draws its chart once the demo has written two points of
		// each side's progress.
		page, err := d.get("/demo")
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(page, `<figure class="chart">`) {
			return false, "/demo draws no chart yet (" + strings.Join(seen, ", ") + ")"
		}
		return true, ""
	})
	t.Logf("the demo showed articles done on both sides, and drew them, %s after it served", time.Since(d.served).Round(100*time.Millisecond))
	return snap
}

// history is GET /v1/runs/{id}/history's attempts.
func (d *browserDemo) history(t *testing.T, id string) []browserAttempt {
	t.Helper()
	var h struct {
		Attempts []browserAttempt `json:"attempts"`
	}
	if err := d.getJSON("/v1/runs/"+url.PathEscape(id)+"/history", &h); err != nil {
		t.Fatal(err)
	}
	return h.Attempts
}

func (d *browserDemo) get(path string) (string, error) {
	resp, err := http.Get(d.base + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b), nil
}

func (d *browserDemo) getJSON(path string, v any) error {
	s, err := d.get(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
