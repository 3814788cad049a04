package backfill

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// bench is an engine on a real database with a provider model in front of
// it, and a source of items held in memory.
type bench struct {
	st  store.Store
	e   *engine.Engine
	p   *engine.Provider
	set *Set

	mu    sync.Mutex
	items map[string]string // key → text
}

func setup(t *testing.T, url string, limits governor.Limits) *bench {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := testenv.OpenStore(t, url)
	e, err := engine.New(ctx, engine.Config{Store: st, PollInterval: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: limits, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{})
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	client, err := llm.NewClient(llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq})
	if err != nil {
		t.Fatal(err)
	}
	gov, err := governor.New(governor.Config{Key: "groq", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	est, err := llm.NewEstimator(llm.EstimatorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e.SetClassifier(engine.ClassifyLLM)
	b := &bench{st: st, e: e, items: map[string]string{},
		p: &engine.Provider{Name: "groq", Client: client, Governor: gov, Estimator: est}}
	b.set = NewSet(e, st, log, nil)
	return b
}

// throughProxy points the bench's provider at the handler wrap makes
// around a simulator of model.
func (b *bench) throughProxy(t *testing.T, model forecast.ModelConfig, wrap func(*sim.Server) http.Handler) {
	t.Helper()
	m, err := forecast.NewModel(model)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(wrap(sim.NewServer(m, sim.ServerConfig{})))
	t.Cleanup(srv.Close)
	if b.p.Client, err = llm.NewClient(llm.Config{BaseURL: srv.URL + "/v1", Profile: llm.Groq}); err != nil {
		t.Fatal(err)
	}
}

// bfOut is the app table the test's savers write to.
const bfOut = `CREATE TABLE IF NOT EXISTS bf_out (backfill TEXT NOT NULL, item TEXT NOT NULL, output TEXT NOT NULL, writes BIGINT NOT NULL, PRIMARY KEY (backfill, item))`

func (b *bench) start(t *testing.T) {
	t.Helper()
	// The savers' table exists before any saves: created by a save, two
	// saves at once could race to create it on PostgreSQL.
	h, err := b.st.Handle()
	if err != nil {
		t.Fatal(err)
	}
	if h.Postgres != nil {
		_, err = h.Postgres.Exec(context.Background(), bfOut)
	} else {
		_, err = h.SQLite.Exec(bfOut)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Launch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.set.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.set.Stop()
		_ = b.e.Shutdown(10 * time.Second)
	})
}

func (b *bench) add(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		b.items[k] = "text of " + k
	}
}

// pending lists every item of the source: the records tell which are done.
func (b *bench) pending(_ context.Context, after string, limit int) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	for k := range b.items {
		if k > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys[:min(limit, len(keys))], nil
}

func (b *bench) load(_ context.Context, keys []string) (map[string]json.RawMessage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]json.RawMessage{}
	for _, k := range keys {
		if v, ok := b.items[k]; ok {
			out[k], _ = json.Marshal(v)
		}
	}
	return out, nil
}

// config is a backfill of the bench's items that saves "<id>:<key>" into
// bf_out, counting the writes, and rejects the items reject says.
func (b *bench) config(id string, reject func(key string) string) Config {
	return Config{
		Backfill: run.Backfill{ID: id, MaxBatch: 5, MaxRejects: 2, RetryAfter: time.Millisecond, Poll: 50 * time.Millisecond, BatchesPerRun: 3},
		Pending:  b.pending,
		Load:     b.load,
		Request: func(items []Item) (*llm.ChatRequest, error) {
			var text strings.Builder
			for _, it := range items {
				text.Write(it.Data)
				text.WriteByte('\n')
			}
			return &llm.ChatRequest{Model: "sim-model", MaxTokens: 20, Messages: []llm.Message{{Role: "user", Content: "Translate:\n" + text.String()}}}, nil
		},
		Parse: func(resp *llm.ChatResponse, items []Item) ([]string, error) {
			out := make([]string, len(items))
			for i, it := range items {
				out[i] = id + ":" + it.Key
			}
			return out, nil
		},
		Save: func(ctx context.Context, tx dbos.Tx, it Item, output string) error {
			if reason := reject(it.Key); reason != "" {
				return Reject(reason)
			}
			_, err := tx.Exec(ctx, `INSERT INTO bf_out (backfill, item, output, writes) VALUES ($1, $2, $3, 1)
				ON CONFLICT (backfill, item) DO UPDATE SET writes = bf_out.writes + 1`, id, it.Key, output)
			return err
		},
	}
}

