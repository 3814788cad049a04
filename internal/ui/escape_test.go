package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

const xss = `<script>alert(1)</script>`

// Everything that comes from outputs, events, errors and user data is
// escaped on every page it shows on: the script never appears as markup.
func TestUntrustedTextIsEscaped(t *testing.T) {
	t.Parallel()
	quoted, _ := json.Marshal(xss)
	e := &fakeEngine{
		RunsFunc: func(context.Context, engine.RunFilter) ([]run.Summary, error) {
			return []run.Summary{{ID: "f:" + xss, Function: "f", Status: run.Failed, CreatedAt: now, Error: xss}}, nil
		},
		RunDetailFunc: func(_ context.Context, id string, _ int) (*engine.RunDetail, error) {
			return &engine.RunDetail{
				Summary: run.Summary{ID: id, Function: "f", Status: run.Failed, CreatedAt: now, Error: "failed: " + xss, Step: xss},
				Event:   &engine.Event{Name: "e" + xss, ID: xss, Data: json.RawMessage(`{"text":` + string(quoted) + `}`)},
				Output:  json.RawMessage(quoted),
				Steps: []engine.StepView{{Name: "ask" + xss, Kind: "step", Status: "failed", Attempts: 1, StartedAt: now,
					Output: json.RawMessage(`{"answer":` + string(quoted) + `}`), OutputTruncated: xss, Error: xss,
					FailedAttempts: []engine.FailedAttempt{{Attempt: 1, Class: "fatal", Error: xss}}}},
			}, nil
		},
	}
	report := func(_ context.Context, from string) (run.VersionReport, error) {
		return run.VersionReport{Version: from, Done: []string{"f:" + xss}, Skipped: []run.SkippedRun{{ID: xss, Reason: xss}}}, nil
	}
	cfg := ui.Config{
		Engine: e,
		Versions: &fakeVersions{
			OtherVersionsFunc: func(context.Context) ([]run.VersionRuns, error) {
				return []run.VersionRuns{{Version: xss, Runs: map[string]int64{xss: 2}, Total: 2, Unknown: []string{xss}}}, nil
			},
			ResumeVersionFunc: report,
			CancelVersionFunc: report,
		},
		Sender: &fakeSender{SendFunc: func(context.Context, engine.Event) ([]run.Sent, error) {
			return []run.Sent{{Function: "f", RunID: "f:" + xss, Status: "dropped", Reason: xss}}, nil
		}},
		Health: &fakeHealth{FlowsFunc: func() []health.Flow {
			return []health.Flow{{Name: "titles", State: health.Failing, ConsecutiveFailures: 1, LastError: xss, WaitingOn: xss}}
		}},
		Items: &fakeItems{
			RecentItemsFunc: func(context.Context, string, int, store.RecentCursor) ([]store.RecentItem, error) {
				return []store.RecentItem{{Item: store.Item{Key: xss, State: store.ItemParked, Reason: xss, RunID: xss}, ActiveAt: now}}, nil
			},
			BackfillRunsFunc: func(context.Context, string, int) ([]store.BackfillRun, error) {
				return []store.BackfillRun{{RunID: xss, Backfill: "titles", EndedAt: now, Rejected: map[string]int{xss: 1}, Stopped: "aborted=" + xss}}, nil
			},
		},
		Keys: func(context.Context, time.Time) []governor.Stats {
			return []governor.Stats{keyStats(xss, map[governor.Limit][2]int64{governor.TPM: {100, 10}},
				governor.FlowStats{Name: xss, Waiting: 1, WaitingOn: governor.Blocker{Kind: "limit", Limit: governor.TPM}})}
		},
		History: &fakeHistory{SamplesFunc: func(_ context.Context, _, _ time.Time, flow string) ([]store.Sample, error) {
			return []store.Sample{{At: now.Add(-time.Minute), Flow: flow, Admitted: 1, Rejections: map[string]int64{xss: 1}}}, nil
		}},
		Plan: func(context.Context) (*plan.Plan, error) {
			return &plan.Plan{Scenario: xss, Warnings: []string{xss}, Limits: map[string]plan.Limit{"tpm": {Limit: 10, Per: "minute", ByFlow: map[string]float64{xss: 1}}},
				Flows: map[string]plan.Flow{xss: {StallRisk: xss, EtaFrom: xss}}, Fit: []plan.Fit{{Flow: xss, Limit: xss}}}, nil
		},
	}
	h := newUI(t, cfg, nil)
	_, body := do(t, h, req{path: "/send"})
	csrf := csrfOf(t, body)
	for _, r := range []req{
		{path: "/"},
		{path: "/flows"},
		{path: "/flows/titles"},
		{path: "/runs"},
		{path: "/runs/" + url.PathEscape("f:"+xss)},
		{path: "/runs?function=" + url.QueryEscape(xss)},
		{path: "/plan"},
		{path: "/nothing/" + url.PathEscape(xss)},
		{path: "/flows/titles?before_at=" + url.QueryEscape(xss)},
		{path: "/login?next=" + url.QueryEscape("/"+xss)},
		{method: "POST", path: "/send", form: url.Values{"csrf": {csrf}, "name": {"e"}, "data": {`{"a": "` + xss + `"}`}}},
		{method: "POST", path: "/send", form: url.Values{"csrf": {csrf}, "name": {xss}, "id": {xss}, "data": {xss}}},
		{method: "POST", path: "/versions/" + url.PathEscape(xss) + "/resume", form: url.Values{"csrf": {csrf}}},
		{method: "POST", path: "/versions/" + url.PathEscape(xss) + "/cancel", form: url.Values{"csrf": {csrf}}},
	} {
		res, body := do(t, h, r)
		if strings.Contains(body, xss) || strings.Contains(body, "<script>alert") {
			t.Errorf("%s %s (%d): the script is in the page as markup", r.method, r.path, res.StatusCode)
		}
		if res.StatusCode == http.StatusOK && !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") && !strings.Contains(body, `\u003cscript\u003ealert(1)\u003c/script\u003e`) &&
			!strings.Contains(strings.ToLower(body), "%3cscript%3ealert") {
			t.Errorf("%s %s: the text is not shown, escaped", r.method, r.path)
		}
		if n := len(parse(t, body).all(func(n node) bool { return n.Name == "script" })); n != 1 {
			t.Errorf("%s %s: %d script elements, want the dashboard's own", r.method, r.path, n)
		}
	}
}
