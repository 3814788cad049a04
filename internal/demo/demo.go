// Package demo is "sluice demo": DevPick's three LLM jobs on one
// rate-limited key, on sluice and on the seed's own scheduler side by side,
// each against a simulated key of its own on one accelerated clock, with
// a live view in the terminal and a side-by-side page beside sluice's
// dashboard (docs/demo.md).
package demo

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/devpick"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
)

// Command is "sluice demo".
func Command() *cli.Command {
	return &cli.Command{
		Name:    "demo",
		Summary: "run DevPick's three LLM jobs on one rate-limited key, on sluice and on the seed's own scheduler, side by side",
		Run:     runDemo,
	}
}

// The demo's defaults.
const (
	// demoSpeed runs a simulated day in two minutes.
	demoSpeed = 720
	// demoArticles is how many old articles wait for their English
	// summary and title at the start.
	demoArticles = 2000
	// demoSummarised is how many of them already have their English
	// summary, so their titles wait (the seed's 1,412).
	demoSummarised = 1412
	// demoArrivals is how many new articles arrive a day (the seed's
	// figure).
	demoArrivals = 100
	// demoProvider names the sluice side's provider key in the app, the
	// dashboard and /v1/flows.
	demoProvider = "groq"
	// demoHealthEvery is how often, in simulated time, sluice's health
	// monitor samples its jobs, and the demo the seed's scheduler's.
	demoHealthEvery = 5 * time.Minute
)

// The names of the two simulated keys, in /sim/stats and the views.
const (
	sideNaive  = "naive"
	sideSluice = "sluice"
)

func runDemo(ctx context.Context, env *cli.Env, args []string) error {
	return runDemoOn(ctx, env, args, demoNet{})
}

// demoNet stands in for the network when its fields are set: listen
// serves the demo's server, and transport carries the calls of both sides
// to the simulators. A test runs the demo on the virtual clock of a
// testing/synctest bubble this way, over an in-memory network: a goroutine
// reading a socket never lets that clock move.
type demoNet struct {
	listen    func(addr string) (net.Listener, error)
	transport http.RoundTripper
}

