package sluice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// A backfill with no InFlight setting keeps as many calls going as its
// key's quota and the provider's latency need: 3,000 items, one per call,
// on a key of 600 calls a minute, reach at least 90 % of the quota in the
// second minute whatever the latency — 50 calls in flight at 5 s, 200 at
// 20 s — and every item is saved once, with one call each. The app, its
// database and the provider share the bubble's clock (see inBubble), so
// the minutes are the clock's, not the machine's.
//
// Under the race detector, which slows every database write several times
// (the three take about four minutes of the machine without it), it runs
// the 5 s latency only, with 1,500 items: enough to last the second
// minute.
func TestBackfillInFlightFollowsTheQuota(t *testing.T) {
	t.Parallel()
	latencies, n := []time.Duration{time.Second, 5 * time.Second, 20 * time.Second}, 3000
	if raceOn {
		latencies, n = latencies[1:2], 1500
	}
	for _, latency := range latencies {
		t.Run(latency.String(), func(t *testing.T) {
			t.Parallel()
			backfillAtQuota(t, latency, n)
		})
	}
}

// backfillAtQuota runs a backfill of n items on a key of 600 calls a
// minute whose answers take latency (±50 %), and checks its second minute,
// its health then, and that every item is saved once.
func backfillAtQuota(t *testing.T, latency time.Duration, n int) {
	url := "sqlite:" + t.TempDir() + "/inflight.db"
	inBubble(t, func(t *testing.T) {
		const perMinute = 600
		limits := governor.Limits{governor.RPM: perMinute}
		var mu sync.Mutex
		var admitted []time.Time // when the provider took each call
		model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: limits, Wire: true, Latency: latency, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		client := testenv.ServePipe(t, sim.NewServer(model, sim.ServerConfig{OnFinish: func(c sim.Call) {
			mu.Lock()
			defer mu.Unlock()
			admitted = append(admitted, c.Start)
		}}))
		app := newApp(t, sluice.Config{
			DatabaseURL: url, PollInterval: time.Second, HealthEvery: 10 * time.Second,
			Providers: []sluice.Provider{{Name: "groq", Limits: limits, LLM: llm.Config{BaseURL: "http://sim/v1", Profile: llm.Groq, HTTPClient: client}}},
		})
		saves := map[string]int{}
		all := make(chan struct{})
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("item-%05d", i)
		}
		err = sluice.RegisterBackfill(app, sluice.Backfill[string]{
			Backfill: run.Backfill{ID: "notes", MaxBatch: 1},
			Pending: func(_ context.Context, after string, limit int) ([]string, error) {
				mu.Lock()
				defer mu.Unlock()
				var out []string
				for _, k := range keys[min(len(keys), searchAfter(keys, after)):] {
					if saves[k] == 0 && len(out) < limit {
						out = append(out, k)
					}
				}
				return out, nil
			},
			Load: func(_ context.Context, ids []string) (map[string]string, error) {
				out := map[string]string{}
				for _, id := range ids {
					out[id] = "the text of " + id
				}
				return out, nil
			},
			Request: func(its []sluice.Item[string]) (*llm.ChatRequest, error) {
				return &llm.ChatRequest{Model: "llama-3.1-8b-instant", MaxTokens: 10, Messages: []llm.Message{{Role: "user", Content: its[0].Data}}}, nil
			},
			Parse: func(_ *llm.ChatResponse, its []sluice.Item[string]) ([]string, error) {
				if len(its) != 1 {
					return nil, fmt.Errorf("a batch of %d items, want 1", len(its))
				}
				return []string{"a note"}, nil
			},
			Save: func(_ context.Context, _ sluice.Tx, it sluice.Item[string], _ string) error {
				mu.Lock()
				defer mu.Unlock()
				saves[it.Key]++
				if len(saves) == n && saves[it.Key] == 1 {
					close(all)
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Its health at the end of the second minute, as GET /v1/flows
		// answers it.
		time.Sleep(time.Until(began.Add(2 * time.Minute)))
		f := flowOf(t, app, "notes")
		<-all
		mu.Lock()
		defer mu.Unlock()
		second := 0
		for _, at := range admitted {
			if d := at.Sub(began); d >= time.Minute && d < 2*time.Minute {
				second++
			}
		}
		hist := make([]int, 40)
		for _, at := range admitted {
			hist[min(int(at.Sub(began)/(10*time.Second)), 39)]++
		}
		t.Logf("latency %v: calls the provider took in each 10 s: %v", latency, hist)
		t.Logf("latency %v: %d calls in the second minute; at its end %d in flight, target %d, limited by %q",
			latency, second, f.InFlight, f.InFlightTarget, f.LimitedBy)
		if second < perMinute*9/10 {
			t.Errorf("%d calls in the second minute, want at least 90 %% of the quota's %d", second, perMinute)
		}
		if need := int(latency.Seconds() * perMinute / 60); f.InFlightTarget < need || f.LimitedBy != "quota" {
			t.Errorf("health after two minutes %+v: want a target of at least %d calls, limited by the quota", f, need)
		}
		for _, k := range keys {
			if saves[k] != 1 {
				t.Fatalf("item %s saved %d times, want once", k, saves[k])
			}
		}
		if len(admitted) != n {
			t.Errorf("the provider took %d calls for %d items of one each: want one call per item", len(admitted), n)
		}
	})
}

// searchAfter is where the keys after after begin in sorted keys.
func searchAfter(keys []string, after string) int {
	i, found := slices.BinarySearch(keys, after)
	if found {
		i++
	}
	return i
}

// flowOf is job's entry in the app's GET /v1/flows.
func flowOf(t *testing.T, app *sluice.App, job string) health.Flow {
	t.Helper()
	rec := httptest.NewRecorder()
	app.Handler(sluice.HandlerConfig{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/flows", nil))
	var body struct {
		Flows []health.Flow `json:"flows"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET /v1/flows: %v: %s", err, rec.Body.String())
	}
	for _, f := range body.Flows {
		if f.Name == job {
			return f
		}
	}
	t.Fatalf("GET /v1/flows names no %s: %s", job, rec.Body.String())
	return health.Flow{}
}
