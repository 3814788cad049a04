package benchcmd

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
)

// The worker is this same binary (or, with --upgrade, a build of it),
// started with these variables set; the simulator stays in the parent so
// its log of calls survives the stops.
const (
	crashWorkerEnv      = "SLUICE_BENCH_CRASH_WORKER" // "send": send documents until stopped; "drain": send the minimum, then finish every run
	crashDBEnv          = "SLUICE_BENCH_CRASH_DB"
	crashProviderEnv    = "SLUICE_BENCH_CRASH_PROVIDER"
	crashEventsEnv      = "SLUICE_BENCH_CRASH_EVENTS"
	crashConcurrencyEnv = "SLUICE_BENCH_CRASH_CONCURRENCY"
	crashRetriesEnv     = "SLUICE_BENCH_CRASH_RETRIES"
	crashFirstByteEnv   = "SLUICE_BENCH_CRASH_FIRST_BYTE"
	crashStopGraceEnv   = "SLUICE_BENCH_CRASH_STOP_GRACE"  // sluice.Config.StopGrace; 0: none
	crashAppVersionEnv  = "SLUICE_BENCH_CRASH_APP_VERSION" // sluice.Config.AppVersion; empty: the default
)

// What a worker prints on stdout, one line each, for the parent to follow.
const (
	crashBuild = "build " // followed by the worker's buildStamp, before crashReady
	crashReady = "ready"  // the app has started: runs are executing
	crashSent  = "sent "  // followed by how many documents have been sent in all
	crashStall = 2 * time.Minute
)

// How a worker is stopped (--stop).
const (
	stopKill = "kill" // SIGKILL: no shutdown, no flush
	stopTerm = "term" // SIGTERM, then the worker stops by itself, as a deploy stops it
	stopMix  = "mix"  // either, at random, about half each
)

// termSlack is how much longer than its grace a graceful stop may take,
// from the signal to the process's exit: DBOS's own stop, closing the
// database, exiting.
const termSlack = 2 * time.Second

// crashFaults are the provider faults of --faults: fractions of admitted calls.
var crashFaults = forecast.Faults{Error5xx: 0.10, Timeout: 0.05, Reset: 0.02, BadJSON: 0.02}

func newCrashCommand(cfg Config) *cli.Command {
	return &cli.Command{
		Name:    "crash",
		Summary: "SIGKILL or SIGTERM a worker running the summarize pipeline N times, optionally upgrading it; count lost, cancelled and duplicate runs, re-billed calls",
		Run: func(ctx context.Context, env *cli.Env, args []string) error {
			return runBenchCrash(ctx, env, args, cfg.BuildStamp)
		},
	}
}

type crashReport struct {
	// Stops counts the workers stopped, always the number asked for:
	// Kills by SIGKILL, GracefulStops by SIGTERM (each then exited by
	// itself, with status 0).
	Stops         int    `json:"stops"`
	Kills         int    `json:"kills"`
	GracefulStops int    `json:"graceful_stops"`
	StopMode      string `json:"stop_mode"`
	// StopGraceSeconds is the workers' sluice.Config.StopGrace;
	// MaxStopSeconds and MeanStopSeconds are of the graceful stops, from
	// the signal to the worker's exit.
	StopGraceSeconds float64 `json:"stop_grace_seconds"`
	MaxStopSeconds   float64 `json:"max_stop_seconds"`
	MeanStopSeconds  float64 `json:"mean_stop_seconds"`
	// Upgrade: every worker ran a build of its own (Builds of them, told
	// apart by the stamp each printed). AppVersion is the version the
	// workers declared (empty: the default, derived from the app's
	// functions); Versions, the versions the runs were recorded under:
	// one, whatever the builds.
	Upgrade        bool     `json:"upgrade"`
	Builds         int      `json:"builds,omitempty"`
	AppVersion     string   `json:"app_version,omitempty"`
	Versions       []string `json:"versions"`
	Concurrency    int      `json:"concurrency"`
	Faults         bool     `json:"faults"`
	DBRestarts     int      `json:"db_restarts"`
	Runs           int      `json:"runs"`
	Completed      int      `json:"completed"`
	Lost           int      `json:"lost"`
	DuplicateSaves int      `json:"duplicate_saves"`
	// Stuck counts the runs that did not complete; Cancelled, those of
	// them DBOS marked cancelled: a stop must never cancel a run.
	Stuck         int `json:"stuck"`
	Cancelled     int `json:"cancelled"`
	LLMCalls      int `json:"llm_calls"`
	FaultedCalls  int `json:"faulted_calls"`
	RebilledCalls int `json:"rebilled_calls"`
	// RebilledInFlight are calls whose answer no step recorded: a stop (or
	// a database restart) came while they were in flight or before the
	// worker recorded their answer. RebilledFinished are calls made again
	// after their step was recorded: a durable step must make none.
	RebilledInFlight int `json:"rebilled_in_flight"`
	RebilledFinished int `json:"rebilled_finished"`
	// The in-flight re-bills by the kind of interruption they were charged
	// to. A graceful stop lets the calls in flight finish: when every call
	// ends within the grace, it cuts none.
	RebilledByKills         int `json:"rebilled_by_kills"`
	RebilledByGracefulStops int `json:"rebilled_by_graceful_stops"`
	RebilledByDBRestarts    int `json:"rebilled_by_db_restarts"`
	// MaxRebilledPerKill is the most in-flight re-bills one interruption
	// (stop or restart) caused: at most the calls in flight, Concurrency.
	MaxRebilledPerKill int     `json:"max_rebilled_per_kill"`
	WallSeconds        float64 `json:"wall_seconds"`
	// StuckRuns lists the runs that did not complete: ID, status, error.
	StuckRuns []string `json:"stuck_runs,omitempty"`

	perBreak []int // in-flight re-bills charged to each break given to crashCheck, in order
}