// budget bounds a test's wait for an event (see testenv.Budget).
const budget = testenv.Budget

// waitUntil polls cond until it holds, failing the test with what cond
// last said if it does not within budget.
func waitUntil(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	testenv.WaitUntil(t, 20*time.Millisecond, cond)
}

// waitJob waits until done says the job's record is as wanted.
func (b *bench) waitJob(t *testing.T, name string, done func(store.Job) bool) store.Job {
	t.Helper()
	var j store.Job
	waitUntil(t, func() (bool, string) {
		var err error
		j, err = b.st.Job(context.Background(), name)
		return err == nil && done(j), fmt.Sprintf("job %s: %+v (%v)", name, j, err)
	})
	return j
}

// listedOnce records keys as items of backfill, as a run that listed them
// would, whether or not the source holds them now.
func (b *bench) listedOnce(t *testing.T, backfill string, keys ...string) {
	t.Helper()
	if _, err := b.st.AddItems(context.Background(), backfill, keys, time.Now(), ""); err != nil {
		t.Fatal(err)
	}
}

// writes reads bf_out: writes by item of backfill.
func (b *bench) writes(t *testing.T, backfill string) map[string]int64 {
	t.Helper()
	h, err := b.st.Handle()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	q := `SELECT item, writes FROM bf_out WHERE backfill = $1`
	type rows interface {
		Next() bool
		Scan(...any) error
	}
	var rs rows
	if h.Postgres != nil {
		r, err := h.Postgres.Query(context.Background(), q, backfill)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		rs = r
	} else {
		r, err := h.SQLite.QueryContext(context.Background(), q, backfill)
		if err != nil {
			t.Fatal(err)
		}
		defer func(r *sql.Rows) { _ = r.Close() }(r)
		rs = r
	}
	for rs.Next() {
		var k string
		var n int64
		if err := rs.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k%02d", i)
	}
	return out
}

// Every item is saved once, a rejected output is retried and then parked
// with its reason, and the runs' records add up to what was done.
func TestBackfillSavesEachItemOnce(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		b := setup(t, url, governor.Limits{})
		b.add(keys(23)...)
		err := b.set.Add(b.config("titles", func(k string) string {
			if k == "k07" {
				return "not English"
			}
			return ""
		}), b.p)
		if err != nil {
			t.Fatal(err)
		}
		b.start(t)
		j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved+j.Parked == 23 })
		if j.Saved != 22 || j.Parked != 1 || j.Pending != 0 || j.Rejected != 0 || j.LastProgressAt.IsZero() {
			t.Fatalf("job %+v: want 22 saved, 1 parked, nothing left", j)
		}
		w := b.writes(t, "titles")
		if len(w) != 22 {
			t.Fatalf("%d items written, want 22: %v", len(w), w)
		}
		for k, n := range w {
			if n != 1 || k == "k07" {
				t.Fatalf("item %s written %d times: want every item but k07 once", k, n)
			}
		}
		items, err := b.st.Items(context.Background(), "titles", keys(23))
		if err != nil || len(items) != 23 {
			t.Fatalf("items: %d, %v", len(items), err)
		}
		for _, it := range items {
			if it.ProcessedAt.IsZero() || it.RunID == "" || it.EligibleAt.IsZero() || it.ProcessedAt.Before(it.EligibleAt) {
				t.Fatalf("item %+v: want processed after it was eligible, in a run", it)
			}
			if it.Key == "k07" && (it.State != store.ItemParked || it.Reason != "not English" || it.Rejects != 2) {
				t.Fatalf("rejected item %+v: want parked after 2 rejections, saying why", it)
			}
			if it.Key != "k07" && (it.State != store.ItemSaved || it.RequestID == "") {
				t.Fatalf("item %+v: want saved, with the request it went in", it)
			}
		}
		// The runs' records add up; a batch is at most 5 items and a run
		// makes at most 3 calls, so the work took several runs. The last
		// run records itself after its last save: wait for it.
		var runs []store.BackfillRun
		var saved, parked, rejected, retried int
		waitUntil(t, func() (bool, string) {
			runs, err = b.st.BackfillRuns(context.Background(), "titles", 1000)
			if err != nil {
				t.Fatal(err)
			}
			saved, parked, rejected, retried = 0, 0, 0, 0
			for _, r := range runs {
				saved += r.Saved
				parked += r.Parked
				rejected += r.Rejected["not English"]
				retried += r.Retried
				if r.Selected > 15 {
					t.Fatalf("run %+v selected more than 3 calls of 5 items", r)
				}
			}
			return saved == 22 && parked == 1, fmt.Sprintf("%d runs recorded saved %d, parked %d", len(runs), saved, parked)
		})
		if saved != 22 || parked != 1 || rejected != 2 || retried != 1 || len(runs) < 2 {
			t.Fatalf("%d runs recorded saved %d, parked %d, rejected %d, retried %d: want 22, 1, 2, 1 over several runs", len(runs), saved, parked, rejected, retried)
		}
		j = b.waitJob(t, "titles", func(j store.Job) bool { return j.LastStatus == "ok" })
		if j.ConsecutiveFailures != 0 {
			t.Fatalf("job %+v: want no failures", j)
		}
	})
}

