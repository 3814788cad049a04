package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

func TestRunsFilters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, query string
		status      int
		want        string           // on the page
		filter      engine.RunFilter // what the engine is asked, for a 200
	}{
		{"no filter", "", 200, "summarize:doc-1", engine.RunFilter{}},
		{"every filter", "function=summarize&status=failed&since=2h&limit=20", 200, "summarize:doc-1",
			engine.RunFilter{Function: "summarize", Status: run.Failed, Since: now.Add(-2 * time.Hour), Limit: 20}},
		{"since a time", "since=2026-03-04T08:00:00Z&limit=1000", 200, "summarize:doc-1", engine.RunFilter{Since: now.Add(-4 * time.Hour), Limit: 1000}},
		{"timed out", "status=timed_out&limit=1", 200, "summarize:doc-1", engine.RunFilter{Status: run.TimedOut, Limit: 1}},
		{"other versions", "status=other_version", 200, "summarize:doc-1", engine.RunFilter{Status: run.OtherVersion}},
		{"bad status", "status=finished", 400, `status "finished" is not one of queued, running, other_version, completed, failed, cancelled, timed_out`, engine.RunFilter{}},
		{"bad since", "since=yesterday", 400, `since "yesterday" is neither an RFC 3339 time nor a duration like 1h`, engine.RunFilter{}},
		{"negative since", "since=-1h", 400, `since "-1h" is neither`, engine.RunFilter{}},
		{"limit 0", "limit=0", 400, `limit "0": want 1 to 1000`, engine.RunFilter{}},
		{"limit over", "limit=1001", 400, `limit "1001": want 1 to 1000`, engine.RunFilter{}},
		{"limit not a number", "limit=ten", 400, `limit "ten": want 1 to 1000`, engine.RunFilter{}},
		{"search", "function=summarize&status=failed&event_key=doc-1&reason=tpm+exhausted&since=2h&until=2026-03-04T11:30:00Z", 200, "summarize:doc-1",
			engine.RunFilter{Function: "summarize", Status: run.Failed, EventKey: "doc-1", Reason: "tpm exhausted", Since: now.Add(-2 * time.Hour), Until: now.Add(-30 * time.Minute)}},
		{"bad until", "until=soon", 400, `until "soon" is neither an RFC 3339 time nor a duration like 1h`, engine.RunFilter{}},
		{"until before since", "since=1h&until=2h", 400, `until "2h" is before since "1h"`, engine.RunFilter{}},
		{"reason too long", "reason=" + strings.Repeat("r", 257), 400, "reason of 257 bytes is over the limit of 256", engine.RunFilter{}},
		{"unknown function", "function=nope", 400, `function: "nope" is not a registered function`, engine.RunFilter{Function: "nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var asked []engine.RunFilter
			e := &fakeEngine{RunsFunc: func(_ context.Context, f engine.RunFilter) ([]run.Summary, error) {
				asked = append(asked, f)
				if f.Function == "nope" {
					return nil, &engine.InvalidError{What: "function", Problem: `"nope" is not a registered function`}
				}
				return []run.Summary{{ID: "summarize:doc-1", Function: "summarize", Status: run.Failed, CreatedAt: now.Add(-time.Hour),
					StartedAt: now.Add(-time.Hour), EndedAt: now.Add(-time.Hour + 90*time.Second), Error: "step ask: tpm exhausted"}}, nil
			}}
			h := newUI(t, ui.Config{Engine: e}, nil)
			res, body := do(t, h, req{path: "/runs?" + tc.query})
			page := parse(t, body)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d:\n%s", res.StatusCode, tc.status, body)
			}
			if tc.status == 400 {
				hasText(t, "error", page.one(t, "error", classed("error-box")), tc.want)
				// The form keeps what was given, to fix.
				form := page.one(t, "filters", classed("filters"))
				for k, v := range mustQuery(t, tc.query) {
					if in := form.all(with("name", k)); len(in) != 1 || (in[0].Name == "input" && in[0].Attrs["value"] != v[0]) {
						t.Errorf("the form's %s is %v, want %q", k, in, v[0])
					}
				}
				if tc.filter.Function == "" && len(asked) != 0 {
					t.Errorf("a filter refused up front reached the engine: %+v", asked)
				}
				return
			}
			if len(asked) != 1 || asked[0] != tc.filter {
				t.Fatalf("engine asked %+v, want %+v", asked, tc.filter)
			}
			row := page.one(t, "run row", with("data-run", "summarize:doc-1"))
			hasText(t, "run row", row, "summarize", "failed", "1m 30s", "step ask: tpm exhausted")
			if a := row.one(t, "link", func(n node) bool { return n.Name == "a" }); a.Attrs["href"] != "/runs/summarize:doc-1" {
				t.Errorf("run links to %q", a.Attrs["href"])
			}
		})
	}
}

