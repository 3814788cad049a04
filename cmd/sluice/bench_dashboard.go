package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// The dashboard bench's app: four functions whose runs fill the engine's
// tables, and one backfill whose items fill the store's.
const (
	scaleBackfill = "bench-items"
	scaleOK       = "bench-ok"      // one step; completes
	scaleSteps    = "bench-steps"   // three steps; completes with an output
	scaleFail     = "bench-fail"    // fails in its second step, not retried
	scaleLimited  = "bench-limited" // a rate limit of one run: the others are dropped
	// scaleWorkers is how many runs of each function execute at once while
	// seeding, scaleSenders how many goroutines send events, and
	// scaleBacklog how many queued runs make them wait. On SQLite's one
	// writer more runs at once go no faster, and a send then waits longer
	// for the write lock.
	scaleWorkers = 25
	scaleSenders = 8
	scaleBacklog = 1000
	// scaleSendTries is how many times an event is sent when SQLite's
	// write lock was not had within the busy timeout (an event is sent
	// again under its ID: a second send starts nothing new).
	scaleSendTries = 3
	// The backfill's batches: the size of each call and how many go at
	// once.
	scaleBatch    = 100
	scaleInFlight = 10
	// scaleLimits are the key's limits: in force, so the overview draws
	// its gauges and chart, and far above what the seeding uses.
	scaleLimits = "rpm=100000,tpm=1000000000"
	// The targets: p95 of every page and JSON endpoint, and of a /metrics
	// scrape.
	scalePageTargetMS    = 300
	scaleMetricsTargetMS = 100
)

// scaleFlows are the key's flows: the backfill's and three more, each with
// a day of samples, for the overview's chart and rates.
var scaleFlows = []governor.FlowConfig{{Name: scaleBackfill, Weight: 2}, {Name: "chat", Priority: 1}, {Name: "summaries"}, {Name: "titles"}}

func init() {
	registerBench(&command{
		name:    "dashboard",
		summary: "p50/p95 of every dashboard page, JSON endpoint and /metrics with 100,000 runs and 1,000,000 items in the store",
		run:     runBenchDashboard,
	})
}

type scaleReport struct {
	DatabaseKind string `json:"database"`
	// Runs are the runs in the engine's tables by status (completed,
	// failed), Items the backfill's items by state (saved, parked).
	Runs    map[string]int   `json:"runs"`
	Items   map[string]int64 `json:"items"`
	Dropped int              `json:"dropped_events"`
	// HistorySamples are the samples recorded for the overview's chart:
	// a day of minutes for each of the key's flows.
	HistorySamples int          `json:"history_samples"`
	Seeding        scaleSeeding `json:"seeding"`
	Samples        int          `json:"samples"`
	Paths          []scalePath  `json:"paths"`
	// Missed counts the paths whose p95 is over their target.
	Missed int `json:"missed"`
}

// scaleSeeding says how the database was filled, and how long each
// part took.
type scaleSeeding struct {
	Method        string  `json:"method"`
	AppTableS     float64 `json:"app_table_s"`
	ItemsS        float64 `json:"items_s"`
	RunsS         float64 `json:"runs_s"`
	HistoryS      float64 `json:"history_s"`
	TotalS        float64 `json:"total_s"`
	DatabaseBytes int64   `json:"database_bytes"`
	RunsPerS      float64 `json:"runs_per_s"`
	ItemsPerS     float64 `json:"items_per_s"`
	// SendRetries counts the events sent again because SQLite's write
	// lock was not had within the busy timeout.
	SendRetries    int     `json:"send_retries"`
	ServeStartS    float64 `json:"serve_start_s"`
	ServeReadyNote string  `json:"serve_ready,omitempty"`
}

// scalePath is one path's latencies over HTTP, in ms, and its target.
type scalePath struct {
	Path string `json:"path"`
	// Label is the path as the report prints it.
	Label    string  `json:"label"`
	Kind     string  `json:"kind"` // page, json or metrics
	P50      float64 `json:"p50_ms"`
	P95      float64 `json:"p95_ms"`
	Max      float64 `json:"max_ms"`
	Samples  int     `json:"samples"`
	TargetMS float64 `json:"target_p95_ms"`
	Holds    bool    `json:"holds"`
}