// An item recorded once and gone from the source since (its row deleted)
// is rejected without a call, tried again, and parked after MaxRejects: it
// does not stay pending for ever, and the job ends with nothing left.
func TestBackfillParksItemsGoneFromTheSource(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b := setup(t, url, governor.Limits{})
		b.add(keys(6)...)
		b.listedOnce(t, "titles", "k06", "k07")
		if err := b.set.Add(b.config("titles", func(string) string { return "" }), b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved+j.Parked == 8 })
		if j.Saved != 6 || j.Parked != 2 || j.Pending != 0 || j.Rejected != 0 {
			t.Fatalf("job %+v: want 6 saved, 2 parked, nothing left", j)
		}
		items, err := b.st.Items(ctx, "titles", []string{"k06", "k07"})
		if err != nil || len(items) != 2 {
			t.Fatalf("items: %v, %v", items, err)
		}
		for _, it := range items {
			if it.State != store.ItemParked || it.Reason != goneReason || it.Rejects != 2 || it.ProcessedAt.IsZero() || !strings.HasSuffix(it.RequestID, notSent) {
				t.Fatalf("item %+v: want parked after 2 rejections as %q, with no call", it, goneReason)
			}
		}
		if w := b.writes(t, "titles"); len(w) != 6 || w["k06"] != 0 || w["k07"] != 0 {
			t.Fatalf("writes %v: want the 6 items of the source, once each", w)
		}
		waitUntil(t, func() (bool, string) {
			runs, err := b.st.BackfillRuns(ctx, "titles", 1000)
			if err != nil {
				t.Fatal(err)
			}
			var parked, gone int
			for _, r := range runs {
				parked += r.Parked
				gone += r.Rejected[goneReason]
			}
			return parked == 2 && gone == 4, fmt.Sprintf("%d runs recorded %d parked, %d rejected as gone: want 2 and 4", len(runs), parked, gone)
		})
	})
}

// Batches without a call count against a run's BatchesPerRun as the
// others do: thirty items gone from the source, parked five a batch, take
// several runs of at most three batches, so that no run goes on for ever
// however many such batches it finds.
func TestBackfillRunCountsBatchesWithoutACall(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b := setup(t, url, governor.Limits{})
		b.listedOnce(t, "titles", keys(30)...) // none in the source
		cfg := b.config("titles", func(string) string { return "" })
		cfg.MaxRejects = 1
		cfg.InFlight = 1 // one share, one part: its budget alone bounds it
		if err := b.set.Add(cfg, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		b.waitJob(t, "titles", func(j store.Job) bool { return j.Parked == 30 })
		waitUntil(t, func() (bool, string) {
			runs, err := b.st.BackfillRuns(ctx, "titles", 1000)
			if err != nil {
				t.Fatal(err)
			}
			parked := 0
			for _, r := range runs {
				if r.Selected > 15 {
					t.Fatalf("run %+v selected more than 3 batches of 5 items", r)
				}
				parked += r.Parked
			}
			return parked == 30, fmt.Sprintf("%d runs recorded %d parked, want 30", len(runs), parked)
		})
	})
}