func mustQuery(t *testing.T, q string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// detail is a run of summarize on doc/1 that failed in its second step,
// waiting on tpm first.
func detail(status run.State) *engine.RunDetail {
	start := now.Add(-time.Minute)
	d := &engine.RunDetail{
		Summary: run.Summary{ID: "summarize:doc/1", Function: "summarize", Status: status, CreatedAt: start, StartedAt: start},
		Event:   &engine.Event{Name: "document.created", ID: "doc/1", Data: json.RawMessage(`{"documentId":"doc/1"}`)},
		Steps: []engine.StepView{
			{Name: "load", Kind: "step", Status: "completed", Attempts: 1, FirstStepID: 0, StartedAt: start, EndedAt: start.Add(1500 * time.Millisecond),
				DurationMS: 1500, Output: json.RawMessage(`{"words":1200}`), OutputBytes: 14},
			{Name: "ask", Kind: "step", Status: "failed", Attempts: 3, FirstStepID: 1, StartedAt: start.Add(2 * time.Second), EndedAt: start.Add(50 * time.Second),
				DurationMS: 48000, WaitedMS: 20000, Error: "step ask: quota: request needs 9,000 tokens, TPM limit is 8,000 (not retried)",
				FailedAttempts: []engine.FailedAttempt{
					{Attempt: 1, Class: "quota_wait", Error: "waiting on tpm until 12:00:30", RetryAfterMS: 20000},
					{Attempt: 3, Class: "fatal", Error: "request can never fit: TPM limit is 8,000", Final: true},
				}},
		},
	}
	if status.Ended() {
		d.EndedAt = start.Add(50 * time.Second)
		d.Error = "step ask: request can never fit (TPM limit is 8,000)"
	}
	return d
}

func TestRunPageShowsStepsAndActions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status          run.State
		cancel, rerun   bool
		refreshesItself bool
	}{
		{run.Failed, false, true, false},
		{run.Running, true, false, true},
		{run.Queued, true, false, true},
		{run.OtherVersion, true, false, true},
		{run.Completed, false, false, false},
		{run.TimedOut, false, true, false},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			t.Parallel()
			e := &fakeEngine{RunDetailFunc: func(_ context.Context, id string, limit int) (*engine.RunDetail, error) {
				if id != "summarize:doc/1" || limit != 2048 {
					t.Errorf("RunDetail(%q, %d), want the run's ID and the output limit", id, limit)
				}
				return detail(tc.status), nil
			}}
			h := newUI(t, ui.Config{Engine: e, OutputLimit: 2048}, nil)
			_, page := get(t, h, "/runs/"+url.PathEscape("summarize:doc/1"))
			summary := page.one(t, "summary", classed("summary"))
			if summary.Attrs["data-status"] != string(tc.status) {
				t.Errorf("status %q", summary.Attrs["data-status"])
			}
			steps := page.all(classed("step"))
			if len(steps) != 2 {
				t.Fatalf("%d steps, want 2", len(steps))
			}
			hasText(t, "step load", steps[0], "load", "completed", "1.5 s", "1 attempt", `"words": 1200`, "14 bytes")
			hasText(t, "step ask", steps[1], "ask", "failed", "48 s", "3 attempts", "waited 20 s", "TPM limit is 8,000",
				"quota_wait", "waiting on tpm until 12:00:30", "fatal (final)", "request can never fit")
			if steps[1].Attrs["data-attempts"] != "3" {
				t.Errorf("ask: data-attempts %q", steps[1].Attrs["data-attempts"])
			}
			rows := steps[1].all(func(n node) bool { return n.Name == "tr" && n.Attrs["data-attempt"] != "" })
			if len(rows) != 2 {
				t.Errorf("%d failed attempts, want 2", len(rows))
			}
			// The timeline draws a bar per step, in order.
			bars := page.all(classed("step-bar"))
			if len(bars) != 2 || bars[0].Attrs["x"] != "0" || bars[1].Attrs["y"] != "22" {
				t.Errorf("timeline bars %v", bars)
			}
			hasText(t, "event", page.one(t, "event", classed("event")), "document.created", "doc/1", `"documentId": "doc/1"`)

			forms := map[string]bool{}
			for _, f := range page.all(func(n node) bool { return n.Name == "form" && n.Attrs["method"] == "post" }) {
				forms[f.Attrs["action"]] = true
			}
			base := "/runs/" + url.PathEscape("summarize:doc/1")
			if forms[base+"/cancel"] != tc.cancel || forms[base+"/rerun"] != tc.rerun {
				t.Errorf("forms %v: want cancel %v, re-run %v", forms, tc.cancel, tc.rerun)
			}
			if refreshes := len(page.all(with("data-refresh", "5"))) == 1; refreshes != tc.refreshesItself {
				t.Errorf("the page refreshes itself: %v, want %v", refreshes, tc.refreshesItself)
			}
		})
	}
}