const scaleSeedMethod = "runs: events sent through App.Send to four functions, executed by the engine; " +
	"items: a backfill (PendingSQL over an app table) against the provider simulator with no limits; " +
	"samples: store.RecordSamples"

func runBenchDashboard(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "bench dashboard", "[flags]",
		"Fills a fresh database (an SQLite file, or a database created on the --db server and dropped\n"+
			"after) through sluice's own code: --runs runs of four functions, sent as events and run by\n"+
			"the engine (most complete, a tenth fail, a fifth have three steps; a rate-limited function\n"+
			"drops events), a backfill of --items items against the provider simulator with no limits\n"+
			"(a thousandth refused and parked), and a day of minute samples of the key's four flows.\n"+
			"Then it serves the app as sluice serve does (API, dashboard and /metrics on one handler)\n"+
			"on loopback, and times --samples GETs of every dashboard page, every JSON endpoint and\n"+
			"/metrics over HTTP, interleaved, after one untimed round. Prints p50, p95 and max per path\n"+
			"against the targets: p95 ≤ 300 ms for pages and JSON, ≤ 100 ms for /metrics. Any answer\n"+
			"but 200 is an error. See docs/benchmarks.md.")
	runs := fs.Int("runs", 100_000, "runs to seed")
	items := fs.Int("items", 1_000_000, "backfill items to seed")
	dbURL := fs.String("db", "", "postgres://… URL of a server to create the database on (dropped after); default: an SQLite file in a temporary folder")
	samples := fs.Int("samples", 50, "timed requests per path")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed requests (the server's side and the client's) to `FILE`")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	switch {
	case *runs < 10 || *runs > 10_000_000:
		return errors.New("--runs must be between 10 and 10000000")
	case *items < 1 || *items > 10_000_000:
		return errors.New("--items must be between 1 and 10000000")
	case *samples < 1 || *samples > 10_000:
		return errors.New("--samples must be between 1 and 10000")
	case *dbURL != "" && !isPostgresURL(*dbURL):
		return errors.New("--db must be a postgres:// URL")
	}
	dir, err := os.MkdirTemp("", "sluice-bench-dashboard")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	model, err := forecast.NewModel(forecast.ModelConfig{Wire: true, Seed: 1})
	if err != nil {
		return err
	}
	provider := sim.NewServer(model, sim.ServerConfig{})
	if err := provider.Start(ctx); err != nil {
		return err
	}
	defer provider.Stop(context.Background())
	db, drop, err := scaleDB(ctx, dir, *dbURL)
	if err != nil {
		return err
	}
	defer drop()
	b := &scaleBench{db: db, provider: "http://" + provider.Addr() + "/v1", runs: *runs, items: *items}
	rep := scaleReport{DatabaseKind: "sqlite", Samples: *samples, Seeding: scaleSeeding{Method: scaleSeedMethod}}
	if *dbURL != "" {
		rep.DatabaseKind = "postgres"
	}
	if err := b.seed(ctx, &rep); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := b.measure(ctx, &rep, *samples, *cpuProfile); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(rep)
	}
	printScaleReport(env.stdout, rep)
	return nil
}

// scaleDB returns a new database: an SQLite file in dir, or a database
// created on the admin server; drop removes the latter.
func scaleDB(ctx context.Context, dir, admin string) (db string, drop func(), err error) {
	if admin == "" {
		return filepath.Join(dir, "dashboard.db"), func() {}, nil
	}
	b := &backfillBench{dir: dir, admin: admin, tag: strconv.FormatInt(time.Now().UnixNano(), 36)}
	return b.freshDB(ctx, "dashboard")
}