// runDemoOn runs the demo command with args, on n.
func runDemoOn(ctx context.Context, env *cli.Env, args []string, n demoNet) error {
	fs := cli.NewFlagSet(env, "demo", "[flags]",
		"Runs DevPick's English backfill (see docs/demo.md): the analysis of new articles, the English\n"+
			"summaries of "+fmt.Sprint(demoArticles)+" old ones and the English titles of those with a summary ("+fmt.Sprint(demoSummarised)+" at the start),\n"+
			"on one key with the limits of the\n"+
			"seed's Groq free tier ("+devpick.Limits+"). Two simulated keys\n"+
			"with those limits serve two pipelines over the same articles: on the left the seed's own\n"+
			"scheduler (one rate_limited_until flag, a fixed job order, no max_tokens), on the right\n"+
			"sluice's backfills under its quota governor. Time runs --speed times as fast as the wall\n"+
			"clock for the simulators and sluice alike (a simulated day in two minutes). The terminal\n"+
			"shows both live; the dashboard, the run API, /metrics, the side-by-side page /demo and the\n"+
			"simulators' counts /sim/stats are served on --addr. Stops after --for of simulated time or\n"+
			"at Ctrl-C, and prints what each side did. Run it again with the same --db to resume.\n"+
			"With --upstream it drives a real provider instead (sluice's side only, on the wall clock).")
	addr := fs.String("addr", "127.0.0.1:8288", "address to serve the dashboard, the API and the simulators on (loopback only)")
	dbPath := fs.String("db", "", "SQLite file of the articles and of sluice's records; run again with the same file to resume (default: a new file in a temporary folder, removed at the end)")
	speed := fs.Float64("speed", demoSpeed, fmt.Sprintf("how many times as fast as the wall clock the simulated time runs (1 to %d)", sluice.MaxSpeed))
	dur := fs.Duration("for", 24*time.Hour, "how long to run, in simulated time (0: until Ctrl-C)")
	articles := fs.Int("articles", demoArticles, "old articles to backfill (the same ones on every run)")
	every := fs.Duration("report-every", time.Second, "how often the terminal view is redrawn, in wall time (at least 10 s when the output is not a terminal)")
	upstream := fs.String("upstream", "", "base URL of a real OpenAI-compatible provider (…/v1) for sluice's side, instead of the simulator; the naive side does not run")
	keyEnv := fs.String("api-key-env", "GROQ_API_KEY", "environment variable holding the --upstream provider's API key")
	profile := fs.String("profile", "groq", "the --upstream provider's profile: groq, openai or anthropic")
	model := fs.String("model", "", `the model every call names (default "sim-model"; with --upstream "llama-3.1-8b-instant")`)
	limitsFlag := fs.String("limits", devpick.Limits, "the key's limits (with --upstream: those of your key)")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	o := demoOptions{addr: *addr, speed: *speed, dur: *dur, articles: *articles, every: *every, upstream: *upstream, model: *model, net: n}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := o.check(set); err != nil {
		fmt.Fprintf(env.Stderr, "sluice demo: %v\n", err)
		return cli.ErrUsage
	}
	limits, err := govtext.Limits(*limitsFlag)
	if err != nil {
		fmt.Fprintf(env.Stderr, "sluice demo: --limits: %v\n", err)
		return cli.ErrUsage
	}
	o.limits, o.limitsText = limits, *limitsFlag
	if o.upstream != "" {
		if o.profile, err = llm.ParseProfile(*profile); err != nil {
			fmt.Fprintf(env.Stderr, "sluice demo: --profile: %v\n", err)
			return cli.ErrUsage
		}
		if o.apiKey = env.Getenv(*keyEnv); o.apiKey == "" {
			return fmt.Errorf("--upstream needs an API key: the variable %s (--api-key-env) is empty", *keyEnv)
		}
	}
	if err := guard.CheckBind(o.addr, false, "the demo serves its dashboard and API without a token"); err != nil {
		return err
	}
	o.db = *dbPath
	if o.db == "" {
		dir, err := os.MkdirTemp("", "sluice-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.db = filepath.Join(dir, "devpick.db")
	}
	return runDemoWith(ctx, env, o)
}

// demoOptions are the demo's flags, checked.
type demoOptions struct {
	addr, db, upstream, model string
	speed                     float64
	dur, every                time.Duration
	articles                  int
	limits                    governor.Limits
	limitsText                string
	profile                   llm.Profile
	apiKey                    string
	net                       demoNet
}

// check bounds the flags; set says which were given.
func (o *demoOptions) check(set map[string]bool) error {
	switch {
	case o.addr == "":
		return errors.New(`--addr is required: the simulators are served on it ("127.0.0.1:0" picks a free port)`)
	case !(o.speed >= 1) || o.speed > sluice.MaxSpeed:
		return fmt.Errorf("--speed %v: want a number from 1 to %d", o.speed, sluice.MaxSpeed)
	case o.dur < 0:
		return fmt.Errorf("--for %s is negative", o.dur)
	case o.articles < 0 || o.articles > 1_000_000:
		return fmt.Errorf("--articles %d: want 0 to 1,000,000", o.articles)
	case o.every < 10*time.Millisecond:
		return fmt.Errorf("--report-every %s: want at least 10ms", o.every)
	}
	if o.upstream != "" {
		if set["speed"] && o.speed != 1 {
			return errors.New("--speed with --upstream: a real provider counts its limits on the wall clock, so sluice must too")
		}
		o.speed = 1
		if o.model == "" {
			o.model = "llama-3.1-8b-instant"
		}
	}
	if o.model == "" {
		o.model = "sim-model"
	}
	return nil
}

// demoClock is the demo's one clock, which every party reads: a
// *clock.Clock.
type demoClock interface {
	Now() time.Time
	// Real is a duration of the clock in wall time.
	Real(d time.Duration) time.Duration
}

var _ demoClock = (*clock.Clock)(nil)

// demo is one running demo: its clock, the articles, the two sides.
type demo struct {
	o      demoOptions
	clk    demoClock
	db     *sql.DB
	app    *sluice.App
	api    http.Handler
	naive  *devpick.Naive             // nil with --upstream
	models map[string]*forecast.Model // by side; none with --upstream
	began  time.Time                  // the simulated time this run started at
	// first is the simulated time the demo first started at on its
	// database, and resumed says this run goes on from an earlier one's.
	first   time.Time
	resumed bool
	base    map[string]map[string]int

	mu      sync.Mutex
	last    map[string]map[string]time.Time // side → job → simulated time its done count last grew
	seen    map[string]map[string]int
	rates   map[string]*health.Sampler // the seed's scheduler's jobs' rates, by job
	point   time.Time                  // the simulated time of the chart's last point
	pending []chartPoint               // the chart's points not yet written
}

func runDemoWith(ctx context.Context, env *cli.Env, o demoOptions) error {
	db, err := devpick.OpenDB(o.db)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := newDemo(ctx, o, db)
	if err != nil {
		return err
	}
	listen := func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	if o.net.listen != nil {
		listen = o.net.listen
	}
	ln, err := listen(o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pick another with --addr, or 127.0.0.1:0 for a free port)", o.addr, err)
	}
	base := "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	stopSims, err := d.serveSims(mux)
	defer stopSims()
	if err != nil {
		return err
	}
	logs := &demoLog{w: env.Stderr}
	// The app runs on a context Ctrl-C does not cancel: it is stopped by
	// Stop, once the demo has begun to stop and its logger knows it —
	// cancelled, DBOS's queue runners would log their last polls as
	// errors before the demo could tell them from real ones.
	appCtx := context.WithoutCancel(ctx)
	stopApp, err := d.newApp(appCtx, base, logs)
	defer stopApp()
	if err != nil {
		return err
	}
	serveErr, shutdown, err := d.serve(mux, ln)
	if err != nil {
		return err
	}
	defer shutdown()
	if d.base, err = d.counts(ctx); err != nil {
		return err
	}
	if err := d.app.Start(appCtx); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "dashboard  %s/\nside by side  %s/demo   simulators  %s/sim/stats\ndatabase  %s\n", base, base, base, o.db)
	if d.resumed {
		fmt.Fprintf(env.Stdout, "resumed  at simulated %s, %.2f days after the demo began on this database (%s)\n",
			d.began.UTC().Format("Jan 2 15:04"), d.began.Sub(d.first).Hours()/24, d.first.UTC().Format("Jan 2 15:04"))
	}
	fmt.Fprintln(env.Stdout)
	runErr := d.run(ctx, env.Stdout, base, logs, serveErr)
	// The work has stopped; read the outcome, then stop sluice: what the
	// summary reads is what the database holds.
	bg := context.WithoutCancel(ctx)
	_ = saveDemoClock(bg, db, d.clk.Now())
	snap, err := d.snapshot(bg)
	_ = d.flushPoints(bg)
	stopApp()
	if err != nil {
		return err
	}
	if runErr != nil && !errors.Is(runErr, http.ErrServerClosed) {
		return runErr
	}
	fmt.Fprintln(env.Stdout)
	renderDemo(env.Stdout, snap)
	fmt.Fprintln(env.Stdout)
	renderDemoSummary(env.Stdout, snap)
	return nil
}

