package sluice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// article is an item of the story's backfills.
type article struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// articles is the app's table, in memory: what each backfill has saved.
type articles struct {
	mu    sync.Mutex
	all   map[string]string            // id → text
	saved map[string]map[string]string // backfill → id → output
}

func (a *articles) pending(backfill string) func(context.Context, string, int) ([]string, error) {
	return func(_ context.Context, after string, limit int) ([]string, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		var ids []string
		for id := range a.all {
			if _, done := a.saved[backfill][id]; !done && id > after {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		return ids[:min(limit, len(ids))], nil
	}
}

func (a *articles) load(_ context.Context, ids []string) (map[string]article, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]article{}
	for _, id := range ids {
		if t, ok := a.all[id]; ok {
			out[id] = article{ID: id, Text: t}
		}
	}
	return out, nil
}

// alerts records the webhook's deliveries.
type alerts struct {
	mu  sync.Mutex
	got []map[string]any
}

func (a *alerts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var v map[string]any
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.got = append(a.got, v)
	a.mu.Unlock()
}

// states is the states of job's alerts, in the order they came.
func (a *alerts) states(job string) []any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []any
	for _, v := range a.got {
		if v["job"] == job {
			out = append(out, v["state"])
		}
	}
	return out
}

func (a *alerts) of(job, state string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.got {
		if v["job"] == job && (state == "" || v["state"] == state) {
			n++
		}
	}
	return n
}