// A break is an interruption of the work that in-flight calls are charged
// to: a worker's stop, or a database restart while a worker runs.
type crashBreak struct {
	at     time.Time
	worker int // the index of the worker it interrupted
	kind   string
}

// The kinds of break.
const (
	breakKill      = "kill"
	breakGraceful  = "graceful"
	breakDBRestart = "db restart"
)

// crashOptions are the crash bench's flags, checked.
type crashOptions struct {
	stops                        int
	stopMode                     string
	stopGrace                    time.Duration
	events, concurrency, retries int
	dbURL                        string
	latency, firstByte           time.Duration
	faults, dbRestart, upgrade   bool
	restartCmd, appVersion       string
	src, buildsDir               string
	seed                         uint64
	asJSON                       bool
}

func runBenchCrash(ctx context.Context, env *cli.Env, args []string, stamp string) error {
	if mode := env.Getenv(crashWorkerEnv); mode != "" {
		return crashWorker(ctx, env, mode, stamp)
	}
	o, err := parseCrashFlags(env, args)
	if err != nil {
		return err
	}
	return runCrash(ctx, env, o)
}

func parseCrashFlags(env *cli.Env, args []string) (crashOptions, error) {
	var o crashOptions
	fs := cli.NewFlagSet(env, "bench crash", "[flags]",
		"Runs examples/summarize against the provider simulator in a worker process that keeps\n"+
			"sending new documents, stops the worker exactly --stops times at random points (SIGKILL,\n"+
			"or with --stop term a SIGTERM it must stop gracefully on, within --stop-grace plus 2s, and\n"+
			"exit 0) and restarts it (with --upgrade, as a new build each time), then lets the last\n"+
			"worker finish every run. Counts come from the simulator's log of calls, the database's\n"+
			"step records and the save target: lost, cancelled and stuck runs, duplicate saves and\n"+
			"calls re-billed after their step was recorded must be 0; calls re-billed because a kill\n"+
			"cut them are bounded by the calls in flight (--concurrency) per kill, and a graceful stop\n"+
			"cuts none when every call ends within its grace. See docs/reliability.md.")
	fs.IntVar(&o.stops, "stops", 10, "how many times to stop the worker")
	fs.IntVar(&o.stops, "kills", 10, "the same as --stops (its older name)")
	fs.StringVar(&o.stopMode, "stop", stopKill, "how to stop the worker: kill (SIGKILL), term (SIGTERM, then wait for it to exit by itself) or mix (either at random, about half each)")
	fs.DurationVar(&o.stopGrace, "stop-grace", 5*time.Second, "the workers' sluice.Config.StopGrace: how long a graceful stop lets the calls in flight finish (0: none)")
	fs.IntVar(&o.events, "events", 0, "send at least this many documents (one run each); the workers send more as long as stops remain")
	fs.IntVar(&o.concurrency, "concurrency", summarize.DefaultConcurrency, "runs in flight in the worker (the pipeline's concurrency)")
	fs.StringVar(&o.dbURL, "db", "", "database: postgres://… URL, or an SQLite path (default: a new SQLite file in a temporary folder)")
	fs.DurationVar(&o.latency, "latency", 20*time.Millisecond, "mean response time of the simulated provider")
	fs.BoolVar(&o.faults, "faults", false, fmt.Sprintf("the simulator fails calls: 5xx %.0f %%, timeouts %.0f %%, resets %.0f %%, bad JSON %.0f %%",
		100*crashFaults.Error5xx, 100*crashFaults.Timeout, 100*crashFaults.Reset, 100*crashFaults.BadJSON))
	fs.IntVar(&o.retries, "retries", 0, "retries of a failing step (default: the pipeline's 5, or 20 with --faults)")
	fs.DurationVar(&o.firstByte, "first-byte", 2*time.Second, "how long the worker's LLM client waits for an answer to begin: it ends the simulator's timeouts")
	fs.BoolVar(&o.dbRestart, "db-restart", false, "restart the database once in the life of every stopped worker (postgres:// --db only)")
	fs.StringVar(&o.restartCmd, "db-restart-cmd", defaultRestartCmd(), "shell command that restarts the database and returns once it accepts connections")
	fs.BoolVar(&o.upgrade, "upgrade", false, "start every worker as a new build of sluice (go build with its own -X main.buildStamp, every other one -trimpath), all declaring one version")
	fs.StringVar(&o.appVersion, "app-version", "", `the version the workers declare (sluice.Config.AppVersion); "" declares none, and the default derived from the app's functions applies (default: "bench-upgrade" with --upgrade, none without)`)
	fs.StringVar(&o.src, "src", "", "with --upgrade: the root of the sluice module to build (default: the module of the current folder, as go env GOMOD says)")
	fs.StringVar(&o.buildsDir, "builds", "", "with --upgrade: run the builds already in this folder (sluice-0, sluice-1, …, one more than --stops) instead of building them")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the stop times and kinds and of the simulator")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return o, err
	}
	if o.upgrade && !cli.Given(fs)["app-version"] {
		o.appVersion = "bench-upgrade"
	}
	err := cmp.Or(
		between("stops", o.stops, 0, 10_000),
		refuseIf(o.stopMode != stopKill && o.stopMode != stopTerm && o.stopMode != stopMix, "--stop %q: want kill, term or mix", o.stopMode),
		between("stop-grace", o.stopGrace, 0, time.Hour),
		between("events", o.events, 0, 1_000_000),
		refuseIf(o.stops == 0 && o.events == 0, "with --stops 0, --events must be at least 1"),
		between("concurrency", o.concurrency, 1, 1000),
		between("first-byte", o.firstByte, time.Millisecond, time.Hour),
		between("retries", o.retries, 0, 100),
		refuseIf(o.dbRestart && !cli.IsPostgresURL(o.dbURL), "--db-restart needs a postgres:// --db"),
		refuseIf(o.dbRestart && strings.TrimSpace(o.restartCmd) == "", "--db-restart needs a --db-restart-cmd"),
		refuseIf((o.src != "" || o.buildsDir != "") && !o.upgrade, "--src and --builds go with --upgrade"),
	)
	if err != nil {
		return o, err
	}
	if o.appVersion != "" {
		if err := sluice.CheckVersion(o.appVersion); err != nil {
			return o, fmt.Errorf("--app-version: %w", err)
		}
	}
	if o.retries == 0 && o.faults {
		// At 19 % faults, 21 failures in a row happen once in 10^15 steps.
		o.retries = 20
	}
	return o, nil
}