type scaleBench struct {
	db, provider string
	runs, items  int
	src          *benchDB // the app table's handle: the backfill's Load, the seeding's counts
	// Set while seeding: the window in which the items were processed,
	// and a run of three steps to show.
	itemsFrom, itemsTo time.Time
	stepsRun           string
}

// app builds the bench's app on the database: the four functions and the
// backfill, the provider simulator as its one provider.
func (b *scaleBench) app(ctx context.Context, poll time.Duration) (*sluice.App, error) {
	limits, err := governor.ParseLimits(scaleLimits)
	if err != nil {
		return nil, err
	}
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: b.db, PollInterval: poll, Logger: quietLogger(), AppVersion: "bench", Flows: scaleFlows,
		Providers: []sluice.Provider{{Name: "sim", LLM: llm.Config{BaseURL: b.provider}, Limits: limits}},
	})
	if err != nil {
		return nil, err
	}
	if err := registerScale(app, b.src); err != nil {
		_ = app.Stop(context.Background())
		return nil, err
	}
	return app, nil
}

// scaleEvent is the functions' event data.
type scaleEvent struct {
	I int `json:"i"`
}

// scaleStepsOutput is what a run of three steps returns.
type scaleStepsOutput struct {
	I       int    `json:"i"`
	Summary string `json:"summary"`
	Words   int    `json:"words"`
}

func registerScale(app *sluice.App, src *benchDB) error {
	conc := []run.Concurrency{{Limit: scaleWorkers, PerWorker: true}}
	err := sluice.Register(app, run.Function{ID: scaleOK, Event: "bench/ok", Concurrency: conc},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (int, error) {
			return sluice.Step(ctx, "one", func(context.Context) (int, error) { return ev.Data.I, nil })
		})
	if err != nil {
		return err
	}
	err = sluice.Register(app, run.Function{ID: scaleSteps, Event: "bench/steps", Concurrency: conc},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (scaleStepsOutput, error) {
			text, err := sluice.Step(ctx, "fetch", func(context.Context) (string, error) { return sim.Words(40, uint64(ev.Data.I)), nil })
			if err != nil {
				return scaleStepsOutput{}, err
			}
			summary, err := sluice.Step(ctx, "summarize", func(context.Context) (string, error) {
				w := strings.Fields(text)
				return strings.Join(w[:min(len(w), 12)], " "), nil
			})
			if err != nil {
				return scaleStepsOutput{}, err
			}
			return sluice.Step(ctx, "store", func(context.Context) (scaleStepsOutput, error) {
				return scaleStepsOutput{I: ev.Data.I, Summary: summary, Words: len(strings.Fields(text))}, nil
			})
		})
	if err != nil {
		return err
	}
	err = sluice.Register(app, run.Function{ID: scaleFail, Event: "bench/fail", Concurrency: conc, Retries: run.NoRetries},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (int, error) {
			if _, err := sluice.Step(ctx, "load", func(context.Context) (int, error) { return ev.Data.I, nil }); err != nil {
				return 0, err
			}
			return sluice.Step(ctx, "check", func(context.Context) (int, error) {
				return 0, sluice.NonRetriable(fmt.Errorf("document %d: no text to summarize", ev.Data.I))
			})
		})
	if err != nil {
		return err
	}
	// One run in a window longer than any bench: every later event of it
	// is dropped and recorded.
	err = sluice.Register(app, run.Function{ID: scaleLimited, Event: "bench/limited", Concurrency: conc,
		RateLimit: &run.RateLimit{Limit: 1, Period: 1_000_000 * time.Hour}},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (int, error) { return ev.Data.I, nil })
	if err != nil {
		return err
	}
	return sluice.RegisterBackfill(app, sluice.Backfill[string]{
		Backfill: run.Backfill{ID: scaleBackfill, MaxBatch: scaleBatch, InFlight: scaleInFlight, PendingSQL: backfillPending, MaxRejects: 1},
		Load: func(ctx context.Context, keys []string) (map[string]string, error) {
			return loadBodies(ctx, src, keys)
		},
		Request: func(items []sluice.Item[string]) (*llm.ChatRequest, error) {
			bodies := make([]string, len(items))
			for i, it := range items {
				bodies[i] = it.Data
			}
			return backfillRequest(bodies), nil
		},
		Parse: func(resp *llm.ChatResponse, items []sluice.Item[string]) ([]string, error) {
			return splitReply(resp, len(items))
		},
		Save: func(ctx context.Context, tx sluice.Tx, it sluice.Item[string], output string) error {
			if scaleRefused(it.Key) {
				return sluice.Reject("not English")
			}
			_, err := tx.Exec(ctx, backfillSave, output, it.Key)
			return err
		},
	})
}

