package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

// withHistory is detail(status) with the attempts of its steps: ask
// waited for quota on tpm, then failed for good after a retry.
func withHistory(status run.State) *engine.RunDetail {
	d := detail(status)
	start := d.StartedAt
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	d.CreatedAt = start.Add(-5 * time.Second) // queued for 5 s
	d.Attempts = []engine.Attempt{
		{Step: "load", StepIndex: 1, Kind: "step", Attempt: 1, Status: "completed", StartedAt: at(0), EndedAt: at(1.5), DurationMS: 1500},
		{Step: "ask", StepIndex: 2, Kind: "step", Attempt: 1, Status: "failed", StartedAt: at(2), EndedAt: at(10), DurationMS: 8000,
			Class: "quota_wait", Error: "waiting on tpm until 12:00:30"},
		{Step: "ask", StepIndex: 2, Kind: "step", Attempt: 2, Status: "failed", StartedAt: at(30), EndedAt: at(40), DurationMS: 10000,
			Class: "retry", Error: "connection reset",
			Wait: &engine.Wait{Cause: engine.WaitQuota, StartedAt: at(10), EndedAt: at(30), DurationMS: 20000, WaitKind: "limit", WaitOn: "tpm"}},
		{Step: "ask", StepIndex: 2, Kind: "step", Attempt: 3, Status: "failed", StartedAt: at(42), EndedAt: at(50), DurationMS: 8000,
			Class: "fatal", Error: "request can never fit: TPM limit is 8,000",
			Wait: &engine.Wait{Cause: engine.WaitRetry, Class: "retry", StartedAt: at(40), EndedAt: at(42), DurationMS: 2000}},
	}
	return d
}

// The run page shows every attempt in a table and on a timeline with a
// time axis, each wait drawn and labelled with its cause.
func TestRunPageHistory(t *testing.T) {
	t.Parallel()
	e := &fakeEngine{RunDetailFunc: func(context.Context, string, int) (*engine.RunDetail, error) { return withHistory(run.Failed), nil }}
	h := newUI(t, ui.Config{Engine: e}, nil)
	_, page := get(t, h, "/runs/"+url.PathEscape("summarize:doc/1"))
	section := page.one(t, "history", with("id", "history"))
	rows := section.one(t, "table", with("id", "history-table")).all(func(n node) bool { return n.Name == "tr" && n.Attrs["data-attempt"] != "" })
	var got []string
	for _, r := range rows {
		got = append(got, r.Attrs["data-step"]+"#"+r.Attrs["data-attempt"]+":"+r.Attrs["data-status"]+"<"+r.Attrs["data-wait-cause"]+">")
	}
	if want := "load#1:completed<> ask#1:failed<> ask#2:failed<quota> ask#3:failed<retry>"; strings.Join(got, " ") != want {
		t.Fatalf("history rows %q, want %q", strings.Join(got, " "), want)
	}
	hasText(t, "quota row", rows[2], "quota: tpm · 20 s", "retry", "connection reset", "10 s")
	hasText(t, "retry row", rows[3], "retry backoff · 2 s", "fatal")
	hasText(t, "queue row", section.one(t, "queue row", classed("queued-row")), "queued · 5 s")

	tl := section.one(t, "timeline", with("id", "timeline"))
	var ticks []string
	for _, n := range tl.all(classed("tick-label")) {
		ticks = append(ticks, n.text())
	}
	// The run spans 55 s from its creation: a tick every 10 s, with units.
	if want := "0 ms 10 s 20 s 30 s 40 s 50 s"; strings.Join(ticks, " ") != want {
		t.Errorf("ticks %q, want %q", strings.Join(ticks, " "), want)
	}
	lanes := tl.all(classed("lane"))
	var labels []string
	for _, l := range lanes {
		labels = append(labels, strings.TrimSpace(l.one(t, "lane label", classed("lane-label")).text()))
	}
	if want := "queued|1. load #1|2. ask #1|2. ask #2|2. ask #3"; strings.Join(labels, "|") != want {
		t.Errorf("lanes %q, want %q", strings.Join(labels, "|"), want)
	}
	if bars := tl.all(classed("attempt-bar")); len(bars) != 4 {
		t.Errorf("%d attempt bars, want 4", len(bars))
	}
	waits := tl.all(classed("wait-label"))
	var wl []string
	for _, w := range waits {
		wl = append(wl, w.text())
	}
	if want := "queued · 5 s|quota: tpm · 20 s|retry backoff · 2 s"; strings.Join(wl, "|") != want {
		t.Errorf("wait labels %q, want %q", strings.Join(wl, "|"), want)
	}
	// The quota wait starts where ask's first attempt ended: 15 s of 55 s
	// along the plot.
	q := lanes[3].one(t, "quota wait", classed("wait-quota"))
	if q.Attrs["x"] != "430" || q.Attrs["width"] != "280" {
		t.Errorf("the quota wait is drawn at x %s, width %s; want 430 and 280", q.Attrs["x"], q.Attrs["width"])
	}
}

