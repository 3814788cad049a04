package sluice_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// TestFunctionsList: GET /v1/functions lists every function and backfill
// with its trigger, flow with its weight, limits and last run, on SQLite
// and PostgreSQL alike.
func TestFunctionsList(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		app := newApp(t, sluice.Config{DatabaseURL: url, Flows: []governor.FlowConfig{{Name: "digest", Weight: 3, Priority: 1}},
			Providers: []sluice.Provider{{Name: "p", LLM: llm.Config{BaseURL: "http://127.0.0.1:1/v1"}}}})
		err := sluice.Register(app, run.Function{ID: "summarize", Event: "doc/uploaded", Flow: "digest", Retries: 5, Timeout: 10 * time.Minute,
			Concurrency: []run.Concurrency{{Limit: 2, Key: "event.data.tenant"}}, Throttle: &run.Throttle{Limit: 10, Period: time.Minute, Key: "event.data.tenant"},
			RateLimit: &run.RateLimit{Limit: 100, Period: time.Hour}, Priority: "event.data.urgency"},
			func(ctx *sluice.Context, ev sluice.Event[map[string]any]) (string, error) { return "ok", nil })
		if err != nil {
			t.Fatal(err)
		}
		if err := sluice.Register(app, run.Function{ID: "nightly", Cron: "0 3 * * *", Retries: run.NoRetries},
			func(ctx *sluice.Context, ev sluice.Event[map[string]any]) (string, error) { return "ok", nil }); err != nil {
			t.Fatal(err)
		}
		err = sluice.RegisterBackfill(app, sluice.Backfill[string]{
			Backfill: run.Backfill{ID: "notes", Poll: time.Hour, PendingSQL: "SELECT 'x' WHERE 1 = 0 AND $1 = '' AND $2 > 0"},
			Load:     func(context.Context, []string) (map[string]string, error) { return nil, nil },
			Request: func(items []sluice.Item[string]) (*llm.ChatRequest, error) {
				return &llm.ChatRequest{Model: "m", MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: items[0].Data}}}, nil
			},
			Save: func(context.Context, sluice.Tx, sluice.Item[string], string) error { return nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		app.DeclaredInYAML("notes")
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		sent, err := app.Send(t.Context(), "doc/uploaded", "", map[string]any{"tenant": "a"})
		if err != nil || len(sent) != 1 {
			t.Fatalf("send: %v %v", sent, err)
		}
		if _, err := app.Wait(t.Context(), sent[0].RunID); err != nil {
			t.Fatal(err)
		}
		api := httptest.NewServer(app.Handler(sluice.HandlerConfig{}))
		t.Cleanup(api.Close)
		resp, err := http.Get(api.URL + "/v1/functions")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Functions []httpapi.Function }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		byName := map[string]httpapi.Function{}
		for _, f := range body.Functions {
			byName[f.Name] = f
		}
		if len(body.Functions) != 3 {
			t.Fatalf("%d functions, want 3: %+v", len(body.Functions), body.Functions)
		}
		s := byName["summarize"]
		if s.Kind != "function" || s.Declared != "go" || s.Trigger.Event != "doc/uploaded" || s.Flow != "digest" || s.FlowWeight != 3 || s.FlowPriority != 1 {
			t.Errorf("summarize: %+v", s)
		}
		if l := s.Limits; len(l.Concurrency) != 1 || l.Concurrency[0] != (httpapi.Concurrency{Limit: 2, Key: "event.data.tenant"}) ||
			*l.Throttle != (httpapi.PeriodLimit{Limit: 10, Period: "1m0s", Key: "event.data.tenant"}) || *l.RateLimit != (httpapi.PeriodLimit{Limit: 100, Period: "1h0m0s"}) ||
			l.Priority != "event.data.urgency" || l.Retries != 5 || l.Timeout != "10m0s" {
			t.Errorf("summarize's limits: %+v", l)
		}
		if s.LastRun == nil || s.LastRun.ID != sent[0].RunID || s.LastRun.Status != string(run.Completed) {
			t.Errorf("summarize's last run: %+v, want %s completed", s.LastRun, sent[0].RunID)
		}
		n := byName["nightly"]
		if n.Trigger.Cron != "0 3 * * *" || n.Flow != "nightly" || n.FlowWeight != 1 || n.Limits.Retries != 0 || n.LastRun != nil {
			t.Errorf("nightly: %+v", n)
		}
		b := byName["backfill:notes"]
		if b.Kind != "backfill" || b.Declared != "yaml" || b.Flow != "notes" || b.Trigger.Backfill == nil ||
			*b.Trigger.Backfill != (httpapi.BackfillTrigger{Source: "pending_sql", Poll: "1h0m0s"}) {
			t.Errorf("backfill: %+v (trigger %+v)", b, b.Trigger.Backfill)
		}
	})
}