// An item gone from the source and rejected for it is tried again when
// its time comes, and saved if it is back. Meanwhile runs end, each
// recording the rejections it made.
func TestBackfillTakesBackAnItemThatReturns(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b := setup(t, url, governor.Limits{})
		b.add(keys(3)...)
		b.listedOnce(t, "titles", "k03")
		cfg := b.config("titles", func(string) string { return "" })
		cfg.MaxRejects = math.MaxInt32 // never parked: only its return ends it
		if err := b.set.Add(cfg, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		waitUntil(t, func() (bool, string) {
			items, err := b.st.Items(ctx, "titles", []string{"k03"})
			if err != nil || len(items) != 1 {
				t.Fatal(items, err)
			}
			runs, err := b.st.BackfillRuns(ctx, "titles", 1000)
			if err != nil {
				t.Fatal(err)
			}
			ended := 0
			for _, r := range runs {
				if r.Rejected[goneReason] > 0 {
					ended++
				}
			}
			it := items[0]
			return it.Rejects > 0 && it.Reason == goneReason && ended >= 2,
				fmt.Sprintf("k03: %+v; %d runs ended having rejected it", it, ended)
		})
		b.add("k03")
		b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == 4 })
		items, err := b.st.Items(ctx, "titles", []string{"k03"})
		if err != nil || len(items) != 1 {
			t.Fatal(items, err)
		}
		if it := items[0]; it.State != store.ItemSaved || it.Rejects == 0 {
			t.Fatalf("k03 %+v: want saved after its rejections as gone", it)
		}
		if w := b.writes(t, "titles"); len(w) != 4 || w["k03"] != 1 {
			t.Fatalf("writes %v: want k03 saved once", w)
		}
	})
}

// A backfill that runs after another takes only the items that one saved,
// once it has: English titles wait for English summaries.
func TestBackfillAfterAnother(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		b := setup(t, url, governor.Limits{})
		b.add(keys(12)...)
		never := func(k string) string {
			if k == "k03" {
				return "empty"
			}
			return ""
		}
		if err := b.set.Add(b.config("summaries", never), b.p); err != nil {
			t.Fatal(err)
		}
		titles := b.config("titles", func(string) string { return "" })
		titles.After = "summaries"
		if err := b.set.Add(titles, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		b.waitJob(t, "summaries", func(j store.Job) bool { return j.Saved == 11 && j.Parked == 1 })
		b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == 11 })
		w := b.writes(t, "titles")
		if _, ok := w["k03"]; ok || len(w) != 11 {
			t.Fatalf("titles wrote %v: want the 11 items summaries saved, not k03", w)
		}
		sums, err := b.st.Items(context.Background(), "summaries", keys(12))
		if err != nil {
			t.Fatal(err)
		}
		tits, err := b.st.Items(context.Background(), "titles", keys(12))
		if err != nil {
			t.Fatal(err)
		}
		if len(tits) != 11 {
			t.Fatalf("titles has %d items, want 11 (not the one summaries parked)", len(tits))
		}
		done := map[string]time.Time{}
		for _, it := range sums {
			done[it.Key] = it.ProcessedAt
		}
		for _, it := range tits {
			if it.EligibleAt.Before(done[it.Key]) {
				t.Fatalf("title of %s eligible at %v, before its summary was saved at %v", it.Key, it.EligibleAt, done[it.Key])
			}
		}
	})
}

// An item whose request alone is larger than a limit of the key is parked
// at once, naming the limit; the others are saved.
func TestBackfillParksWhatCanNeverFit(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		b := setup(t, url, governor.Limits{governor.TPM: 2000})
		b.add(keys(6)...)
		b.mu.Lock()
		b.items["k02"] = strings.Repeat("a very long article ", 600)
		b.mu.Unlock()
		if err := b.set.Add(b.config("titles", func(string) string { return "" }), b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == 5 && j.Parked == 1 })
		items, err := b.st.Items(context.Background(), "titles", []string{"k02"})
		if err != nil || len(items) != 1 {
			t.Fatal(items, err)
		}
		if it := items[0]; it.State != store.ItemParked || !strings.Contains(it.Reason, "TPM") {
			t.Fatalf("item %+v: want parked, naming the TPM limit", it)
		}
	})
}