func TestRunPageErrors(t *testing.T) {
	t.Parallel()
	e := &fakeEngine{RunDetailFunc: func(_ context.Context, id string, _ int) (*engine.RunDetail, error) {
		if id == "" || strings.Contains(id, "\x01") {
			return nil, &engine.InvalidError{What: "run id", Problem: "has the control character U+0001 at byte 1"}
		}
		return nil, fmt.Errorf("run %s: %w", id, engine.ErrRunNotFound)
	}}
	h := newUI(t, ui.Config{Engine: e}, nil)
	for path, want := range map[string]int{"/runs/nope": 404, "/runs/a%01b": 400} {
		if res, body := do(t, h, req{path: path}); res.StatusCode != want {
			t.Errorf("GET %s: %d, want %d:\n%s", path, res.StatusCode, want, body)
		}
	}
}

func TestCancelAndRerun(t *testing.T) {
	t.Parallel()
	var cancelled []string
	e := &fakeEngine{
		RunDetailFunc: func(context.Context, string, int) (*engine.RunDetail, error) { return detail(run.Running), nil },
		CancelFunc: func(_ context.Context, id string) error {
			if id == "done:1" {
				return fmt.Errorf("run %s is completed: %w", id, engine.ErrEnded)
			}
			cancelled = append(cancelled, id)
			return nil
		},
		RerunFunc: func(_ context.Context, id string) (string, error) {
			if id == "running:1" {
				return "", fmt.Errorf("run %s is running: %w", id, engine.ErrNotRerunnable)
			}
			return "summarize:doc/1:rerun:ab12cd34", nil
		},
	}
	h := newUI(t, ui.Config{Engine: e}, nil)
	_, body := do(t, h, req{path: "/runs/x"})
	token := csrfOf(t, body)
	id := url.PathEscape("summarize:doc/1")
	for _, tc := range []struct {
		name, path string
		status     int
		location   string
	}{
		{"cancel", "/runs/" + id + "/cancel", http.StatusSeeOther, "/runs/" + id},
		{"re-run", "/runs/" + id + "/rerun", http.StatusSeeOther, "/runs/" + url.PathEscape("summarize:doc/1:rerun:ab12cd34")},
		{"cancel an ended run", "/runs/done:1/cancel", http.StatusConflict, ""},
		{"re-run a running run", "/runs/running:1/rerun", http.StatusConflict, ""},
	} {
		res, body := do(t, h, req{method: "POST", path: tc.path, form: url.Values{"csrf": {token}}})
		if res.StatusCode != tc.status || res.Header.Get("Location") != tc.location {
			t.Errorf("%s: %d to %q, want %d to %q:\n%s", tc.name, res.StatusCode, res.Header.Get("Location"), tc.status, tc.location, body)
		}
	}
	if len(cancelled) != 1 || cancelled[0] != "summarize:doc/1" {
		t.Errorf("cancelled %q, want the run", cancelled)
	}
}