// newDemo starts the demo's clock where the last run on db stopped, and
// seeds the articles it has not yet.
func newDemo(ctx context.Context, o demoOptions, db *sql.DB) (*demo, error) {
	origin, err := loadDemoClock(ctx, db)
	if err != nil {
		return nil, err
	}
	d := &demo{o: o, clk: clock.At(o.speed, origin), db: db, models: map[string]*forecast.Model{},
		last: map[string]map[string]time.Time{}, seen: map[string]map[string]int{}, rates: map[string]*health.Sampler{}}
	d.began = d.clk.Now()
	d.resumed = !origin.IsZero()
	if d.first, err = demoStart(ctx, db, d.began); err != nil {
		return nil, err
	}
	if d.point, err = lastPoint(ctx, db); err != nil {
		return nil, err
	}
	if _, err := devpick.Seed(ctx, db, o.articles); err != nil {
		return nil, err
	}
	if _, err := devpick.SeedSummaries(ctx, db, min(demoSummarised, o.articles)); err != nil {
		return nil, err
	}
	return d, nil
}

// serveSims serves the two simulated keys on mux, under /sim/naive/ and
// /sim/sluice/, and their counts at /sim/stats; none with --upstream. stop
// stops them.
func (d *demo) serveSims(mux *http.ServeMux) (stop func(), err error) {
	var sims []*sim.Server
	stop = func() {
		for _, s := range slices.Backward(sims) {
			_ = s.Stop(context.Background())
		}
	}
	if d.o.upstream != "" {
		return stop, nil
	}
	for i, side := range []string{sideNaive, sideSluice} {
		// Groq's answer to a request without max_tokens: it expects
		// up to 2,048 output tokens of it.
		m, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: d.o.limits, Latency: 2 * time.Second, DefaultMaxTokens: 2048, DefaultMaxTokensMin: 300, Seed: int64(i + 1), Wire: true})
		if err != nil {
			return stop, err
		}
		s := sim.NewServer(m, sim.ServerConfig{Now: d.clk.Now, Speed: d.o.speed})
		sims = append(sims, s)
		d.models[side] = m
		mux.Handle("/sim/"+side+"/", http.StripPrefix("/sim/"+side, s))
	}
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]forecast.Stats{sideNaive: d.models[sideNaive].Stats(), sideSluice: d.models[sideSluice].Stats()})
	})
	return stop, nil
}