func TestNextEventID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"titles@1700000000000":        "titles@1700000000000/next-1",
		"titles@1700000000000/next-1": "titles@1700000000000/next-2",
		"titles@17/next-41":           "titles@17/next-42",
		"a/next-x":                    "a/next-x/next-1",
		"a/next-0":                    "a/next-0/next-1",
	} {
		if got := nextEventID(in); got != want {
			t.Errorf("nextEventID(%q) = %q, want %q", in, got, want)
		}
	}
}

// A backfill that takes many runs (one call each here) goes on to the end:
// each run hands on to the next under an ID as short as the first's.
func TestBackfillOfManyRuns(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		b := setup(t, url, governor.Limits{})
		const n = 40
		b.add(keys(n)...)
		c := b.config("titles", func(string) string { return "" })
		// Only the runs handing on drive it: no Poll starts a new chain.
		c.MaxBatch, c.BatchesPerRun, c.Poll = 1, 1, time.Hour
		if err := b.set.Add(c, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == n || j.ConsecutiveFailures > 0 })
		if j.Saved != n || j.ConsecutiveFailures != 0 {
			t.Fatalf("job %+v: want all %d saved, no failure", j, n)
		}
		// The last run records itself after its last save: wait for it.
		var runs []store.BackfillRun
		waitUntil(t, func() (bool, string) {
			var err error
			if runs, err = b.st.BackfillRuns(context.Background(), "titles", 1000); err != nil {
				t.Fatal(err)
			}
			return len(runs) >= n, fmt.Sprintf("%d runs recorded, want at least %d (one call each)", len(runs), n)
		})
		for _, r := range runs {
			if len(r.RunID) > 64 {
				t.Fatalf("run ID %q is %d bytes: it grows with each run", r.RunID, len(r.RunID))
			}
		}
	})
}

// inflightProvider passes calls to a simulated provider with latency and
// records, for each call, the items it carried and when it was in flight.
type inflightProvider struct {
	sim *sim.Server

	mu      sync.Mutex
	now     int
	most    int
	carried []map[string]bool // each call's items, in the order calls began
	active  map[int]bool      // calls in flight, by index in carried
	shared  []string          // items two calls in flight at once both carried
	// wave is how many calls the first ones wait for before they are
	// answered: a backfill that has its calls going at once gets them all
	// in flight whatever the machine's load; one that makes them one after
	// another does not, and its first call gives up waiting after budget.
	wave int
	all  chan struct{} // closed once wave calls were in flight at once
	// gate, if not nil, holds every call until it is closed.
	gate chan struct{}
}

func (p *inflightProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	items := map[string]bool{}
	for _, m := range regexp.MustCompile(`text of (k\d+)`).FindAllStringSubmatch(string(body), -1) {
		items[m[1]] = true
	}
	p.mu.Lock()
	id := len(p.carried)
	p.carried = append(p.carried, items)
	for other := range p.active {
		for k := range p.carried[other] {
			if items[k] {
				p.shared = append(p.shared, k)
			}
		}
	}
	p.active[id] = true
	p.now++
	if p.now == p.wave && p.most < p.wave {
		close(p.all)
	}
	p.most = max(p.most, p.now)
	p.mu.Unlock()
	if id < p.wave {
		select {
		case <-p.all:
		case <-r.Context().Done():
		case <-time.After(budget):
		}
	}
	if p.gate != nil {
		select {
		case <-p.gate:
		case <-r.Context().Done():
		case <-time.After(budget):
		}
	}
	defer func() {
		p.mu.Lock()
		delete(p.active, id)
		p.now--
		p.mu.Unlock()
	}()
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.sim.ServeHTTP(w, r)
}

