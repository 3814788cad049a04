package sluice_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// metricFamilies is one scrape, parsed.
type metricFamilies map[string]*dto.MetricFamily

// scrapeMetrics GETs /metrics from h and parses the text exposition.
func scrapeMetrics(t *testing.T, h http.Handler) metricFamilies {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value is the value of the series of name whose labels include labels:
// a counter's or gauge's value, a histogram's count. ok is false when no
// series matches.
func (f metricFamilies) value(name string, labels ...string) (float64, bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}) {
				continue next
			}
		}
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
		return 0, false
	}
	return 0, false
}

// must is value for a series that must be there.
func (f metricFamilies) must(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := f.value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v in the scrape", name, labels)
	}
	return v
}

// mustType checks the type of the family name.
func (f metricFamilies) mustType(t *testing.T, name string, want dto.MetricType) {
	t.Helper()
	if fam := f[name]; fam == nil || fam.GetType() != want {
		t.Errorf("%s: want a %s in the scrape, got %v", name, want, fam.GetType())
	}
}

// waitScrape scrapes h until ok holds of a scrape, for up to a minute.
func waitScrape(t *testing.T, h http.Handler, what string, ok func(metricFamilies) bool) metricFamilies {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		f := scrapeMetrics(t, h)
		if ok(f) {
			return f
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// memItems is a backfill's items in memory.
type memItems struct {
	mu    sync.Mutex
	items map[string]string
	saved map[string]string
}

func (s *memItems) pending(_ context.Context, after string, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.items {
		if _, done := s.saved[k]; !done && k > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys[:min(limit, len(keys))], nil
}

func (s *memItems) load(_ context.Context, keys []string) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := s.items[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// registerCall registers a function on event making one governed call of
// the event's max_tokens.
func registerCall(t *testing.T, app *sluice.App, cfg run.Function) {
	t.Helper()
	err := sluice.Register(app, cfg, func(ctx *sluice.Context, ev sluice.Event[ask]) (int64, error) {
		resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{Model: "sim-model", MaxTokens: ev.Data.MaxTokens,
			Messages: []llm.Message{{Role: "user", Content: "Summarize the quarterly report."}}})
		if err != nil {
			return 0, err
		}
		return resp.Usage.CompletionTokens, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sendWait(t *testing.T, app *sluice.App, event, id string, data any) run.Summary {
	t.Helper()
	sent, err := app.Send(context.Background(), event, id, data)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := app.Wait(ctx, sent[0].RunID)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return st
}

// One scrape of the app's /metrics covers its runs, steps, governed calls,
// governors, provider rejections and backfills, with real calls to the
// provider simulator; and it answers from memory: after the app has
// stopped and its database is closed, a scrape says the same.
func TestMetricsHandler(t *testing.T) {
	t.Parallel()
	limits := governor.Limits{governor.TPM: 100_000, governor.RPM: 1000}
	_, groq := simProvider(t, limits)
	// The tight key allows one request a minute, and the app is not told:
	// its second call is the provider's 429.
	_, tight := simProvider(t, governor.Limits{governor.RPM: 1})
	app := newApp(t, sluice.Config{
		DatabaseURL: filepath.Join(t.TempDir(), "s.db"),
		Providers:   []sluice.Provider{{Name: "groq", LLM: groq, Limits: limits}, {Name: "tight", LLM: tight}},
		HealthEvery: 20 * time.Millisecond,
	})
	registerCall(t, app, run.Function{ID: "ask", Event: "ask", Retries: run.NoRetries})
	registerCall(t, app, run.Function{ID: "ask-tight", Event: "ask-tight", Provider: "tight", Retries: run.NoRetries})
	src := &memItems{items: map[string]string{}, saved: map[string]string{}}
	for i := range 7 {
		src.items[fmt.Sprintf("a%02d", i)] = "Ein Artikel über das Wetter."
	}
	err := sluice.RegisterBackfill(app, sluice.Backfill[string]{
		Backfill: run.Backfill{ID: "titles", MaxBatch: 2, Poll: 20 * time.Millisecond},
		Pending:  src.pending,
		Load:     src.load,
		Request: func(items []sluice.Item[string]) (*llm.ChatRequest, error) {
			var b strings.Builder
			for _, it := range items {
				b.WriteString(it.Data + "\n")
			}
			return &llm.ChatRequest{Model: "sim-model", MaxTokens: 20 * len(items), Messages: []llm.Message{{Role: "user", Content: b.String()}}}, nil
		},
		Parse: func(_ *llm.ChatResponse, items []sluice.Item[string]) ([]string, error) {
			out := make([]string, len(items))
			for i := range items {
				out[i] = "title"
			}
			return out, nil
		},
		Save: func(_ context.Context, _ sluice.Tx, it sluice.Item[string], output string) error {
			src.mu.Lock()
			defer src.mu.Unlock()
			src.saved[it.Key] = output
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := app.MetricsHandler()
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		if st := sendWait(t, app, "ask", fmt.Sprint("ok-", i), ask{MaxTokens: 40}); st.Status != run.Completed {
			t.Fatalf("call %d: %s %s", i, st.Status, st.Error)
		}
	}
	if st := sendWait(t, app, "ask", "too-big", ask{MaxTokens: 200_000}); st.Status != run.Failed {
		t.Fatalf("a call larger than the TPM limit: %s, want failed", st.Status)
	}
	if st := sendWait(t, app, "ask-tight", "first", ask{MaxTokens: 10}); st.Status != run.Completed {
		t.Fatalf("first call on the tight key: %s %s", st.Status, st.Error)
	}
	if st := sendWait(t, app, "ask-tight", "second", ask{MaxTokens: 10}); st.Status != run.Failed || !strings.Contains(st.Error, "RPM") {
		t.Fatalf("second call on the tight key: %s (%s), want the provider's RPM rejection", st.Status, st.Error)
	}
	f := waitScrape(t, h, "the titles backfill done", func(f metricFamilies) bool {
		v, _ := f.value("sluice_flow_state", "flow", "titles", "state", "done")
		return v == 1
	})

	// Runs and steps.
	if got := f.must(t, "sluice_runs_finished_total", "function", "ask", "status", "completed"); got != 2 {
		t.Errorf("completed runs of ask: %v, want 2", got)
	}
	if got := f.must(t, "sluice_runs_finished_total", "function", "ask", "status", "failed"); got != 1 {
		t.Errorf("failed runs of ask: %v, want 1", got)
	}
	if got := f.must(t, "sluice_runs_finished_total", "function", "ask-tight", "status", "failed"); got != 1 {
		t.Errorf("failed runs of ask-tight: %v, want 1", got)
	}
	if got := f.must(t, "sluice_runs_started_total", "function", "ask"); got != 3 {
		t.Errorf("runs of ask started: %v, want 3", got)
	}
	if got := f.must(t, "sluice_step_attempts_total", "function", "ask", "outcome", "ok"); got != 2 {
		t.Errorf("ok step attempts of ask: %v, want 2", got)
	}
	if got := f.must(t, "sluice_step_attempts_total", "function", "ask", "outcome", "fatal"); got != 1 {
		t.Errorf("fatal step attempts of ask: %v, want 1 (the call that can never fit)", got)
	}

	// The governed calls of the function and of the backfill.
	for _, flow := range []string{"ask", "titles"} {
		adm := f.must(t, "sluice_flow_admissions_total", "key", "groq", "flow", flow)
		if adm < 1 {
			t.Errorf("admissions of %s: %v", flow, adm)
		}
		if waits := f.must(t, "sluice_flow_admission_wait_seconds", "key", "groq", "flow", flow); waits != adm {
			t.Errorf("flow %s: %v admission waits observed for %v admissions", flow, waits, adm)
		}
		for _, kind := range []string{"input", "output"} {
			if v := f.must(t, "sluice_flow_tokens_total", "key", "groq", "flow", flow, "kind", kind); v <= 0 {
				t.Errorf("%s tokens of %s: %v", kind, flow, v)
			}
		}
	}
	if got := f.must(t, "sluice_flow_admissions_total", "key", "groq", "flow", "ask"); got != 2 {
		t.Errorf("admissions of ask: %v, want 2 (the call too large is never admitted)", got)
	}
	if got := f.must(t, "sluice_governor_refusals_total", "key", "groq", "flow", "ask", "limit", "tpm"); got != 1 {
		t.Errorf("TPM refusals of ask: %v, want 1", got)
	}
	if got := f.must(t, "sluice_governor_refusals_total", "key", "groq", "flow", "ask", "limit", "rpm"); got != 0 {
		t.Errorf("RPM refusals of ask: %v, want 0", got)
	}

	// The governors.
	if got := f.must(t, "sluice_limit_capacity", "key", "groq", "limit", "tpm"); got != 100_000 {
		t.Errorf("TPM capacity: %v, want 100,000", got)
	}
	used := f.must(t, "sluice_limit_used", "key", "groq", "limit", "tpm")
	if used <= 0 || used+f.must(t, "sluice_limit_remaining", "key", "groq", "limit", "tpm") != 100_000 {
		t.Errorf("TPM used %v: want > 0, and with what remains the allowance", used)
	}
	if v := f.must(t, "sluice_limit_reset_seconds", "key", "groq", "limit", "tpm"); v <= 0 || v > 70 {
		t.Errorf("TPM resets in %vs: want within the minute and its lag", v)
	}
	if got := f.must(t, "sluice_flow_waiting", "key", "groq", "flow", "ask"); got != 0 {
		t.Errorf("calls of ask waiting: %v", got)
	}
	if got := f.must(t, "sluice_flow_share", "key", "groq", "flow", "ask"); got != 1 {
		t.Errorf("share of ask: %v, want 1", got)
	}

	// The provider's 429, and the RPM allowance it taught the governor.
	if got := f.must(t, "sluice_provider_rejections_total", "key", "tight", "limit", "rpm", "status", "429"); got != 1 {
		t.Errorf("RPM rejections of the tight key: %v, want 1", got)
	}
	if got := f.must(t, "sluice_limit_capacity", "key", "tight", "limit", "rpm"); got != 1 {
		t.Errorf("the tight key's RPM capacity: %v, want the 1 the provider named", got)
	}
	if _, ok := f.value("sluice_provider_rejections_total", "key", "groq"); ok {
		t.Error("rejections counted on the groq key, which rejected nothing")
	}

	// The backfill's health: all 7 done, one state of six.
	if got := f.must(t, "sluice_flow_items_done", "flow", "titles"); got != 7 {
		t.Errorf("items done: %v, want 7", got)
	}
	if got := f.must(t, "sluice_flow_items_remaining", "flow", "titles"); got != 0 {
		t.Errorf("items remaining: %v, want 0", got)
	}
	for _, s := range metrics.States {
		want := 0.0
		if s == "done" {
			want = 1
		}
		if got := f.must(t, "sluice_flow_state", "flow", "titles", "state", string(s)); got != want {
			t.Errorf("sluice_flow_state{state=%q}: %v, want %v", s, got, want)
		}
	}
	if ts := f.must(t, "sluice_flow_last_progress_timestamp_seconds", "flow", "titles"); time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Errorf("last progress at %v: want within the test", time.Unix(int64(ts), 0))
	}
	f.must(t, "sluice_flow_consecutive_failures", "flow", "titles")

	// Types, the runtime's series, and sluice's names.
	for name, typ := range map[string]dto.MetricType{
		"sluice_flow_admissions_total": dto.MetricType_COUNTER, "sluice_flow_admission_wait_seconds": dto.MetricType_HISTOGRAM,
		"sluice_limit_used": dto.MetricType_GAUGE, "sluice_flow_state": dto.MetricType_GAUGE,
		"sluice_governor_refusals_total": dto.MetricType_COUNTER, "sluice_runs_started_total": dto.MetricType_COUNTER,
	} {
		f.mustType(t, name, typ)
	}
	f.must(t, "go_goroutines")
	for name := range f {
		if !strings.HasPrefix(name, "sluice_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("series %s is not named sluice_…", name)
		}
	}

	// The scrape reads memory only: with the database closed it still
	// answers, with the same counts.
	if err := app.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := scrapeMetrics(t, h)
	for _, s := range [][]string{
		{"sluice_flow_items_done", "flow", "titles"},
		{"sluice_runs_finished_total", "function", "ask", "status", "completed"},
		{"sluice_limit_capacity", "key", "groq", "limit", "tpm"},
	} {
		if a, b := f.must(t, s[0], s[1:]...), after.must(t, s[0], s[1:]...); a != b {
			t.Errorf("%v: %v before the app stopped, %v after", s, a, b)
		}
	}
}

// A gateway built in the app's process shares the app's registry: one
// /metrics answers for both, each series defined once, and a gateway
// whose key name an app provider already uses is refused, not a panic.
func TestMetricsGatewayShareAppRegistry(t *testing.T) {
	t.Parallel()
	limits := governor.Limits{governor.TPM: 50_000, governor.RPM: 500}
	_, pc := simProvider(t, limits)
	app := newApp(t, sluice.Config{DatabaseURL: filepath.Join(t.TempDir(), "s.db"),
		Providers: []sluice.Provider{{Name: "groq", LLM: pc, Limits: limits}}})
	registerCall(t, app, run.Function{ID: "ask", Event: "ask"})
	set, err := metrics.On(app.MetricsRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(context.Background(), gateway.Config{Upstream: pc.BaseURL, Profile: llm.Groq, Key: "gw", Limits: limits, Metrics: set})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(context.Background(), gateway.Config{Upstream: pc.BaseURL, Profile: llm.Groq, Key: "groq", Metrics: set}); err == nil || !strings.Contains(err.Error(), `"groq"`) {
		t.Errorf("a gateway on the key name of the app's provider: %v, want an error naming it", err)
	}
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := sendWait(t, app, "ask", "one", ask{MaxTokens: 30}); st.Status != run.Completed {
		t.Fatalf("app call: %s %s", st.Status, st.Error)
	}
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"model":"sim-model","max_tokens":30,"messages":[{"role":"user","content":"hi"}]}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("gateway call: %d %s", rec.Code, rec.Body)
	}
	for name, h := range map[string]http.Handler{"the app's": app.MetricsHandler(), "the gateway's": gw} {
		f := scrapeMetrics(t, h)
		for _, s := range [][]string{
			{"sluice_gateway_requests_total", "key", "gw", "flow", "default", "code", "200"},
			{"sluice_flow_admissions_total", "key", "gw", "flow", "default"},
			{"sluice_flow_admissions_total", "key", "groq", "flow", "ask"},
			{"sluice_flow_admission_wait_seconds", "key", "gw", "flow", "default"},
			{"sluice_flow_tokens_total", "key", "gw", "flow", "default", "kind", "output"},
			{"sluice_runs_finished_total", "function", "ask", "status", "completed"},
		} {
			if got := f.must(t, s[0], s[1:]...); got <= 0 {
				t.Errorf("%s /metrics: %v is %v", name, s, got)
			}
		}
		for _, key := range []string{"gw", "groq"} {
			if got := f.must(t, "sluice_limit_capacity", "key", key, "limit", "tpm"); got != 50_000 {
				t.Errorf("%s /metrics: TPM capacity of %s is %v", name, key, got)
			}
		}
		if _, ok := f.value("sluice_flow_admissions_total", "key", "gw", "flow", "ask"); ok {
			t.Errorf("%s /metrics: the app's flow counted on the gateway's key", name)
		}
		f.must(t, "go_goroutines")
	}
}