// scaleRefused reports whether the backfill refuses an item's output: one
// item in a thousand, which MaxRejects 1 parks at once.
func scaleRefused(key string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(key, "item-"))
	return err == nil && n%1000 == 7
}

// scaleFunctions are the functions whose runs the bench seeds.
var scaleFunctions = []string{scaleOK, scaleSteps, scaleFail, scaleLimited}

// seed fills the database, then stops the app that did.
func (b *scaleBench) seed(ctx context.Context, rep *scaleReport) error {
	began := time.Now()
	t := time.Now()
	if _, err := seedBackfill(ctx, b.db, b.items); err != nil {
		return fmt.Errorf("the app table of %d items: %w", b.items, err)
	}
	rep.Seeding.AppTableS = time.Since(t).Seconds()
	var err error
	if b.src, err = openBenchPool(ctx, b.db, 4); err != nil {
		return err
	}
	app, err := b.app(ctx, benchPoll)
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())
	st, err := store.Open(ctx, b.db)
	if err != nil {
		return err
	}
	defer st.Close()
	b.itemsFrom = time.Now()
	if err := app.Start(ctx); err != nil {
		return err
	}
	job, err := b.waitItems(ctx, st)
	if err != nil {
		return fmt.Errorf("the backfill: %w", err)
	}
	b.itemsTo = time.Now()
	rep.Seeding.ItemsS = b.itemsTo.Sub(b.itemsFrom).Seconds()
	rep.Seeding.ItemsPerS = float64(b.items) / rep.Seeding.ItemsS
	rep.Items = map[string]int64{"saved": job.Saved, "parked": job.Parked, "pending": job.Pending, "rejected": job.Rejected}

	t = time.Now()
	if err := b.seedRuns(ctx, app, rep); err != nil {
		return fmt.Errorf("the runs: %w", err)
	}
	rep.Seeding.RunsS = time.Since(t).Seconds()
	rep.Seeding.RunsPerS = float64(b.runs) / rep.Seeding.RunsS

	t = time.Now()
	if rep.HistorySamples, err = seedScaleHistory(ctx, st, time.Now()); err != nil {
		return fmt.Errorf("the samples: %w", err)
	}
	rep.Seeding.HistoryS = time.Since(t).Seconds()
	rep.Seeding.TotalS = time.Since(began).Seconds()
	if rep.Seeding.DatabaseBytes, err = databaseSize(ctx, b.src, b.db); err != nil {
		return err
	}
	return nil
}