// A backfill keeps InFlight calls in flight at once, never two carrying the
// same item — a rejected item due again while others are in flight
// included — and saves every item once.
func TestBackfillCallsInFlight(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		b := setup(t, url, governor.Limits{governor.RPM: 100_000, governor.TPM: 10_000_000})
		model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Latency: 60 * time.Millisecond, Wire: true, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		const n, inFlight = 60, 4
		p := &inflightProvider{sim: sim.NewServer(model, sim.ServerConfig{}), active: map[int]bool{}, wave: inFlight, all: make(chan struct{})}
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		if b.p.Client, err = llm.NewClient(llm.Config{BaseURL: srv.URL + "/v1", Profile: llm.Groq}); err != nil {
			t.Fatal(err)
		}
		b.add(keys(n)...)
		var mu sync.Mutex
		rejected := map[string]int{}
		c := b.config("titles", func(k string) string {
			mu.Lock()
			defer mu.Unlock()
			// Every fifth item's first two outputs are refused: each comes
			// back due while other batches are in flight.
			if k[len(k)-1]%5 == 0 && rejected[k] < 2 {
				rejected[k]++
				return "not English"
			}
			return ""
		})
		c.MaxBatch, c.InFlight, c.MaxRejects, c.BatchesPerRun = 2, inFlight, 3, 100
		if err := b.set.Add(c, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved+j.Parked == n })
		if j.Saved != n {
			t.Fatalf("job %+v: want all %d saved", j, n)
		}
		for k, w := range b.writes(t, "titles") {
			if w != 1 {
				t.Fatalf("item %s written %d times, want once", k, w)
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.shared) > 0 {
			t.Fatalf("items %v were carried by two calls in flight at once", p.shared)
		}
		if p.most != inFlight {
			t.Fatalf("at most %d calls were in flight at once, want %d", p.most, inFlight)
		}
		times := map[string]int{}
		for _, items := range p.carried {
			for k := range items {
				times[k]++
			}
		}
		for _, k := range keys(n) {
			want := 1
			if k[len(k)-1]%5 == 0 {
				want = 3
			}
			if times[k] != want {
				t.Fatalf("item %s was carried by %d calls, want %d", k, times[k], want)
			}
		}
	})
}

// sameID answers every call with the same response ID, as some providers
// and proxies do.
type sameID struct{ sim *sim.Server }

func (p sameID) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	p.sim.ServeHTTP(rec, r)
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	body["id"] = "chatcmpl-same"
	for k, v := range rec.Header() {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(rec.Code)
	_ = json.NewEncoder(w).Encode(body)
}

// An item rejected by calls that the provider answered with one and the
// same ID counts each rejection: the call, not the provider's ID, tells a
// settlement seen before from a new one. It is parked after MaxRejects.
func TestBackfillCountsRejectionsWhateverTheProviderID(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		b := setup(t, url, governor.Limits{})
		model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Wire: true, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(sameID{sim: sim.NewServer(model, sim.ServerConfig{})})
		t.Cleanup(srv.Close)
		if b.p.Client, err = llm.NewClient(llm.Config{BaseURL: srv.URL + "/v1", Profile: llm.Groq}); err != nil {
			t.Fatal(err)
		}
		b.add(keys(4)...)
		var mu sync.Mutex
		calls := map[string]int{}
		c := b.config("titles", func(k string) string {
			mu.Lock()
			defer mu.Unlock()
			calls[k]++
			if k == "k01" {
				return "not English"
			}
			return ""
		})
		c.MaxBatch, c.InFlight, c.MaxRejects, c.BatchesPerRun = 1, 1, 3, 100
		if err := b.set.Add(c, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved+j.Parked == 4 })
		if j.Saved != 3 || j.Parked != 1 {
			t.Fatalf("job %+v: want 3 saved and k01 parked", j)
		}
		items, err := b.st.Items(context.Background(), "titles", []string{"k01"})
		if err != nil || len(items) != 1 {
			t.Fatalf("items: %v %v", items, err)
		}
		if it := items[0]; it.State != store.ItemParked || it.Rejects != 3 || !strings.HasSuffix(it.RequestID, " chatcmpl-same") {
			t.Errorf("k01 = %+v: want parked after 3 rejects, the provider's ID kept after the call's", it)
		}
		mu.Lock()
		defer mu.Unlock()
		if calls["k01"] != 3 {
			t.Errorf("k01 was saved %d times, want 3: one per reject", calls["k01"])
		}
	})
}