// An ended run offers a re-run from each of its steps and a replay of its
// event; the forms post the step chosen and land on the new run.
func TestRerunFromStepAndReplay(t *testing.T) {
	t.Parallel()
	var from []string
	e := &fakeEngine{
		RunDetailFunc: func(_ context.Context, id string, _ int) (*engine.RunDetail, error) {
			return withHistory(run.Completed), nil
		},
		RerunFromFunc: func(_ context.Context, id, step string) (string, error) {
			from = append(from, id+"@"+step)
			if step == "9" {
				return "", &engine.InvalidError{What: "from_step", Problem: "step 9 is out of range: the run has 2 steps (1 to 2)"}
			}
			return id + ":rerun:1", nil
		},
		ReplayFunc: func(_ context.Context, id string) (engine.Replayed, error) {
			return engine.Replayed{RunID: "summarize:ev2", EventID: "ev2", ReplayOf: id}, nil
		},
	}
	h := newUI(t, ui.Config{Engine: e}, nil)
	res, body := do(t, h, req{path: "/runs/" + url.PathEscape("summarize:doc/1")})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("run page: %d", res.StatusCode)
	}
	page := parse(t, body)
	base := "/runs/" + url.PathEscape("summarize:doc/1")
	for i := 1; i <= 2; i++ {
		f := page.one(t, "re-run form", with("id", "rerun-from-"+string(rune('0'+i))))
		if want := base + "/rerun?from_step=" + string(rune('0'+i)); f.Attrs["action"] != want {
			t.Errorf("re-run form %d posts to %q, want %q", i, f.Attrs["action"], want)
		}
	}
	if f := page.one(t, "replay form", with("id", "replay-form")); f.Attrs["action"] != base+"/replay" {
		t.Errorf("replay form posts to %q", f.Attrs["action"])
	}
	token := csrfOf(t, body)
	for _, tc := range []struct {
		name, path string
		status     int
		location   string
	}{
		{"re-run from step 2", base + "/rerun?from_step=2", http.StatusSeeOther, "/runs/" + url.PathEscape("summarize:doc/1:rerun:1")},
		{"re-run from step 9", base + "/rerun?from_step=9", http.StatusBadRequest, ""},
		{"replay", base + "/replay", http.StatusSeeOther, "/runs/summarize:ev2"},
	} {
		res, body := do(t, h, req{method: "POST", path: tc.path, form: url.Values{"csrf": {token}}})
		if res.StatusCode != tc.status || res.Header.Get("Location") != tc.location {
			t.Errorf("%s: %d to %q, want %d to %q:\n%s", tc.name, res.StatusCode, res.Header.Get("Location"), tc.status, tc.location, body)
		}
		if tc.status == http.StatusBadRequest && !strings.Contains(body, "step 9 is out of range") {
			t.Errorf("%s: the page does not say why:\n%s", tc.name, body)
		}
	}
	if strings.Join(from, " ") != "summarize:doc/1@2 summarize:doc/1@9" {
		t.Errorf("re-runs asked %q", from)
	}
	// A running run offers neither a re-run from a step nor (without its
	// event) a replay.
	e.RunDetailFunc = func(context.Context, string, int) (*engine.RunDetail, error) {
		d := withHistory(run.Running)
		d.Event = nil
		return d, nil
	}
	_, page = get(t, h, base)
	if n := len(page.all(classed("rerun-from"))) + len(page.all(with("id", "replay-form"))); n != 0 {
		t.Errorf("a running run without its event offers %d re-run or replay forms", n)
	}
}
