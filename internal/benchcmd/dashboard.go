package benchcmd

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/internal/sim"
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

func newDashboardCommand(Config) *cli.Command {
	return &cli.Command{
		Name:    "dashboard",
		Summary: "p50/p95 of every dashboard page, JSON endpoint, search of runs and /metrics with 100,000 runs and 1,000,000 items in the store",
		Run:     runBenchDashboard,
	}
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

func runBenchDashboard(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "bench dashboard", "[flags]",
		"Fills a fresh database (an SQLite file, or a database created on the --db server and dropped\n"+
			"after) through sluice's own code: --runs runs of four functions, sent as events and run by\n"+
			"the engine (most complete, a tenth fail, a fifth have three steps; a rate-limited function\n"+
			"drops events), a backfill of --items items against the provider simulator with no limits\n"+
			"(a thousandth refused and parked), and a day of minute samples of the key's four flows.\n"+
			"Then it serves the app as sluice serve does (API, dashboard and /metrics on one handler)\n"+
			"on loopback, and times --samples GETs of every dashboard page, every JSON endpoint and\n"+
			"/metrics over HTTP, interleaved, after one untimed round; among them searches of the runs\n"+
			"(by function, status and failure text, by time range, by event key) and a run's history. Prints p50, p95 and max per path\n"+
			"against the targets: p95 ≤ 300 ms for pages and JSON, ≤ 100 ms for /metrics. Any answer\n"+
			"but 200 is an error. See docs/benchmarks.md.")
	runs := fs.Int("runs", 100_000, "runs to seed")
	items := fs.Int("items", 1_000_000, "backfill items to seed")
	dbURL := fs.String("db", "", "postgres://… URL of a server to create the database on (dropped after); default: an SQLite file in a temporary folder")
	samples := fs.Int("samples", 50, "timed requests per path")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed requests (the server's side and the client's) to `FILE`")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	err := cmp.Or(
		between("runs", *runs, 10, 10_000_000),
		between("items", *items, 1, 10_000_000),
		between("samples", *samples, 1, 10_000),
		refuseIf(*dbURL != "" && !cli.IsPostgresURL(*dbURL), "--db must be a postgres:// URL"),
	)
	if err != nil {
		return err
	}
	dir, remove, err := tempDir("sluice-bench-dashboard")
	if err != nil {
		return err
	}
	defer remove()
	_, provider, err := startSim(ctx, forecast.ModelConfig{Wire: true, Seed: 1}, sim.ServerConfig{})
	if err != nil {
		return err
	}
	defer provider.Stop(context.Background())
	db, drop, err := freshDB(ctx, dir, *dbURL, strconv.FormatInt(time.Now().UnixNano(), 36), "dashboard")
	if err != nil {
		return err
	}
	defer drop()
	b := &scaleBench{db: db, provider: simURL(provider), runs: *runs, items: *items}
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
	return printReport(env.Stdout, *asJSON, "", rep, func(w io.Writer) { printScaleReport(w, rep) })
}

type scaleBench struct {
	db, provider string
	runs, items  int
	src          *benchDB // the app table's handle: the backfill's Load, the seeding's counts
	// Set while seeding: the window in which the items were processed,
	// and a run of three steps to show.
	itemsFrom, itemsTo time.Time
	stepsRun           string
	// The window in which the runs were seeded, for the searches by time.
	runsFrom, runsTo time.Time
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
	// The searches: by function, status and the text of the failures
	// (found in every failed run of the function, and in none: the search
	// then reads every one), by reason alone, by event key, and the
	// middle third of the seeding's window.
	found := url.Values{"function": {scaleFail}, "status": {"failed"}, "reason": {scaleFailReason}}.Encode()
	none := url.Values{"function": {scaleFail}, "status": {"failed"}, "reason": {"no such reason"}}.Encode()
	third := b.runsTo.Sub(b.runsFrom) / 3
	window := url.Values{"since": {b.runsFrom.Add(third).UTC().Format(time.RFC3339Nano)},
		"until": {b.runsFrom.Add(2 * third).UTC().Format(time.RFC3339Nano)}}.Encode()
	key := url.Values{"event_key": {strings.TrimPrefix(b.stepsRun, scaleSteps+":")}}.Encode()
	labels := map[string]string{deep: flow + "?before_at=(half-way)", "/runs?" + window: "/runs?since=…&until=… (middle third)",
		"/v1/runs?" + window: "/v1/runs?since=…&until=… (middle third)"}
	var out []scaleTarget
	for _, p := range []string{"/", "/flows", flow, deep, "/runs", "/runs?status=failed", "/runs?function=" + scaleFail, "/runs?" + found, "/runs?" + window,
		"/runs/" + id, "/plan", "/send"} {
		out = append(out, scaleTarget{p, "page", cmp.Or(labels[p], p)})
	}
	for _, p := range []string{"/v1/runs", "/v1/runs?status=failed", "/v1/runs?function=" + scaleSteps,
		"/v1/runs?function=" + scaleFail + "&status=failed", "/v1/runs?since=1h&limit=1000",
		"/v1/runs?" + found, "/v1/runs?" + none, "/v1/runs?" + url.Values{"reason": {scaleFailReason}}.Encode(),
		"/v1/runs?" + window, "/v1/runs?" + window + "&status=failed", "/v1/runs?" + key,
		"/v1/runs/" + id, "/v1/runs/" + id + "/history",
		"/v1/flows", "/v1/dropped", "/readyz"} {
		out = append(out, scaleTarget{p, "json", cmp.Or(labels[p], p)})
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
	srv := guard.NewServer(serveapp.Handler(serveapp.Parts{App: app, Dashboard: dashboard}), guard.Config{Addr: ln.Addr().String(), Forms: serveapp.DashboardForm})
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
	stopProfile, err := startCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
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