// newApp builds sluice's side on the simulated key served at base (or
// --upstream) and, on the simulator, the seed's scheduler beside it. stop
// stops the app, once.
func (d *demo) newApp(ctx context.Context, base string, logs *demoLog) (stop func(), err error) {
	o := d.o
	var client *http.Client // nil: llm's default
	if o.net.transport != nil {
		client = &http.Client{Transport: o.net.transport}
	}
	providerURL, key := base+"/sim/"+sideSluice+"/v1", ""
	profile := llm.Groq
	if o.upstream != "" {
		providerURL, key, profile = o.upstream, o.apiKey, o.profile
	}
	stop = func() {}
	d.app, err = sluice.New(ctx, sluice.Config{
		DatabaseURL: o.db,
		Providers: []sluice.Provider{{Name: demoProvider, Limits: o.limits,
			LLM: llm.Config{BaseURL: providerURL, APIKey: key, Profile: profile, HTTPClient: client}}},
		Flows:        devpick.Flows(),
		Now:          d.clk.Now,
		Speed:        o.speed,
		HealthEvery:  demoHealthEvery,
		HistoryEvery: 10 * time.Minute,
		Logger:       slog.New(quietStop{slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}), &logs.stopping}),
	})
	if err != nil {
		return stop, err
	}
	var once sync.Once
	stop = func() { once.Do(func() { _ = d.app.Stop(context.Background()) }) }
	err = devpick.Register(d.app, devpick.Config{DB: d.db, Model: o.model, Provider: demoProvider,
		AnalysisPoll: 10 * time.Minute, Poll: 30 * time.Minute, Strict: o.upstream != ""})
	if err != nil {
		return stop, err
	}
	if o.upstream == "" {
		d.naive, err = devpick.NewNaive(devpick.NaiveConfig{DB: d.db, BaseURL: base + "/sim/" + sideNaive + "/v1", Model: o.model,
			Transport: o.net.transport, Now: d.clk.Now, Sleep: func(ctx context.Context, dd time.Duration) error { return sleepCtx(ctx, d.clk.Real(dd)) }})
	}
	return stop, err
}