// jumpClock is the wall clock, put forward as far as the test has jumped
// it: time that passes at once, when the test decides, and never else.
type jumpClock struct{ ahead atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

func (c *jumpClock) jump(d time.Duration) { c.ahead.Add(int64(d)) }

// The story: three backfills share one key — analysis, English summaries,
// and English titles that wait for the summaries. The titles' calls keep
// failing; the other two progress. The titles are reported failing, then
// stalled once the threshold has passed with titles left (never because
// their items are old), /readyz names them, one alert goes out; when the
// calls work again the titles catch up, recovery is reported once, and
// /readyz is ready again.
//
// The threshold passes when the test puts the app's clock forward by it,
// once the titles are seen failing: on the wall clock alone a loaded
// machine could let the titles go quiet past a short threshold while
// catching up, and stall again. The titles' threshold, an hour, is far
// longer than the test; the others', a day, is longer than the jump.
func TestBackfillStoryStallAndRecovery(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		_, pc := simProvider(t, governor.Limits{governor.TPM: 10_000_000, governor.RPM: 100_000})
		hook := &alerts{}
		hookSrv := httptest.NewServer(hook)
		t.Cleanup(hookSrv.Close)
		clk := &jumpClock{}
		app, err := sluice.New(context.Background(), sluice.Config{
			DatabaseURL:  url,
			Now:          clk.Now,
			PollInterval: 20 * time.Millisecond,
			RetryBase:    time.Millisecond, RetryMax: 5 * time.Millisecond,
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Providers:    []sluice.Provider{{Name: "groq", LLM: pc, Limits: governor.Limits{governor.TPM: 10_000_000, governor.RPM: 100_000}}},
			Flows:        []governor.FlowConfig{{Name: "analysis", Weight: 2}, {Name: "summaries_en"}, {Name: "titles_en"}},
			AlertWebhook: hookSrv.URL,
			HealthEvery:  50 * time.Millisecond,
			HistoryEvery: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Stop(context.Background()) })

		began := time.Now()

		// A year of old articles: their age must never make a stall.
		db := &articles{all: map[string]string{}, saved: map[string]map[string]string{}}
		for i := range 40 {
			db.all[fmt.Sprintf("2025-%03d", i)] = strings.Repeat("ニュース ", 20+i%7)
		}
		var titleModel atomic.Value
		titleModel.Store("") // no model: the provider refuses every call with a 400
		backfill := func(id, after string, batch int, stall time.Duration, tokensPerItem int, model func() string) {
			t.Helper()
			db.saved[id] = map[string]string{}
			err := sluice.RegisterBackfill(app, sluice.Backfill[article]{
				// One batch at a time: the story is about health, and
				// several runs of each, which BatchesPerRun makes; calls in
				// flight at once have tests of their own.
				Backfill: run.Backfill{ID: id, After: after, MaxBatch: batch, StallAfter: stall,
					Poll: 50 * time.Millisecond, BatchesPerRun: 4, InFlight: 1},
				Pending: db.pending(id),
				Load:    db.load,
				Request: func(items []sluice.Item[article]) (*llm.ChatRequest, error) {
					var b strings.Builder
					for _, it := range items {
						b.WriteString(it.Data.Text + "\n")
					}
					return &llm.ChatRequest{Model: model(), MaxTokens: tokensPerItem * len(items),
						Messages: []llm.Message{{Role: "user", Content: b.String()}}}, nil
				},
				Parse: func(resp *llm.ChatResponse, items []sluice.Item[article]) ([]string, error) {
					out := make([]string, len(items))
					for i, it := range items {
						out[i] = id + " of " + it.Key
					}
					return out, nil
				},
				Save: func(ctx context.Context, tx sluice.Tx, it sluice.Item[article], output string) error {
					db.mu.Lock()
					defer db.mu.Unlock()
					if _, twice := db.saved[id][it.Key]; twice {
						return fmt.Errorf("%s of %s saved twice", id, it.Key)
					}
					db.saved[id][it.Key] = output
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		fixed := func() string { return "llama-3.1-8b-instant" }
		const stallAfter = time.Hour
		backfill("analysis", "", 5, 24*time.Hour, 100, fixed)
		backfill("summaries_en", "", 2, 24*time.Hour, 55, fixed)
		backfill("titles_en", "summaries_en", 5, stallAfter, 8, func() string { return titleModel.Load().(string) })
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		api := httptest.NewServer(app.Handler(sluice.HandlerConfig{}))
		t.Cleanup(api.Close)
		flows := func() map[string]map[string]any {
			resp, err := http.Get(api.URL + "/v1/flows")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Flows []map[string]any }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			out := map[string]map[string]any{}
			for _, f := range body.Flows {
				out[f["name"].(string)] = f
			}
			return out
		}
		ready := func() (int, string) {
			resp, err := http.Get(api.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		waitFor := func(what string, ok func() bool) {
			t.Helper()
			for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(20 * time.Millisecond) { // poll interval: until ok (the loop's deadline bounds it)
				if time.Now().After(deadline) {
					t.Fatalf("%s: not within a minute; flows %v; alerts %v", what, flows(), hook.got)
				}
			}
		}

		// The two that work progress, and finish; the titles fail.
		waitFor("titles failing while the others progress", func() bool {
			f := flows()
			return f["titles_en"]["state"] == "failing" && f["summaries_en"]["done"] != nil
		})
		clk.jump(stallAfter)
		waitFor("titles stalled after the threshold", func() bool { return flows()["titles_en"]["state"] == "stalled" })
		f := flows()["titles_en"]
		if f["consecutive_failures"] == nil || !strings.Contains(fmt.Sprint(f["last_error"]), "model") {
			t.Fatalf("stalled titles %v: want their failures and the error naming the model", f)
		}
		if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "titles_en") {
			t.Fatalf("/readyz %d %s: want 503 naming titles_en", code, body)
		}
		waitFor("one stall alert", func() bool { return hook.of("titles_en", "stalled") == 1 })
		for _, id := range []string{"analysis", "summaries_en"} {
			if st := flows()[id]["state"]; st == "stalled" || st == "failing" || hook.of(id, "") != 0 {
				t.Fatalf("%s is %v with %d alerts: its items are a year old, but it progressed", id, st, hook.of(id, ""))
			}
		}

		// The calls work again: the titles catch up and recover, once.
		titleModel.Store("llama-3.1-8b-instant")
		waitFor("titles done", func() bool {
			db.mu.Lock()
			defer db.mu.Unlock()
			return len(db.saved["titles_en"]) == 40
		})
		waitFor("one recovery alert", func() bool { return hook.of("titles_en", "") == 2 })
		waitFor("ready again", func() bool { code, _ := ready(); return code == http.StatusOK })
		if hook.of("titles_en", "stalled") != 1 {
			t.Fatalf("alerts %v: want one stall and one recovery of titles_en", hook.got)
		}
		db.mu.Lock()
		defer db.mu.Unlock()
		for _, id := range []string{"analysis", "summaries_en", "titles_en"} {
			if len(db.saved[id]) != 40 {
				t.Fatalf("%s saved %d of 40 articles", id, len(db.saved[id]))
			}
		}

		// What sluice report reads: the configuration the app started
		// with, and the titles' samples — stalled, then catching up.
		st := testenv.OpenStore(t, url)
		versions, err := st.ConfigVersions(context.Background(), began)
		if err != nil || len(versions) != 1 || versions[0].Source != "app" || !strings.Contains(string(versions[0].Config), `"titles_en"`) {
			t.Fatalf("config versions %+v, %v: want the app's, naming its backfills", versions, err)
		}
		// A sample counts what was done since the one before, so the one
		// with the catching up may be written a moment after it.
		var stalled bool
		var done int64
		var n int
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // poll interval: until the catching up is sampled (the loop's deadline bounds it)
			samples, err := st.Samples(context.Background(), began, clk.Now().Add(time.Minute), "titles_en")
			if err != nil {
				t.Fatal(err)
			}
			stalled, done, n = false, 0, len(samples)
			for _, s := range samples {
				stalled = stalled || s.State == "stalled"
				done += s.Done
			}
			if stalled && done == 40 || time.Now().After(deadline) {
				break
			}
		}
		if !stalled || done != 40 {
			t.Errorf("titles_en: %d samples, stalled in one: %v, %d done in them: want a stall and the 40 titles caught up", n, stalled, done)
		}
		// Caught up, the titles stalled no more.
		if states := hook.states("titles_en"); len(states) != 2 || states[0] != "stalled" || states[1] == "stalled" {
			t.Errorf("titles_en alerts in states %v: want one stall, then one recovery", states)
		}
	})
}

// A backfill After another starts a run as soon as the other saves items
// it waits for, not at its next Poll: with an hour's Poll, the titles of
// all the summaries saved are done within the test.
func TestBackfillAfterStartsOnSave(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		limits := governor.Limits{governor.TPM: 10_000_000, governor.RPM: 100_000}
		_, pc := simProvider(t, limits)
		app, err := sluice.New(context.Background(), sluice.Config{
			DatabaseURL:  url,
			PollInterval: 20 * time.Millisecond,
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Providers:    []sluice.Provider{{Name: "groq", LLM: pc, Limits: limits}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Stop(context.Background()) })
		db := &articles{all: map[string]string{}, saved: map[string]map[string]string{}}
		for i := range 12 {
			db.all[fmt.Sprintf("a%02d", i)] = "記事"
		}
		for _, id := range []string{"summary", "title"} {
			db.saved[id] = map[string]string{}
			after := ""
			if id == "title" {
				after = "summary"
			}
			err := sluice.RegisterBackfill(app, sluice.Backfill[article]{
				Backfill: run.Backfill{ID: id, After: after, MaxBatch: 3, Poll: time.Hour, InFlight: 1},
				Pending:  db.pending(id),
				Load:     db.load,
				Request: func(items []sluice.Item[article]) (*llm.ChatRequest, error) {
					return &llm.ChatRequest{Model: "llama-3.1-8b-instant", MaxTokens: 10 * len(items),
						Messages: []llm.Message{{Role: "user", Content: "translate"}}}, nil
				},
				Parse: func(_ *llm.ChatResponse, items []sluice.Item[article]) ([]string, error) {
					return make([]string, len(items)), nil
				},
				Save: func(_ context.Context, _ sluice.Tx, it sluice.Item[article], _ string) error {
					db.mu.Lock()
					defer db.mu.Unlock()
					db.saved[id][it.Key] = "done"
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		testenv.WaitUntil(t, 20*time.Millisecond, func() (bool, string) {
			db.mu.Lock()
			defer db.mu.Unlock()
			return len(db.saved["title"]) == len(db.all), fmt.Sprintf("%d summaries and %d titles of %d saved",
				len(db.saved["summary"]), len(db.saved["title"]), len(db.all))
		})
	})
}