// heldBackfill starts backfill "titles" of n items, one per call, inFlight
// calls going at once, on a provider that holds every call until its gate
// is closed, and returns once inFlight calls are held. Each run gives out
// two calls: each hands on the parts it started, and no Poll starts a run
// while the test goes.
func heldBackfill(t *testing.T, url string, n, inFlight int) (*bench, *inflightProvider) {
	t.Helper()
	b := setup(t, url, governor.Limits{governor.RPM: 100_000, governor.TPM: 10_000_000})
	p := &inflightProvider{active: map[int]bool{}, gate: make(chan struct{})}
	b.throughProxy(t, forecast.ModelConfig{Profile: "groq", Wire: true, Seed: 1}, func(s *sim.Server) http.Handler { p.sim = s; return p })
	b.add(keys(n)...)
	c := b.config("titles", func(string) string { return "" })
	c.MaxBatch, c.InFlight, c.BatchesPerRun, c.Poll = 1, inFlight, 2, time.Hour
	if err := b.set.Add(c, b.p); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	waitUntil(t, func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.now == inFlight, fmt.Sprintf("%d calls in flight, want %d", p.now, inFlight)
	})
	return b, p
}

// savedOnce waits until the n items of "titles" are saved, and checks
// that each was written once, by one call of its own.
func savedOnce(t *testing.T, b *bench, p *inflightProvider, n int) {
	t.Helper()
	j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == int64(n) })
	for k, w := range b.writes(t, "titles") {
		if w != 1 {
			t.Errorf("item %s written %d times, want once", k, w)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.shared) > 0 || len(p.carried) != n {
		t.Errorf("job %+v: %d calls for %d items, items %v carried by two calls at once: want one call each", j, len(p.carried), n, p.shared)
	}
}

// A run that no earlier run handed on to (a Poll's, or one sent by hand)
// while the parts of a run that handed on are still going leaves the items
// to the run in line, which waits for those parts: started on its own, it
// would start parts on items they hold, and a batch would be billed and
// saved twice.
func TestBackfillRunLeavesItemsToTheRunInLine(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const n, inFlight = 24, 4
		b, p := heldBackfill(t, url, n, inFlight)
		// Every call is held, so a run that handed on is in line or waits
		// for the parts: a run started now goes after it.
		ctx := context.Background()
		if _, err := b.e.Send(ctx, engine.Event{Name: EventName("titles"), ID: "titles@by-hand"}); err != nil {
			t.Fatal(err)
		}
		close(p.gate)
		byHand := FunctionID("titles") + ":titles@by-hand"
		var out store.BackfillRun
		waitUntil(t, func() (bool, string) {
			d, err := b.e.RunDetail(ctx, byHand, 1<<20)
			if err != nil || d.Status != run.Completed {
				return false, fmt.Sprintf("run %s: %+v (%v)", byHand, d, err)
			}
			return json.Unmarshal(d.Output, &out) == nil, string(d.Output)
		})
		if !strings.HasPrefix(out.Stopped, "left to "+FunctionID("titles")+":") {
			t.Errorf("the run sent by hand stopped %q, want it left to the run in line", out.Stopped)
		}
		savedOnce(t, b, p, n)
	})
}

// A run that no earlier run handed on to takes on the parts of earlier runs
// still going: here those handed on to a run an operator cancelled, which
// are not its own and go on. It waits for them as for its own, and starts
// none on the items they hold.
func TestBackfillRunTakesOnPartsLeftGoing(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		// Enough items that each of the 8 shares of 4 calls in flight
		// holds some (lanes are drawn at random): each part makes its call.
		const n, inFlight = 96, 4
		b, p := heldBackfill(t, url, n, inFlight)
		// The two runs before it started the four parts, two each, and
		// handed them on: the run going waits for them, and starts none.
		ctx := context.Background()
		var going string
		waitUntil(t, func() (bool, string) {
			runs, err := b.e.Runs(ctx, engine.RunFilter{Function: FunctionID("titles")})
			states := map[run.State][]string{}
			for _, r := range runs {
				states[r.Status] = append(states[r.Status], r.ID)
			}
			if len(states[run.Running]) == 1 {
				going = states[run.Running][0]
			}
			return err == nil && len(states[run.Completed]) == 2 && len(states[run.Running]) == 1 && len(runs) == 3,
				fmt.Sprintf("runs: %v (%v)", states, err)
		})
		if err := b.e.Cancel(ctx, going); err != nil {
			t.Fatal(err)
		}
		if _, err := b.e.Send(ctx, engine.Event{Name: EventName("titles"), ID: "titles@by-hand"}); err != nil {
			t.Fatal(err)
		}
		byHand := FunctionID("titles") + ":titles@by-hand"
		var found []engine.GoingPart
		waitUntil(t, func() (bool, string) {
			d, err := b.e.RunDetail(ctx, byHand, 1<<20)
			if err != nil {
				return false, err.Error()
			}
			i := slices.IndexFunc(d.Steps, func(s engine.StepView) bool { return s.Name == "parts-going" })
			return i >= 0 && json.Unmarshal(d.Steps[i].Output, &found) == nil, fmt.Sprintf("run %s: steps %+v", byHand, d.Steps)
		})
		if len(found) != inFlight {
			ids := make([]string, len(found))
			for i, g := range found {
				ids[i] = g.ID
			}
			t.Errorf("the run sent by hand found parts going %v, want the %d", ids, inFlight)
		}
		close(p.gate)
		savedOnce(t, b, p, n)
	})
}