// crashRun is one run of the crash bench: its workers, the simulator they
// call, and what it has counted so far.
type crashRun struct {
	o         crashOptions
	db        string
	exes      []string // the i-th worker's binary
	model     *forecast.Model
	calls     callLog
	providers []*sim.Server
	workerEnv []string
	rng       *rand.Rand
	rep       crashReport
	breaks    []crashBreak // each stop and restart, in order
	stopped   time.Duration
	builds    map[string]bool // the stamps the workers printed
	sent      int             // documents the workers said they had sent
}

func runCrash(ctx context.Context, env *cli.Env, o crashOptions) error {
	c := &crashRun{o: o, db: o.dbURL, builds: map[string]bool{},
		rng: rand.New(rand.NewPCG(o.seed, 7)), // #nosec G404 -- stop times need no secrecy
		rep: crashReport{StopMode: o.stopMode, StopGraceSeconds: o.stopGrace.Seconds(), Upgrade: o.upgrade, AppVersion: o.appVersion,
			Concurrency: o.concurrency, Faults: o.faults}}
	if c.db == "" {
		dir, remove, err := tempDir("sluice-crash")
		if err != nil {
			return err
		}
		defer remove()
		c.db = filepath.Join(dir, "sluice.db")
	}
	began := time.Now()
	remove, err := c.binaries(ctx)
	defer remove()
	if err != nil {
		return err
	}
	simCfg := forecast.ModelConfig{Profile: "groq", Latency: o.latency, Seed: int64(o.seed), Wire: true}
	if o.faults {
		simCfg.Faults = crashFaults
	}
	if c.model, err = forecast.NewModel(simCfg); err != nil {
		return err
	}
	defer func() {
		for _, p := range c.providers {
			_ = p.Stop(context.Background())
		}
	}()
	c.workerEnv = append(os.Environ(),
		crashDBEnv+"="+c.db,
		crashEventsEnv+"="+strconv.Itoa(o.events),
		crashConcurrencyEnv+"="+strconv.Itoa(o.concurrency),
		crashRetriesEnv+"="+strconv.Itoa(o.retries),
		crashFirstByteEnv+"="+o.firstByte.String(),
		crashStopGraceEnv+"="+o.stopGrace.String(),
		crashAppVersionEnv+"="+o.appVersion)
	for c.rep.Stops < o.stops {
		if err := c.stopOne(ctx); err != nil {
			return err
		}
	}
	if err := c.finish(ctx); err != nil {
		return err
	}
	c.rep.WallSeconds = time.Since(began).Seconds()
	err = printReport(env.Stdout, o.asJSON, "", c.rep, func(w io.Writer) { printCrashReport(w, c.rep, o.stopGrace) })
	if err != nil {
		return err
	}
	return crashVerdict(c.rep, o)
}