// serve serves, on ln, the dashboard, the run API, /metrics, the side by
// side page /demo and its /demo.json beside what mux holds; serveErr
// says why the server stopped, and shutdown stops it.
func (d *demo) serve(mux *http.ServeMux, ln net.Listener) (serveErr <-chan error, shutdown func(), err error) {
	dash, err := d.app.Dashboard(sluice.DashboardConfig{Refresh: 2 * time.Second,
		Links: []sluice.DashboardLink{{Label: "Side by side", Href: "/demo"}}})
	if err != nil {
		return nil, nil, err
	}
	d.api = d.app.Handler(sluice.HandlerConfig{})
	mux.Handle("/v1/", d.api)
	mux.Handle("/healthz", d.api)
	mux.Handle("/readyz", d.api)
	mux.Handle("GET /metrics", d.app.MetricsHandler())
	page, ok := dash.(interface {
		Page(title string, body func(*http.Request) (template.HTML, error)) http.Handler
	})
	if !ok {
		return nil, nil, errors.New("the dashboard cannot show the side-by-side page in its layout")
	}
	mux.Handle("GET /demo", page.Page("Side by side", d.page))
	mux.HandleFunc("GET /demo.json", func(w http.ResponseWriter, r *http.Request) {
		snap, err := d.snapshot(r.Context())
		if err != nil {
			httpjson.Error(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		httpjson.Write(w, http.StatusOK, snap)
	})
	mux.Handle("/", dash)
	srv := guard.NewServer(mux, guard.Config{Addr: d.o.addr, Forms: serveapp.DashboardForm})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return errc, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// run runs the seed's scheduler, the new articles and the clock's record,
// and redraws the view on out every --report-every, until --for has passed
// on the simulated clock, ctx ends or the server stops (its error); then it
// stops that work.
func (d *demo) run(ctx context.Context, out io.Writer, base string, logs *demoLog, serveErr <-chan error) error {
	work, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if d.naive != nil {
		wg.Go(func() { _ = d.naive.Run(work) })
	}
	wg.Go(func() { d.arrivals(work, logs) })
	if d.naive != nil {
		wg.Go(func() { d.measureNaive(work) })
	}
	wg.Go(func() { d.keepClock(work) })

	tty := cli.IsTerminal(out)
	every := d.o.every
	if !tty {
		every = max(every, 10*time.Second)
	}
	end := time.Time{}
	if d.o.dur > 0 {
		end = d.began.Add(d.o.dur)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	check := time.NewTicker(50 * time.Millisecond)
	defer check.Stop()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case runErr = <-serveErr:
			break loop
		case <-check.C:
			if !end.IsZero() && !d.clk.Now().Before(end) {
				break loop
			}
		case <-tick.C:
			snap, err := d.snapshot(ctx)
			if err != nil {
				continue // the database is busy: the next tick shows it
			}
			if tty {
				fmt.Fprint(out, "\x1b[H\x1b[2J")
				fmt.Fprintf(out, "dashboard  %s/   side by side  %s/demo\n\n", base, base)
			}
			renderDemo(out, snap)
			fmt.Fprintln(out)
		}
	}
	// Stop the work first: what the summary then reads is final.
	logs.stopping.Store(true)
	cancel()
	wg.Wait()
	return runErr
}

// arrivals adds the site's new articles, demoArrivals a simulated day.
func (d *demo) arrivals(ctx context.Context, logs *demoLog) {
	gap := 24 * time.Hour / demoArrivals
	for {
		if err := sleepCtx(ctx, d.clk.Real(gap)); err != nil {
			return
		}
		if _, err := devpick.Arrive(ctx, d.db, d.clk.Now()); err != nil && ctx.Err() == nil {
			logs.printf("sluice demo: a new article could not be added: %v\n", err)
		}
	}
}

// measureNaive samples the seed's scheduler's done counts every
// demoHealthEvery of simulated time, as sluice's health monitor samples
// its jobs, so that both sides' rates are measured alike however often
// the views are drawn.
func (d *demo) measureNaive(ctx context.Context) {
	for {
		if err := sleepCtx(ctx, d.clk.Real(demoHealthEvery)); err != nil {
			return
		}
		done, err := jobsDone(ctx, d.db, sideNaive)
		if err != nil {
			continue // the database is busy: the next sample counts it
		}
		now := d.clk.Now()
		for job, n := range done {
			d.sampleNaive(job, now, n)
		}
	}
}

// keepClock records the simulated time every few seconds, so a demo run
// again on the same database starts where this one stopped, and writes
// the chart's points the views kept.
func (d *demo) keepClock(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = saveDemoClock(ctx, d.db, d.clk.Now())
			_ = d.flushPoints(ctx) // kept for the next flush when the database is busy
		}
	}
}