// A backfill of a few items on a key that admits hundreds of calls at once
// splits them into a few shares: it starts a part for each of a few, not
// one for each of hundreds of shares that are mostly empty, each a child
// workflow of its own.
func TestBackfillOfFewItemsStartsFewParts(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		limits := governor.Limits{governor.RPM: 1_000_000, governor.TPM: 1_000_000_000}
		b := setup(t, url, limits)
		// Answers that take 100 ms on a key of a million calls a minute:
		// the window grows to hundreds of calls.
		model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: limits, Latency: 100 * time.Millisecond, Wire: true, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(sim.NewServer(model, sim.ServerConfig{}))
		t.Cleanup(srv.Close)
		if b.p.Client, err = llm.NewClient(llm.Config{BaseURL: srv.URL + "/v1", Profile: llm.Groq}); err != nil {
			t.Fatal(err)
		}
		const first, more = 60, 3
		b.add(keys(first)...)
		c := b.config("titles", func(string) string { return "" })
		c.MaxBatch, c.BatchesPerRun, c.Poll = 1, 100, time.Hour
		if err := b.set.Add(c, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == first })
		win := b.set.byID["titles"].win
		waitUntil(t, func() (bool, string) {
			return win.limit() >= 64, fmt.Sprintf("the window keeps %d calls going, want at least 64", win.limit())
		})
		// Once the runs of the first items have ended.
		ctx := context.Background()
		waitUntil(t, func() (bool, string) {
			var going []run.Summary
			for _, st := range []run.State{run.Running, run.Queued} {
				rs, err := b.e.Runs(ctx, engine.RunFilter{Function: FunctionID("titles"), Status: st})
				if err != nil {
					return false, err.Error()
				}
				going = append(going, rs...)
			}
			return len(going) == 0, fmt.Sprintf("runs going: %+v", going)
		})
		before := countParts(t, b)
		for i := range more {
			b.add(fmt.Sprintf("m%02d", i))
		}
		if _, err := b.e.Send(ctx, engine.Event{Name: EventName("titles"), ID: "titles@more"}); err != nil {
			t.Fatal(err)
		}
		b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == first+more })
		// Three items are in at most three shares, of the 8 a split for
		// three calls has: the run may try each share once.
		if parts := countParts(t, b) - before; parts > 8 {
			t.Errorf("%d parts started for %d new items of one call each, want at most 8", parts, more)
		}
	})
}

// countParts counts the parts of backfill "titles" started so far.
func countParts(t *testing.T, b *bench) int {
	t.Helper()
	h, err := b.st.Handle()
	if err != nil {
		t.Fatal(err)
	}
	q := `SELECT count(*) FROM %sworkflow_status WHERE parent_workflow_id IS NOT NULL AND name LIKE 'backfill:titles/%%'`
	var parts int
	if h.Postgres != nil {
		err = h.Postgres.QueryRow(context.Background(), fmt.Sprintf(q, "dbos.")).Scan(&parts)
	} else {
		err = h.SQLite.QueryRow(fmt.Sprintf(q, "")).Scan(&parts)
	}
	if err != nil {
		t.Fatal(err)
	}
	return parts
}
