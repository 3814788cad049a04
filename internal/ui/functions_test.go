package ui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/ui"
)

// TestFunctionsPage lists each function with its trigger, flow, limits and
// last run, and says so when none is registered or the list is not given.
func TestFunctionsPage(t *testing.T) {
	t.Parallel()
	fns := []httpapi.Function{
		{Name: "backfill:titles", Kind: "backfill", Declared: "yaml", Flow: "titles", FlowWeight: 1,
			Trigger: httpapi.Trigger{Backfill: &httpapi.BackfillTrigger{Source: "pending_sql", After: "summaries", Poll: "1m0s"}},
			Limits:  httpapi.Limits{Concurrency: []httpapi.Concurrency{{Limit: 1}}, Retries: 3}},
		{Name: "summarize", Kind: "function", Declared: "go", Flow: "summary", FlowWeight: 3, FlowPriority: 1, Provider: "groq",
			Trigger: httpapi.Trigger{Event: "doc/uploaded"},
			Limits: httpapi.Limits{Concurrency: []httpapi.Concurrency{{Limit: 2, Key: "event.data.tenant"}},
				Throttle: &httpapi.PeriodLimit{Limit: 10, Period: "1m0s"}, RateLimit: &httpapi.PeriodLimit{Limit: 1, Period: "1h0m0s", Key: "documentId"},
				Priority: "urgency", Retries: 5, Timeout: "10m0s"},
			LastRun: &httpapi.LastRun{ID: "run-7", Status: "failed", CreatedAt: now.Add(-time.Hour), Error: "TPM limit is 8,000"}},
	}
	h := newUI(t, ui.Config{Functions: func(context.Context) ([]httpapi.Function, error) { return fns, nil }}, nil)
	_, page := get(t, h, "/functions")
	for _, tc := range []struct{ name, want string }{
		{"backfill:titles", "backfill:titles backfill (YAML job) its pending items (pending_sql), polled every 1m0s, after backfill summaries titles 1 0 concurrency 1, 3 retries never run"},
		{"summarize", "summarize function event doc/uploaded summary on groq 3 1 concurrency 2 per event.data.tenant, throttle 10 per 1m0s, rate limit 1 per 1h0m0s per documentId, priority from urgency, 5 retries, timeout 10m0s failed"},
	} {
		row := page.one(t, "row of "+tc.name, with("data-function", tc.name))
		if got := row.text(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("row %s: %q, want it to begin %q", tc.name, got, tc.want)
		}
	}
	if got := page.one(t, "link to the run", with("href", "/runs/run-7")).text(); got != "failed" {
		t.Errorf("last run link %q", got)
	}
	page.one(t, "nav link", with("href", "/functions"))

	for _, tc := range []struct {
		cfg  ui.Config
		want string
	}{
		{ui.Config{Functions: func(context.Context) ([]httpapi.Function, error) { return nil, nil }}, "No function is registered."},
		{ui.Config{}, "not available"},
	} {
		_, page := get(t, newUI(t, tc.cfg, nil), "/functions")
		if got := page.one(t, "empty note", classed("empty")).text(); !strings.Contains(got, tc.want) {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}

// TestFlowsPageShowsClientRetries: the flows page lists, by key, flow and
// client key, what became of the gateway's own 429s, and has no such table
// without them.
func TestFlowsPageShowsClientRetries(t *testing.T) {
	t.Parallel()
	retries := map[string][]metrics.ClientRetries{"groq": {
		{Flow: "batch", Client: 2, Refused: 1400, CameBack: 1320, GaveUp: 80},
		{Flow: "web", Client: 1, Refused: 3, CameBack: 2, Pending: 1},
	}}
	h := newUI(t, ui.Config{ClientRetries: func() map[string][]metrics.ClientRetries { return retries }}, nil)
	_, page := get(t, h, "/flows")
	for _, tc := range []struct{ flow, client, want string }{
		{"batch", "2", "groq batch 2 1,400 1,320 80 0 0"},
		{"web", "1", "groq web 1 3 2 0 0 1"},
	} {
		if got := page.one(t, "row of "+tc.flow, with("data-client", tc.client)).text(); got != tc.want {
			t.Errorf("row of %s: %q, want %q", tc.flow, got, tc.want)
		}
	}
	_, page = get(t, newUI(t, ui.Config{ClientRetries: func() map[string][]metrics.ClientRetries { return nil }}, nil), "/flows")
	if got := page.all(classed("client-retries")); len(got) != 0 {
		t.Errorf("a table of 429s with none: %d", len(got))
	}
}
