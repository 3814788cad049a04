package sluice_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// simProvider serves a provider model over HTTP for the test's lifetime.
func simProvider(t *testing.T, limits governor.Limits) (*forecast.Model, llm.Config) {
	t.Helper()
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: limits, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return model, llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq}
}

type ask struct {
	MaxTokens int `json:"maxTokens"`
}

// registerAsk registers a function making one governed call of the event's
// max_tokens.
func registerAsk(t *testing.T, app *sluice.App, cfg run.Function) {
	t.Helper()
	err := sluice.Register(app, cfg, func(ctx *sluice.Context, ev sluice.Event[ask]) (int64, error) {
		resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{
			Model:     "sim-model",
			Messages:  []llm.Message{{Role: "user", Content: "Summarize the quarterly report."}},
			MaxTokens: ev.Data.MaxTokens,
		})
		if err != nil {
			return 0, err
		}
		return resp.Usage.CompletionTokens, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func runTo(t *testing.T, app *sluice.App, id string, data any) run.Summary {
	t.Helper()
	sent, err := app.Send(context.Background(), "ask", id, data)
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

// The day's usage is in the database: an app started after another stopped
// admits only what is left of the day's TPD budget.
func TestDayUsageSurvivesRestart(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		// The provider itself has no day limit here: only the governor can
		// refuse, so a refused call shows what the governor remembers.
		model, client := simProvider(t, governor.Limits{})
		const tpd = 5000
		provider := sluice.Provider{Name: "groq", LLM: client, Limits: governor.Limits{governor.TPD: tpd}, DayBurst: -1}

		first := newApp(t, sluice.Config{DatabaseURL: url, Providers: []sluice.Provider{provider}})
		registerAsk(t, first, run.Function{ID: "ask", Event: "ask"})
		if err := first.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b", "c", "d"} {
			if st := runTo(t, first, id, ask{MaxTokens: 1000}); st.Status != "completed" {
				t.Fatalf("run %s: %s %s", id, st.Status, st.Error)
			}
		}
		stats, err := first.Stats(context.Background(), "groq")
		if err != nil {
			t.Fatal(err)
		}
		spent := stats.Limits[governor.TPD].Used
		if spent < 4000 || spent > tpd {
			t.Fatalf("first app spent %d of the day's %d tokens, want the four calls' ~4,100", spent, tpd)
		}
		if err := first.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}

		second := newApp(t, sluice.Config{DatabaseURL: url, Providers: []sluice.Provider{provider}, MaxInlineWait: 100 * time.Millisecond})
		registerAsk(t, second, run.Function{ID: "ask", Event: "ask", Timeout: 3 * time.Second})
		if err := second.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		stats, err = second.Stats(context.Background(), "groq")
		if err != nil {
			t.Fatal(err)
		}
		if got := stats.Limits[governor.TPD].Used; got != spent {
			t.Fatalf("after the restart the governor counts %d TPD tokens used, want the %d spent before it", got, spent)
		}
		left := tpd - spent
		// What is left of the day is admitted…
		if st := runTo(t, second, "small", ask{MaxTokens: int(left) / 4}); st.Status != "completed" {
			t.Fatalf("a call within what is left of the day: %s %s", st.Status, st.Error)
		}
		calls := model.Stats().Requests
		// …more than that is not: the step waits for quota (until the run's
		// timeout here) and the provider never sees the call.
		st := runTo(t, second, "big", ask{MaxTokens: int(left) + 200})
		if st.Status != "timed_out" || !strings.Contains(st.Error, "run deadline of") || st.Step != "call" {
			t.Fatalf("a call past what is left of the day: run %s in step %q (%s), want it timed out waiting for quota in step call", st.Status, st.Step, st.Error)
		}
		if got := model.Stats().Requests; got != calls {
			t.Fatalf("the provider received %d calls past the day's budget", got-calls)
		}
		d := runDetail(t, second, st.ID)
		if len(d.Steps) == 0 || len(d.Steps[0].FailedAttempts) == 0 || d.Steps[0].FailedAttempts[0].Class != "quota_wait" ||
			!strings.Contains(d.Steps[0].FailedAttempts[0].Error, "waiting for quota on groq") {
			t.Fatalf("the refused call's step %+v does not record a wait for quota", d.Steps)
		}
		// The governor expects room only as the day's charges age out, an
		// hour and more from now; the step sleeps at most MaxQuotaSleep of
		// it before asking again.
		fa := d.Steps[0].FailedAttempts[0]
		est, ok := estimatedWait(fa.Error)
		if !ok || est < time.Hour {
			t.Fatalf("the wait %q: want the governor's estimate in it, an hour or more", fa.Error)
		}
		if got := time.Duration(fa.RetryAfterMS * float64(time.Millisecond)); got != engine.MaxQuotaSleep {
			t.Errorf("the step sleeps %v of an estimated %v, want MaxQuotaSleep (%v)", got, est, engine.MaxQuotaSleep)
		}
	})
}