// binaries sets the workers' binaries: every one is this binary, or with
// --upgrade build i for the i-th. remove deletes the builds it made.
func (c *crashRun) binaries(ctx context.Context) (remove func(), err error) {
	remove = func() {}
	exe, err := os.Executable()
	if err != nil {
		return remove, err
	}
	n := c.o.stops + 1
	c.exes = slices.Repeat([]string{exe}, n)
	if !c.o.upgrade {
		return remove, nil
	}
	dir := c.o.buildsDir
	if dir == "" {
		if dir, remove, err = tempDir("sluice-upgrade"); err != nil {
			return func() {}, err
		}
		if err := buildSluice(ctx, c.o.src, dir, n); err != nil {
			return remove, err
		}
	}
	c.exes, err = sluiceBuilds(dir, n)
	return remove, err
}

// providerFor starts the simulator server of worker i. Each worker talks
// to a server of its own on the one model, so each call is known to be the
// worker's: a call a worker wrote just before it was killed may be read by
// the simulator after the kill, and it is still that worker's. The servers
// stay up to the end for such calls.
func (c *crashRun) providerFor(ctx context.Context, worker int) (string, error) {
	// A hung call must end by the client's deadline, never the simulator's.
	p := sim.NewServer(c.model, sim.ServerConfig{HangTimeout: time.Hour, OnFinish: func(call sim.Call) { c.calls.add(worker, call) }})
	if err := p.Start(ctx); err != nil {
		return "", err
	}
	c.providers = append(c.providers, p)
	return simURL(p), nil
}

// start starts worker i in mode and waits until it is ready.
func (c *crashRun) start(ctx context.Context, i int, mode string) (*crashWorkerProc, error) {
	url, err := c.providerFor(ctx, i)
	if err != nil {
		return nil, err
	}
	w, err := startCrashWorker(ctx, c.exes[i], append(c.workerEnv, crashWorkerEnv+"="+mode, crashProviderEnv+"="+url))
	if err != nil {
		return nil, err
	}
	if err := w.waitReady(ctx); err != nil {
		w.kill()
		return nil, fmt.Errorf("worker %d: %w\n%s", i+1, err, w.output())
	}
	if c.o.upgrade {
		if want := strconv.Itoa(i); w.build() != want {
			w.kill()
			return nil, fmt.Errorf("worker %d runs build %q, want %q", i+1, w.build(), want)
		}
		c.builds[w.build()] = true
	}
	return w, nil
}