// The demo's own tables: the simulated time it last recorded, the one it
// first started at, and each side's jobs' done counts over time (the
// side-by-side page's chart).
const (
	demoClockTable    = `CREATE TABLE IF NOT EXISTS demo_clock (id INTEGER PRIMARY KEY CHECK (id = 1), at_ms BIGINT NOT NULL)`
	demoStartTable    = `CREATE TABLE IF NOT EXISTS demo_start (id INTEGER PRIMARY KEY CHECK (id = 1), at_ms BIGINT NOT NULL)`
	demoProgressTable = `CREATE TABLE IF NOT EXISTS demo_progress (at_ms BIGINT NOT NULL, side TEXT NOT NULL, job TEXT NOT NULL, done BIGINT NOT NULL, PRIMARY KEY (at_ms, side, job))`
)

// demoStart returns the simulated time the demo first started at on db,
// recording now as that time when no run has yet (or none recorded it).
func demoStart(ctx context.Context, db *sql.DB, now time.Time) (time.Time, error) {
	if _, err := db.ExecContext(ctx, demoStartTable); err != nil {
		return time.Time{}, fmt.Errorf("the demo's start: %w", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO demo_start (id, at_ms) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, now.UnixMilli()); err != nil {
		return time.Time{}, fmt.Errorf("the demo's start: %w", err)
	}
	var ms int64
	if err := db.QueryRowContext(ctx, `SELECT at_ms FROM demo_start WHERE id = 1`).Scan(&ms); err != nil {
		return time.Time{}, fmt.Errorf("the demo's start: %w", err)
	}
	return time.UnixMilli(ms), nil
}

func loadDemoClock(ctx context.Context, db *sql.DB) (time.Time, error) {
	if _, err := db.ExecContext(ctx, demoClockTable); err != nil {
		return time.Time{}, fmt.Errorf("the demo's clock: %w", err)
	}
	var ms int64
	switch err := db.QueryRowContext(ctx, `SELECT at_ms FROM demo_clock WHERE id = 1`).Scan(&ms); {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("the demo's clock: %w", err)
	}
	return time.UnixMilli(ms), nil
}

func saveDemoClock(ctx context.Context, db *sql.DB, at time.Time) error {
	_, err := db.ExecContext(ctx, `INSERT INTO demo_clock (id, at_ms) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET at_ms = MAX(at_ms, excluded.at_ms)`, at.UnixMilli())
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sideLabel is how the views name a side.
func sideLabel(side string) string {
	if side == sideNaive {
		return "the seed's scheduler"
	}
	return "sluice"
}

// jobNames are the three jobs in the seed's order.
var jobNames = []string{devpick.Analysis, devpick.Summary, devpick.Title}

// sides lists the sides that run: the naive one only on the simulator.
func (d *demo) sides() []string {
	if d.naive == nil {
		return []string{sideSluice}
	}
	return []string{sideNaive, sideSluice}
}