type runView struct {
	Steps []struct {
		Name           string `json:"name"`
		FailedAttempts []struct {
			Class        string  `json:"class"`
			Error        string  `json:"error"`
			RetryAfterMS float64 `json:"retry_after_ms"`
		} `json:"failed_attempts"`
	} `json:"steps"`
}

// estimatedWait is the governor's estimate in the message of a wait for
// quota ("…; estimated further wait 1h2m3s").
func estimatedWait(msg string) (time.Duration, bool) {
	_, after, ok := strings.Cut(msg, "estimated further wait ")
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(strings.Fields(after)[0])
	return d, err == nil
}

// runDetail reads a run through the app's HTTP API.
func runDetail(t *testing.T, app *sluice.App, id string) runView {
	t.Helper()
	rec := httptest.NewRecorder()
	app.Handler(sluice.HandlerConfig{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/runs/"+id, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET run %s: %d %s", id, rec.Code, rec.Body)
	}
	var d runView
	if err := json.NewDecoder(rec.Body).Decode(&d); err != nil {
		t.Fatalf("decode run %s: %v", id, err)
	}
	return d
}

// A provider that accepts a call and never answers fails the attempt at
// the first-byte deadline — the provider's, or one set for the call — the
// step retries it and the run completes, its failed attempt classed retry
// and naming the deadline.
func TestHungCallIsRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		provider, perCall time.Duration
	}{{"provider deadline", 300 * time.Millisecond, 0}, {"call deadline", time.Hour, 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testenv.Databases(t, func(t *testing.T, url string) {
				var calls atomic.Int32
				release := make(chan struct{})
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if calls.Add(1) == 1 {
						select { // the first call hangs until the test ends
						case <-release:
						case <-r.Context().Done():
						}
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`))
				}))
				t.Cleanup(func() { close(release); srv.Close() })
				provider := sluice.Provider{Name: "p", Limits: governor.Limits{governor.RPM: 100},
					LLM: llm.Config{BaseURL: srv.URL + "/v1", Timeouts: llm.Timeouts{FirstByte: tc.provider}}}
				app := newApp(t, sluice.Config{DatabaseURL: url, Providers: []sluice.Provider{provider}, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
				err := sluice.Register(app, run.Function{ID: "ask", Event: "ask", Timeout: time.Minute}, func(ctx *sluice.Context, ev sluice.Event[ask]) (string, error) {
					resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{Model: "m", MaxTokens: 10, Messages: []llm.Message{{Role: "user", Content: "hi"}}},
						sluice.CallTimeouts(llm.Timeouts{FirstByte: tc.perCall}))
					if err != nil {
						return "", err
					}
					return resp.ID, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := app.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				st := runTo(t, app, "hung", ask{MaxTokens: 10})
				if st.Status != "completed" || calls.Load() != 2 {
					t.Fatalf("run %s (%s) after %d calls, want completed after 2", st.Status, st.Error, calls.Load())
				}
				d := runDetail(t, app, st.ID)
				if len(d.Steps) != 1 || len(d.Steps[0].FailedAttempts) != 1 || d.Steps[0].FailedAttempts[0].Class != "retry" ||
					!strings.Contains(d.Steps[0].FailedAttempts[0].Error, "first byte of the response within 300ms") {
					t.Fatalf("steps %+v: want one failed attempt, classed retry, naming the 300ms first-byte deadline", d.Steps)
				}
			})
		})
	}
}