// waitItems waits until every item of the backfill is saved or parked.
func (b *scaleBench) waitItems(ctx context.Context, st store.Store) (store.Job, error) {
	for {
		j, err := st.Job(ctx, scaleBackfill)
		switch {
		case errors.Is(err, store.ErrNoJob):
		case err != nil:
			return j, err
		case j.Saved+j.Parked == int64(b.items):
			return j, nil
		case j.ConsecutiveFailures >= 3:
			return j, fmt.Errorf("failed %d runs in a row: %s", j.ConsecutiveFailures, j.LastError)
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scaleKind is the function the i-th event goes to: the first to the
// rate-limited one (its one run), then of every ten, one that fails, two of
// three steps and seven of one.
func scaleKind(i int) string {
	switch {
	case i == 0:
		return "bench/limited"
	case i%10 == 0:
		return "bench/fail"
	case i%10 == 3 || i%10 == 6:
		return "bench/steps"
	}
	return "bench/ok"
}

// seedRuns sends the events of b.runs runs, and then events the rate limit
// drops, from scaleSenders goroutines that wait while more than
// scaleBacklog runs are queued, and waits until every run has ended.
func (b *scaleBench) seedRuns(ctx context.Context, app *sluice.App, rep *scaleReport) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	drops := min(max(b.runs/100, 1), 1000)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	// The rate-limited function's one run first, before any event it
	// drops.
	sent, err := app.Send(ctx, scaleKind(0), tag+"-0", scaleEvent{})
	if err != nil {
		return fmt.Errorf("send event 0: %w", err)
	}
	if len(sent) != 1 || sent[0].Status != "queued" {
		return fmt.Errorf("event 0 (%s): %+v, want one run queued", scaleKind(0), sent)
	}
	var backlog, retries atomic.Int64
	var next atomic.Int64
	next.Store(1)
	var mu sync.Mutex
	var stepsRuns []string
	var wg sync.WaitGroup
	for range scaleSenders {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.runs+drops || ctx.Err() != nil {
					return
				}
				for backlog.Load() > scaleBacklog && ctx.Err() == nil {
					time.Sleep(20 * time.Millisecond)
				}
				name := scaleKind(i)
				if i >= b.runs {
					name = "bench/limited"
				}
				sent, err := app.Send(ctx, name, tag+"-"+strconv.Itoa(i), scaleEvent{I: i})
				again := false
				for try := 1; try < scaleSendTries && errors.As(err, new(*sqlite.LockedError)); try++ {
					retries.Add(1)
					again = true
					sent, err = app.Send(ctx, name, tag+"-"+strconv.Itoa(i), scaleEvent{I: i})
				}
				if err != nil {
					cancel(fmt.Errorf("send event %d: %w", i, err))
					return
				}
				want := "queued"
				if i >= b.runs {
					want = "dropped"
				}
				if again && len(sent) == 1 && sent[0].Status == "existing" && want == "queued" {
					sent[0].Status = want // the first send had started it
				}
				if len(sent) != 1 || sent[0].Status != want {
					cancel(fmt.Errorf("event %d (%s): %+v, want one run %s", i, name, sent, want))
					return
				}
				if want == "queued" {
					backlog.Add(1)
				}
				if name == "bench/steps" {
					mu.Lock()
					stepsRuns = append(stepsRuns, sent[0].RunID)
					mu.Unlock()
				}
			}
		})
	}
	// The backlog is counted again from the database every 200 ms; the
	// senders add their runs to it in between.
	names := "'" + strings.Join(scaleFunctions, "', '") + "'"
	unfinished := `SELECT COUNT(*) FROM ` + b.src.table("workflow_status") + ` WHERE status IN ('ENQUEUED', 'PENDING') AND name IN (` + names + `)`
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	sending := true
	for {
		var n int64
		if err := b.src.each(ctx, unfinished, nil, func(scan func(...any) error) error { return scan(&n) }); err != nil {
			if c := context.Cause(ctx); c != nil {
				return c
			}
			return fmt.Errorf("count the runs not ended: %w", err)
		}
		backlog.Store(n)
		if !sending && n == 0 {
			break
		}
		select {
		case <-done:
			sending = false
			if c := context.Cause(ctx); c != nil {
				return c
			}
			done = nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
	rep.Runs = map[string]int{}
	err = b.src.each(ctx, `SELECT status, COUNT(*) FROM `+b.src.table("workflow_status")+` WHERE name IN (`+names+`) GROUP BY status`, nil,
		func(scan func(...any) error) error {
			var status string
			var n int
			if err := scan(&status, &n); err != nil {
				return err
			}
			switch status {
			case "SUCCESS":
				status = string(run.Completed)
			case "ERROR":
				status = string(run.Failed)
			}
			rep.Runs[status] += n
			return nil
		})
	if err != nil {
		return err
	}
	if total := rep.Runs[string(run.Completed)] + rep.Runs[string(run.Failed)]; total != b.runs || len(rep.Runs) != 2 {
		return fmt.Errorf("the engine's tables hold %v, want %d runs completed or failed", rep.Runs, b.runs)
	}
	if len(stepsRuns) == 0 {
		return errors.New("no run of three steps was started")
	}
	slices.Sort(stepsRuns)
	b.stepsRun = stepsRuns[len(stepsRuns)/2]
	rep.Dropped = drops
	rep.Seeding.SendRetries = int(retries.Load())
	return nil
}

// seedScaleHistory records a day of minute samples, ending at now, of each of
// the key's flows, a flow's day in one call, and returns how many.
func seedScaleHistory(ctx context.Context, st store.Store, now time.Time) (int, error) {
	end := now.UTC().Truncate(time.Minute)
	n := 0
	for fi, f := range scaleFlows {
		day := make([]store.Sample, 0, 24*60)
		for m := range 24 * 60 {
			s := store.Sample{At: end.Add(-time.Duration(m) * time.Minute), Flow: f.Name, Source: "app", State: string(health.Progressing),
				Done: int64(40 + (m*7+fi*13)%60), Remaining: int64(24*60 - m), Admitted: int64(20 + (m*11+fi)%40)}
			s.Tokens = s.Admitted * 900
			if m%97 == fi {
				s.Rejections = map[string]int64{"tpm": 1}
			}
			day = append(day, s)
		}
		if err := st.RecordSamples(ctx, day); err != nil {
			return n, err
		}
		n += len(day)
	}
	return n, nil
}

// scaleTarget is one path the bench times, and how the report names it.
type scaleTarget struct{ path, kind, label string }

// targets are the paths timed: every dashboard page (a deep page of the
// backfill's items among them), every JSON endpoint with and without
// filters, and /metrics.
func (b *scaleBench) targets() []scaleTarget {
	// Half-way through the items' activity: the page there is as deep in
	// the index as a page can be.
	mid := b.itemsFrom.Add(b.itemsTo.Sub(b.itemsFrom) / 2).UTC()
	flow := "/flows/" + url.PathEscape(scaleBackfill)
	deep := flow + "?" + url.Values{"before_at": {mid.Format(time.RFC3339Nano)}}.Encode()
	id := url.PathEscape(b.stepsRun)
	var out []scaleTarget
	for _, p := range []string{"/", "/flows", flow, deep, "/runs", "/runs?status=failed", "/runs?function=" + scaleFail, "/runs/" + id, "/plan", "/send"} {
		label := p
		if p == deep {
			label = flow + "?before_at=(half-way)"
		}
		out = append(out, scaleTarget{p, "page", label})
	}
	for _, p := range []string{"/v1/runs", "/v1/runs?status=failed", "/v1/runs?function=" + scaleSteps,
		"/v1/runs?function=" + scaleFail + "&status=failed", "/v1/runs?since=1h&limit=1000", "/v1/runs/" + id,
		"/v1/flows", "/v1/dropped", "/readyz"} {
		out = append(out, scaleTarget{p, "json", p})
	}
	return append(out, scaleTarget{"/metrics", "metrics", "/metrics"})
}

// measure starts the app again on the seeded database, serves it as sluice
// serve does, and times every path.
func (b *scaleBench) measure(ctx context.Context, rep *scaleReport, samples int, cpuProfile string) error {
	defer b.src.close()
	t := time.Now()
	app, err := b.app(ctx, 0)
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())
	dashboard, err := app.Dashboard(sluice.DashboardConfig{})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := guard.NewServer(serveHandler(serveParts{app: app, dashboard: dashboard}), guard.Config{Addr: ln.Addr().String(), Forms: dashboardForm})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := app.Start(ctx); err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: time.Minute}
	if err := b.waitServed(ctx, client, base, rep); err != nil {
		return err
	}
	rep.Seeding.ServeStartS = time.Since(t).Seconds()
	targets := b.targets()
	times := make([][]time.Duration, len(targets))
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// One untimed round first, then the timed ones, each path in turn.
	for round := -1; round < samples; round++ {
		for i, tg := range targets {
			d, err := scaleGet(ctx, client, base+tg.path)
			if err != nil {
				return err
			}
			if round >= 0 {
				times[i] = append(times[i], d)
			}
		}
	}
	for i, tg := range targets {
		p := scalePath{Path: tg.path, Label: tg.label, Kind: tg.kind, Samples: len(times[i]), TargetMS: scalePageTargetMS,
			P50: percentile(times[i], 0.50) / 1000, P95: percentile(times[i], 0.95) / 1000, Max: percentile(times[i], 1) / 1000}
		if tg.kind == "metrics" {
			p.TargetMS = scaleMetricsTargetMS
		}
		p.Holds = p.P95 <= p.TargetMS
		if !p.Holds {
			rep.Missed++
		}
		rep.Paths = append(rep.Paths, p)
	}
	return nil
}