// stopOne starts the next worker, restarts the database in its life with
// --db-restart, and stops it at a random point of its life.
func (c *crashRun) stopOne(ctx context.Context) error {
	o, rep := c.o, &c.rep
	graceful := o.stopMode == stopTerm || o.stopMode == stopMix && c.rng.IntN(2) == 0
	w, err := c.start(ctx, rep.Stops, "send")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		w.kill()
		return fmt.Errorf("worker %d: %w\n%s", rep.Stops+1, err, w.output())
	}
	if o.dbRestart {
		if err := c.restartDB(ctx, w); err != nil {
			return fail(err)
		}
	}
	// A random point of the worker's life, within the work: it sends
	// new documents until it is stopped. A graceful stop comes later,
	// as a deploy does, once runs have made progress.
	var wait time.Duration
	if graceful {
		wait = 200*time.Millisecond + time.Duration(c.rng.Int64N(int64(2800*time.Millisecond)))
	} else {
		wait = 100*time.Millisecond + time.Duration(c.rng.Int64N(int64(600*time.Millisecond)))
	}
	if err := w.sleep(ctx, wait); err != nil {
		return fail(err)
	}
	if graceful {
		took, err := w.term(ctx, o.stopGrace+crashStall)
		if err != nil {
			return fmt.Errorf("worker %d after SIGTERM: %w\n%s", rep.Stops+1, err, w.output())
		}
		c.stopped += took
		rep.MaxStopSeconds = max(rep.MaxStopSeconds, took.Seconds())
		rep.GracefulStops++
		c.breaks = append(c.breaks, crashBreak{at: time.Now(), worker: rep.Stops, kind: breakGraceful})
	} else {
		w.kill() // SIGKILL: no shutdown, no flush
		rep.Kills++
		c.breaks = append(c.breaks, crashBreak{at: time.Now(), worker: rep.Stops, kind: breakKill})
	}
	rep.Stops++
	c.sent = max(c.sent, w.sentCount())
	return nil
}

// restartDB restarts the database at a random moment of worker w's life,
// and waits until w goes on by itself.
func (c *crashRun) restartDB(ctx context.Context, w *crashWorkerProc) error {
	if err := w.sleep(ctx, time.Duration(c.rng.Int64N(int64(300*time.Millisecond)))); err != nil {
		return err
	}
	c.breaks = append(c.breaks, crashBreak{at: time.Now(), worker: c.rep.Stops, kind: breakDBRestart})
	if out, err := exec.CommandContext(ctx, "sh", "-c", c.o.restartCmd).CombinedOutput(); err != nil { // #nosec G204 -- the operator's own command
		return fmt.Errorf("--db-restart-cmd: %v\n%s", err, out)
	}
	c.rep.DBRestarts++
	// The worker must go on by itself: wait until it has had more
	// calls answered than it has runs in flight.
	if err := w.progress(ctx, &c.calls, c.o.concurrency+1); err != nil {
		return fmt.Errorf("after the database restart: %w", err)
	}
	return nil
}

// finish lets the last worker send what --events still asks, finish every
// run and exit, then counts what the database and the simulator hold.
func (c *crashRun) finish(ctx context.Context) error {
	rep := &c.rep
	if rep.GracefulStops > 0 {
		rep.MeanStopSeconds = c.stopped.Seconds() / float64(rep.GracefulStops)
	}
	w, err := c.start(ctx, c.o.stops, "drain")
	if err != nil {
		return fmt.Errorf("final %w", err)
	}
	if err := w.wait(); err != nil {
		return fmt.Errorf("final worker: %v\n%s", err, w.output())
	}
	rep.Builds = len(c.builds)
	c.sent = max(c.sent, w.sentCount())
	runs, err := openDBOSRuns(ctx, c.db)
	if err != nil {
		return err
	}
	defer runs.close()
	if err := crashCheck(ctx, c.db, runs, rep, c.sent, c.calls.snapshot(), c.breaks); err != nil {
		return err
	}
	for i, n := range rep.perBreak {
		switch c.breaks[i].kind {
		case breakKill:
			rep.RebilledByKills += n
		case breakGraceful:
			rep.RebilledByGracefulStops += n
		case breakDBRestart:
			rep.RebilledByDBRestarts += n
		}
	}
	st := c.model.Stats()
	rep.LLMCalls = int(st.Succeeded)
	for _, n := range st.Faults {
		rep.FaultedCalls += int(n)
	}
	return nil
}

