package sluice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// target is a simulated provider key behind a door that counts the calls
// it lets through by model, and fails every call while failing is set.
type target struct {
	model   *forecast.Model
	failing atomic.Bool
	failed  atomic.Int64
	mu      sync.Mutex
	models  map[string]int
}

func (tg *target) calls() map[string]int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	out := map[string]int{}
	for k, v := range tg.models {
		out[k] = v
	}
	return out
}

func newTarget(t *testing.T, limits governor.Limits) (*target, llm.Config) {
	t.Helper()
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "openai", Limits: limits, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{})
	tg := &target{model: model, models: map[string]int{}}
	door := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			body, _ := io.ReadAll(r.Body)
			if tg.failing.Load() {
				tg.failed.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`)
				return
			}
			var req struct{ Model string }
			_ = json.Unmarshal(body, &req)
			tg.mu.Lock()
			tg.models[req.Model]++
			tg.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(door.Close)
	return tg, llm.Config{BaseURL: door.URL + "/v1", Profile: llm.OpenAI}
}

// answer is what a routed call's run records of it.
type answer struct {
	Target string `json:"target"`
	Cost   int64  `json:"cost"`
	Output int64  `json:"output"`
}

func registerRouted(t *testing.T, app *sluice.App, route string) {
	t.Helper()
	err := sluice.Register(app, run.Function{ID: "ask", Event: "ask", Provider: route, Retries: 10},
		func(ctx *sluice.Context, ev sluice.Event[ask]) (answer, error) {
			resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{
				Model:     "whatever-the-caller-says",
				Messages:  []llm.Message{{Role: "user", Content: "Summarize the quarterly report."}},
				MaxTokens: ev.Data.MaxTokens,
			})
			if err != nil {
				return answer{}, err
			}
			return answer{Target: resp.Target, Cost: resp.Cost, Output: resp.Usage.CompletionTokens}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func result(t *testing.T, app *sluice.App, st run.Summary) answer {
	t.Helper()
	if st.Status != "completed" {
		t.Fatalf("run %s: %s %s", st.ID, st.Status, st.Error)
	}
	a, err := sluice.Result[answer](context.Background(), app, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Calls go to the free target while it admits them, to the paid one when
// it cannot admit within the route's max wait; each call runs on one
// target, with that target's model, and records where and at what cost.
func TestRouteCheapestFirstThenFallback(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		free, freeLLM := newTarget(t, governor.Limits{})
		paid, paidLLM := newTarget(t, governor.Limits{})
		price := governor.Price{Input: 1, Output: 4}
		app := newApp(t, sluice.Config{DatabaseURL: url,
			Providers: []sluice.Provider{
				// The free model's TPM holds two calls of 1,000 max_tokens.
				{Name: "free", LLM: freeLLM, Model: "free-model", Limits: governor.Limits{governor.TPM: 2_100}},
				{Name: "paid", LLM: paidLLM, Model: "paid-model", Price: price},
			},
			Routes: []sluice.Route{{Name: "both", Targets: []string{"paid", "free"}, MaxWait: -1}},
		})
		registerRouted(t, app, "both")
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		by := map[string]int{}
		for i := range 5 {
			a := result(t, app, runTo(t, app, fmt.Sprint("r", i), ask{MaxTokens: 1000}))
			by[a.Target]++
			switch a.Target {
			case "free":
				if a.Cost != 0 {
					t.Errorf("a free call cost %d", a.Cost)
				}
			case "paid":
				if want := price.Of(governor.Cost{Output: a.Output}); a.Cost < want {
					t.Errorf("a paid call of %d output tokens recorded cost %d, want at least %d", a.Output, a.Cost, want)
				}
			default:
				t.Fatalf("run %d answered by %q", i, a.Target)
			}
		}
		if by["free"] != 2 || by["paid"] != 3 {
			t.Fatalf("answers by target %v: want the first 2 on the free key (its TPM holds 2), the rest on the paid one", by)
		}
		fc, pc := free.calls(), paid.calls()
		if fc["free-model"] != 2 || pc["paid-model"] != 3 || len(fc) != 1 || len(pc) != 1 {
			t.Fatalf("calls the providers received, by model: free %v, paid %v", fc, pc)
		}
	})
}

// failingPair is a primary whose calls fail until the test says, and a
// fallback, routed in that order as route "r" on an app of url; a failing
// target is out for cooldown, and at most maxCooldown.
func failingPair(t *testing.T, url string, failures int, cooldown, maxCooldown time.Duration) (app *sluice.App, primary, fallback *target) {
	t.Helper()
	primary, primaryLLM := newTarget(t, governor.Limits{})
	fallback, fallbackLLM := newTarget(t, governor.Limits{})
	primary.failing.Store(true)
	app = newApp(t, sluice.Config{DatabaseURL: url,
		Providers: []sluice.Provider{
			{Name: "primary", LLM: primaryLLM, Model: "m1"},
			{Name: "fallback", LLM: fallbackLLM, Model: "m2"},
		},
		Routes: []sluice.Route{{Name: "r", Targets: []string{"primary", "fallback"}, InOrder: true, Failures: failures,
			Cooldown: cooldown, MaxCooldown: maxCooldown}},
	})
	return app, primary, fallback
}

// A target that fails is left out after Failures failures in a row: the
// retries of the runs move to the other target, and once the first works
// again the route comes back to it. No run's call is answered twice.
func TestRouteFailsOverAndComesBack(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		app, primary, fallback := failingPair(t, url, 2, 50*time.Millisecond, 200*time.Millisecond)
		registerRouted(t, app, "r")
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if a := result(t, app, runTo(t, app, fmt.Sprint("down", i), ask{MaxTokens: 50})); a.Target != "fallback" {
				t.Fatalf("primary failing: run %d answered by %q", i, a.Target)
			}
		}
		failed := primary.failed.Load()
		if failed < 2 || len(primary.calls()) != 0 || fallback.calls()["m2"] != 3 {
			t.Fatalf("primary failed %d calls and answered %v; fallback answered %v", failed, primary.calls(), fallback.calls())
		}
		primary.failing.Store(false)
		// Once its cooldown passes, the primary gets a call again and keeps them.
		runs := 6
		deadline := time.Now().Add(testenv.Budget)
		for i := 0; ; i++ {
			runs++
			a := result(t, app, runTo(t, app, fmt.Sprint("up", i), ask{MaxTokens: 50}))
			if a.Target == "primary" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the primary works again and no run came back to it in %d runs", i+1)
			}
		}
		for i := range 3 {
			if a := result(t, app, runTo(t, app, fmt.Sprint("back", i), ask{MaxTokens: 50})); a.Target != "primary" {
				t.Fatalf("primary back: run %d answered by %q", i, a.Target)
			}
		}
		// Every run's call was answered once, by one target.
		if answered := primary.model.Stats().Requests + fallback.model.Stats().Requests; answered != int64(runs) {
			t.Fatalf("the providers answered %d calls for %d runs", answered, runs)
		}
	})
}

// A call that fits no target is refused at once, naming each target's limit.
func TestRouteRefusesWhatFitsNoTarget(t *testing.T) {
	t.Parallel()
	a, aLLM := newTarget(t, governor.Limits{})
	b, bLLM := newTarget(t, governor.Limits{})
	app := newApp(t, sluice.Config{DatabaseURL: filepath.Join(t.TempDir(), "sluice.db"),
		Providers: []sluice.Provider{
			{Name: "a", LLM: aLLM, Limits: governor.Limits{governor.OTPM: 500}},
			{Name: "b", LLM: bLLM, Limits: governor.Limits{governor.OTPM: 800}},
		},
		Routes: []sluice.Route{{Name: "r", Targets: []string{"a", "b"}}},
	})
	registerRouted(t, app, "r")
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := runTo(t, app, "big", ask{MaxTokens: 1000})
	if st.Status != "failed" || !strings.Contains(st.Error, "a: ") || !strings.Contains(st.Error, "b: ") || !strings.Contains(st.Error, "OTPM") {
		t.Fatalf("a call over every target's OTPM: %s %q", st.Status, st.Error)
	}
	if a.model.Stats().Requests+b.model.Stats().Requests != 0 {
		t.Fatal("a provider received the call")
	}
	// What fits one target goes there.
	if ans := result(t, app, runTo(t, app, "mid", ask{MaxTokens: 700})); ans.Target != "b" {
		t.Fatalf("a call that fits only b answered by %q", ans.Target)
	}
}

func TestRouteConfigurationErrors(t *testing.T) {
	t.Parallel()
	p := []sluice.Provider{{Name: "a"}, {Name: "b"}}
	for _, tc := range []struct {
		r    sluice.Route
		want string
	}{
		{sluice.Route{Targets: []string{"a"}}, "no name"},
		{sluice.Route{Name: "a", Targets: []string{"b"}}, `name "a" is already`},
		{sluice.Route{Name: "r"}, "no targets"},
		{sluice.Route{Name: "r", Targets: []string{"a", "c"}}, `target "c" is no provider`},
		{sluice.Route{Name: "r", Targets: []string{"a", "a"}}, "listed twice"},
		{sluice.Route{Name: "r", Targets: []string{"a"}, MaxWait: 48 * time.Hour}, "over 24h"},
		{sluice.Route{Name: "r", Targets: []string{"a"}, Failures: -2}, "failures -2"},
	} {
		_, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: filepath.Join(t.TempDir(), "sluice.db"), Providers: p, Routes: []sluice.Route{tc.r}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
}

// A backfill over a route: while its primary fails, its batches go to the
// fallback; every item is saved once, and once the primary works again the
// batches come back to it.
func TestRouteBackfillFailsOver(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		app, primary, fallback := failingPair(t, url, 1, 10*time.Millisecond, 10*time.Millisecond)
		db := &articles{all: map[string]string{}, saved: map[string]map[string]string{"sum": {}}}
		add := func(from, to int) {
			db.mu.Lock()
			defer db.mu.Unlock()
			for i := from; i < to; i++ {
				db.all[fmt.Sprintf("a%03d", i)] = "text of article " + fmt.Sprint(i)
			}
		}
		add(0, 30)
		err := sluice.RegisterBackfill(app, sluice.Backfill[article]{
			Backfill: run.Backfill{ID: "sum", Provider: "r", MaxBatch: 3, Poll: 20 * time.Millisecond, InFlight: 2},
			Pending:  db.pending("sum"),
			Load:     db.load,
			Request: func(items []sluice.Item[article]) (*llm.ChatRequest, error) {
				var b strings.Builder
				for _, it := range items {
					b.WriteString(it.Data.Text + "\n")
				}
				return &llm.ChatRequest{Model: "any", MaxTokens: 20 * len(items), Messages: []llm.Message{{Role: "user", Content: b.String()}}}, nil
			},
			Parse: func(resp *llm.ChatResponse, items []sluice.Item[article]) ([]string, error) {
				out := make([]string, len(items))
				for i := range items {
					out[i] = resp.Target
				}
				return out, nil
			},
			Save: func(ctx context.Context, tx sluice.Tx, it sluice.Item[article], output string) error {
				db.mu.Lock()
				defer db.mu.Unlock()
				if _, twice := db.saved["sum"][it.Key]; twice {
					return fmt.Errorf("%s saved twice", it.Key)
				}
				db.saved["sum"][it.Key] = output
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		saved := func() (int, map[string]int) {
			db.mu.Lock()
			defer db.mu.Unlock()
			by := map[string]int{}
			for _, tg := range db.saved["sum"] {
				by[tg]++
			}
			return len(db.saved["sum"]), by
		}
		testenv.WaitUntil(t, 5*time.Millisecond, func() (bool, string) { // the first 30, while the primary fails
			n, _ := saved()
			return n >= 30, fmt.Sprintf("%d of 60 items saved with the primary failing", n)
		})
		if _, by := saved(); by["primary"] != 0 {
			t.Fatalf("items saved from the failing primary: %v", by)
		}
		primary.failing.Store(false)
		time.Sleep(20 * time.Millisecond) // its last time out (10ms) is over: the next call tries it
		add(30, 60)
		testenv.WaitUntil(t, 5*time.Millisecond, func() (bool, string) {
			n, _ := saved()
			return n >= 60, fmt.Sprintf("%d of 60 items saved", n)
		})
		_, by := saved()
		if by["primary"] == 0 || by["fallback"] < 30 || by["primary"]+by["fallback"] != 60 {
			t.Fatalf("items by target %v: want the fallback's while the primary failed, then the primary's", by)
		}
		if primary.failed.Load() == 0 {
			t.Fatal("the primary never failed a call")
		}
		// Each batch was answered once: the providers answered as many
		// calls as the doors let through.
		if got, want := primary.model.Stats().Requests+fallback.model.Stats().Requests, int64(primary.calls()["m1"]+fallback.calls()["m2"]); got != want || got > 60 {
			t.Fatalf("providers answered %d calls, the doors passed %d", got, want)
		}
	})
}