// waitServed waits until the served app says the backfill is done with
// every item and /readyz answers 200.
func (b *scaleBench) waitServed(ctx context.Context, client *http.Client, base string, rep *scaleReport) error {
	want := rep.Items["saved"] + rep.Items["parked"]
	var last string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var body struct{ Flows []health.Flow }
		resp, err := client.Get(base + "/v1/flows")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
		}
		if err != nil {
			return fmt.Errorf("GET /v1/flows: %w", err)
		}
		ready := false
		if r, err := client.Get(base + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			ready = r.StatusCode == http.StatusOK
		}
		for _, f := range body.Flows {
			if f.Name == scaleBackfill {
				last = fmt.Sprintf("%s with %d done, %d remaining", f.State, f.Done, f.Remaining)
				if f.Done == want && ready {
					rep.Seeding.ServeReadyNote = last
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the served app still says the backfill is %q (ready %v), want %d items done", last, ready, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// scaleGet GETs u, reads the whole answer, and returns how long that took;
// any status but 200 is an error.
func scaleGet(ctx context.Context, client *http.Client, u string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	t := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s: %.300s", u, resp.Status, body)
	}
	return d, nil
}

func printScaleReport(w io.Writer, rep scaleReport) {
	fmt.Fprintf(w, "%s: %d runs completed, %d failed; %d items saved, %d parked; %d dropped events; %d samples\n",
		rep.DatabaseKind, rep.Runs[string(run.Completed)], rep.Runs[string(run.Failed)], rep.Items["saved"], rep.Items["parked"], rep.Dropped, rep.HistorySamples)
	s := rep.Seeding
	fmt.Fprintf(w, "seeded in %.1f s (app table %.1f s; items %.1f s, %.0f/s; runs %.1f s, %.0f/s, %d events sent again; samples %.1f s), database %.0f MB; served in %.1f s\n",
		s.TotalS, s.AppTableS, s.ItemsS, s.ItemsPerS, s.RunsS, s.RunsPerS, s.SendRetries, s.HistoryS, float64(s.DatabaseBytes)/1e6, s.ServeStartS)
	fmt.Fprintf(w, "%d requests per path, ms:\n", rep.Samples)
	width := 0
	for _, p := range rep.Paths {
		width = max(width, len(p.Label))
	}
	fmt.Fprintf(w, "  %-*s %9s %9s %9s %8s  %s\n", width, "path", "p50", "p95", "max", "target", "p95")
	for _, p := range rep.Paths {
		verdict := "holds"
		if !p.Holds {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "  %-*s %9.1f %9.1f %9.1f %8s  %s\n", width, p.Label, p.P50, p.P95, p.Max, "≤ "+strconv.FormatFloat(p.TargetMS, 'f', -1, 64), verdict)
	}
	if rep.Missed == 0 {
		fmt.Fprintln(w, "every target holds")
	} else {
		fmt.Fprintf(w, "%d of %d targets missed\n", rep.Missed, len(rep.Paths))
	}
}