func printCrashReport(w io.Writer, rep crashReport, grace time.Duration) {
	fmt.Fprintf(w, "stops %d (kills %d, graceful %d: longest %.2fs, mean %.2fs, grace %s)  upgrade %t (builds %d)  versions %s\n"+
		"concurrency %d  faults %t  db restarts %d  runs %d  completed %d  lost %d  duplicate saves %d  stuck %d (cancelled %d)\n"+
		"LLM calls %d  faulted %d  re-billed %d (in flight %d: by kills %d, graceful stops %d, db restarts %d; finished %d; at most %d per stop)  wall %.1fs\n",
		rep.Stops, rep.Kills, rep.GracefulStops, rep.MaxStopSeconds, rep.MeanStopSeconds, grace, rep.Upgrade, rep.Builds, strings.Join(rep.Versions, ", "),
		rep.Concurrency, rep.Faults, rep.DBRestarts, rep.Runs, rep.Completed, rep.Lost, rep.DuplicateSaves, rep.Stuck, rep.Cancelled,
		rep.LLMCalls, rep.FaultedCalls, rep.RebilledCalls, rep.RebilledInFlight, rep.RebilledByKills, rep.RebilledByGracefulStops, rep.RebilledByDBRestarts,
		rep.RebilledFinished, rep.MaxRebilledPerKill, rep.WallSeconds)
	for _, r := range rep.StuckRuns {
		fmt.Fprintln(w, "stuck:", r)
	}
}

// crashVerdict fails a run that broke what must hold whatever happens.
func crashVerdict(rep crashReport, o crashOptions) error {
	// A call can take up to 1.5 × the mean latency, or with faults until
	// the first-byte deadline; with a second more for the machine, the
	// grace lets every call in flight finish.
	longestCall := o.latency * 3 / 2
	if o.faults {
		longestCall = max(longestCall, o.firstByte)
	}
	switch {
	case rep.Cancelled > 0:
		return fmt.Errorf("%d runs were cancelled", rep.Cancelled)
	case rep.Stuck > 0:
		return fmt.Errorf("%d runs did not complete", rep.Stuck)
	case rep.Lost > 0 || rep.DuplicateSaves > 0 || rep.RebilledFinished > 0:
		return fmt.Errorf("%d runs lost, %d duplicate saves, %d calls re-billed after their step was recorded", rep.Lost, rep.DuplicateSaves, rep.RebilledFinished)
	case rep.RebilledCalls != rep.LLMCalls-2*rep.Completed:
		return fmt.Errorf("the simulator answered %d calls, but its log holds %d beyond the two of each of %d runs", rep.LLMCalls, rep.RebilledCalls, rep.Completed)
	case rep.MaxStopSeconds > (o.stopGrace + termSlack).Seconds():
		return fmt.Errorf("a graceful stop took %.2fs, more than the grace %s plus %s", rep.MaxStopSeconds, o.stopGrace, termSlack)
	case rep.RebilledByGracefulStops > 0 && o.stopGrace >= longestCall+time.Second:
		return fmt.Errorf("graceful stops cut %d calls in flight, though every call ends within the grace %s", rep.RebilledByGracefulStops, o.stopGrace)
	case len(rep.Versions) != 1:
		return fmt.Errorf("the runs were recorded under %d versions %q, want one", len(rep.Versions), rep.Versions)
	case o.appVersion != "" && rep.Versions[0] != o.appVersion:
		return fmt.Errorf("the runs were recorded under version %q, want the declared %q", rep.Versions[0], o.appVersion)
	case o.upgrade && rep.Builds != o.stops+1:
		return fmt.Errorf("the workers ran %d builds, want %d", rep.Builds, o.stops+1)
	}
	return nil
}
