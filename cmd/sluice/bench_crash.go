package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
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

func init() {
	registerBench(&command{
		name:    "crash",
		summary: "SIGKILL or SIGTERM a worker running the summarize pipeline N times, optionally upgrading it; count lost, cancelled and duplicate runs, re-billed calls",
		run:     runBenchCrash,
	})
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

func runBenchCrash(ctx context.Context, env *cmdEnv, args []string) error {
	if mode := env.getenv(crashWorkerEnv); mode != "" {
		return crashWorker(ctx, env, mode)
	}
	fs := newFlagSet(env, "bench crash", "[flags]",
		"Runs examples/summarize against the provider simulator in a worker process that keeps\n"+
			"sending new documents, stops the worker exactly --stops times at random points (SIGKILL,\n"+
			"or with --stop term a SIGTERM it must stop gracefully on, within --stop-grace plus 2s, and\n"+
			"exit 0) and restarts it (with --upgrade, as a new build each time), then lets the last\n"+
			"worker finish every run. Counts come from the simulator's log of calls, the database's\n"+
			"step records and the save target: lost, cancelled and stuck runs, duplicate saves and\n"+
			"calls re-billed after their step was recorded must be 0; calls re-billed because a kill\n"+
			"cut them are bounded by the calls in flight (--concurrency) per kill, and a graceful stop\n"+
			"cuts none when every call ends within its grace. See docs/reliability.md.")
	var stops int
	fs.IntVar(&stops, "stops", 10, "how many times to stop the worker")
	fs.IntVar(&stops, "kills", 10, "the same as --stops (its older name)")
	stopMode := fs.String("stop", stopKill, "how to stop the worker: kill (SIGKILL), term (SIGTERM, then wait for it to exit by itself) or mix (either at random, about half each)")
	stopGrace := fs.Duration("stop-grace", 5*time.Second, "the workers' sluice.Config.StopGrace: how long a graceful stop lets the calls in flight finish (0: none)")
	events := fs.Int("events", 0, "send at least this many documents (one run each); the workers send more as long as stops remain")
	concurrency := fs.Int("concurrency", summarize.DefaultConcurrency, "runs in flight in the worker (the pipeline's concurrency)")
	dbURL := fs.String("db", "", "database: postgres://… URL, or an SQLite path (default: a new SQLite file in a temporary folder)")
	latency := fs.Duration("latency", 20*time.Millisecond, "mean response time of the simulated provider")
	faults := fs.Bool("faults", false, fmt.Sprintf("the simulator fails calls: 5xx %.0f %%, timeouts %.0f %%, resets %.0f %%, bad JSON %.0f %%",
		100*crashFaults.Error5xx, 100*crashFaults.Timeout, 100*crashFaults.Reset, 100*crashFaults.BadJSON))
	retries := fs.Int("retries", 0, "retries of a failing step (default: the pipeline's 5, or 20 with --faults)")
	firstByte := fs.Duration("first-byte", 2*time.Second, "how long the worker's LLM client waits for an answer to begin: it ends the simulator's timeouts")
	dbRestart := fs.Bool("db-restart", false, "restart the database once in the life of every stopped worker (postgres:// --db only)")
	restartCmd := fs.String("db-restart-cmd", defaultRestartCmd(), "shell command that restarts the database and returns once it accepts connections")
	upgrade := fs.Bool("upgrade", false, "start every worker as a new build of sluice (go build with its own -X main.buildStamp, every other one -trimpath), all declaring one version")
	appVersion := fs.String("app-version", "", `the version the workers declare (sluice.Config.AppVersion); "" declares none, and the default derived from the app's functions applies (default: "bench-upgrade" with --upgrade, none without)`)
	src := fs.String("src", "", "with --upgrade: the root of the sluice module to build (default: the module of the current folder, as go env GOMOD says)")
	buildsDir := fs.String("builds", "", "with --upgrade: run the builds already in this folder (sluice-0, sluice-1, …, one more than --stops) instead of building them")
	seed := fs.Uint64("seed", 1, "seed of the stop times and kinds and of the simulator")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	versionSet := false
	fs.Visit(func(f *flag.Flag) { versionSet = versionSet || f.Name == "app-version" })
	if *upgrade && !versionSet {
		*appVersion = "bench-upgrade"
	}
	switch {
	case stops < 0 || stops > 10_000:
		return errors.New("--stops must be between 0 and 10000")
	case *stopMode != stopKill && *stopMode != stopTerm && *stopMode != stopMix:
		return fmt.Errorf("--stop %q: want kill, term or mix", *stopMode)
	case *stopGrace < 0 || *stopGrace > time.Hour:
		return errors.New("--stop-grace must be between 0 and 1h")
	case *events < 0 || *events > 1_000_000:
		return errors.New("--events must be between 0 and 1000000")
	case stops == 0 && *events == 0:
		return errors.New("with --stops 0, --events must be at least 1")
	case *concurrency < 1 || *concurrency > 1000:
		return errors.New("--concurrency must be between 1 and 1000")
	case *firstByte < time.Millisecond || *firstByte > time.Hour:
		return errors.New("--first-byte must be between 1ms and 1h")
	case *retries < 0 || *retries > 100:
		return errors.New("--retries must be between 0 and 100")
	case *dbRestart && !isPostgresURL(*dbURL):
		return errors.New("--db-restart needs a postgres:// --db")
	case *dbRestart && strings.TrimSpace(*restartCmd) == "":
		return errors.New("--db-restart needs a --db-restart-cmd")
	case (*src != "" || *buildsDir != "") && !*upgrade:
		return errors.New("--src and --builds go with --upgrade")
	}
	if *appVersion != "" {
		if err := sluice.CheckVersion(*appVersion); err != nil {
			return fmt.Errorf("--app-version: %w", err)
		}
	}
	if *retries == 0 && *faults {
		// At 19 % faults, 21 failures in a row happen once in 10^15 steps.
		*retries = 20
	}
	db := *dbURL
	if db == "" {
		dir, err := os.MkdirTemp("", "sluice-crash")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "sluice.db")
	}
	began := time.Now()
	// Every worker is this binary, or with --upgrade build i for the i-th.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	exes := slices.Repeat([]string{exe}, stops+1)
	if *upgrade {
		dir := *buildsDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "sluice-upgrade"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			if err := buildSluice(ctx, *src, dir, stops+1); err != nil {
				return err
			}
		}
		if exes, err = sluiceBuilds(dir, stops+1); err != nil {
			return err
		}
	}
	simCfg := forecast.ModelConfig{Profile: "groq", Latency: *latency, Seed: int64(*seed), Wire: true}
	if *faults {
		simCfg.Faults = crashFaults
	}
	model, err := forecast.NewModel(simCfg)
	if err != nil {
		return err
	}
	var calls callLog
	var providers []*sim.Server
	// Each worker talks to a server of its own on the one model, so each
	// call is known to be the worker's: a call a worker wrote just before
	// it was killed may be read by the simulator after the kill, and it is
	// still that worker's. The servers stay up to the end for such calls.
	providerFor := func(worker int) (string, error) {
		// A hung call must end by the client's deadline, never the simulator's.
		p := sim.NewServer(model, sim.ServerConfig{HangTimeout: time.Hour, OnFinish: func(c sim.Call) { calls.add(worker, c) }})
		if err := p.Start(ctx); err != nil {
			return "", err
		}
		providers = append(providers, p)
		return "http://" + p.Addr() + "/v1", nil
	}
	defer func() {
		for _, p := range providers {
			_ = p.Stop(context.Background())
		}
	}()

	workerEnv := append(os.Environ(),
		crashDBEnv+"="+db,
		crashEventsEnv+"="+strconv.Itoa(*events),
		crashConcurrencyEnv+"="+strconv.Itoa(*concurrency),
		crashRetriesEnv+"="+strconv.Itoa(*retries),
		crashFirstByteEnv+"="+firstByte.String(),
		crashStopGraceEnv+"="+stopGrace.String(),
		crashAppVersionEnv+"="+*appVersion)
	rng := rand.New(rand.NewPCG(*seed, 7)) // #nosec G404 -- stop times need no secrecy
	rep := crashReport{StopMode: *stopMode, StopGraceSeconds: stopGrace.Seconds(), Upgrade: *upgrade, AppVersion: *appVersion,
		Concurrency: *concurrency, Faults: *faults}
	var breaks []crashBreak // each stop and restart, in order
	var stopped time.Duration
	builds := map[string]bool{} // the stamps the workers printed
	sent := 0                   // documents the workers said they had sent
	start := func(i int, mode string) (*crashWorkerProc, error) {
		url, err := providerFor(i)
		if err != nil {
			return nil, err
		}
		w, err := startCrashWorker(ctx, exes[i], append(workerEnv, crashWorkerEnv+"="+mode, crashProviderEnv+"="+url))
		if err != nil {
			return nil, err
		}
		if err := w.waitReady(ctx); err != nil {
			w.kill()
			return nil, fmt.Errorf("worker %d: %w\n%s", i+1, err, w.output())
		}
		if *upgrade {
			if want := strconv.Itoa(i); w.build() != want {
				w.kill()
				return nil, fmt.Errorf("worker %d runs build %q, want %q", i+1, w.build(), want)
			}
			builds[w.build()] = true
		}
		return w, nil
	}
	for rep.Stops < stops {
		graceful := *stopMode == stopTerm || *stopMode == stopMix && rng.IntN(2) == 0
		w, err := start(rep.Stops, "send")
		if err != nil {
			return err
		}
		fail := func(err error) error {
			w.kill()
			return fmt.Errorf("worker %d: %w\n%s", rep.Stops+1, err, w.output())
		}
		if *dbRestart {
			if err := w.sleep(ctx, time.Duration(rng.Int64N(int64(300*time.Millisecond)))); err != nil {
				return fail(err)
			}
			breaks = append(breaks, crashBreak{at: time.Now(), worker: rep.Stops, kind: breakDBRestart})
			if out, err := exec.CommandContext(ctx, "sh", "-c", *restartCmd).CombinedOutput(); err != nil { // #nosec G204 -- the operator's own command
				return fail(fmt.Errorf("--db-restart-cmd: %v\n%s", err, out))
			}
			rep.DBRestarts++
			// The worker must go on by itself: wait until it has had more
			// calls answered than it has runs in flight.
			if err := w.progress(ctx, &calls, *concurrency+1); err != nil {
				return fail(fmt.Errorf("after the database restart: %w", err))
			}
		}
		// A random point of the worker's life, within the work: it sends
		// new documents until it is stopped. A graceful stop comes later,
		// as a deploy does, once runs have made progress.
		var wait time.Duration
		if graceful {
			wait = 200*time.Millisecond + time.Duration(rng.Int64N(int64(2800*time.Millisecond)))
		} else {
			wait = 100*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond)))
		}
		if err := w.sleep(ctx, wait); err != nil {
			return fail(err)
		}
		if graceful {
			took, err := w.term(ctx, *stopGrace+crashStall)
			if err != nil {
				return fmt.Errorf("worker %d after SIGTERM: %w\n%s", rep.Stops+1, err, w.output())
			}
			stopped += took
			rep.MaxStopSeconds = max(rep.MaxStopSeconds, took.Seconds())
			rep.GracefulStops++
			breaks = append(breaks, crashBreak{at: time.Now(), worker: rep.Stops, kind: breakGraceful})
		} else {
			w.kill() // SIGKILL: no shutdown, no flush
			rep.Kills++
			breaks = append(breaks, crashBreak{at: time.Now(), worker: rep.Stops, kind: breakKill})
		}
		rep.Stops++
		sent = max(sent, w.sentCount())
	}
	if rep.GracefulStops > 0 {
		rep.MeanStopSeconds = stopped.Seconds() / float64(rep.GracefulStops)
	}
	// The last worker sends what --events still asks, finishes every run
	// and exits.
	w, err := start(stops, "drain")
	if err != nil {
		return fmt.Errorf("final %w", err)
	}
	if err := w.wait(); err != nil {
		return fmt.Errorf("final worker: %v\n%s", err, w.output())
	}
	rep.Builds = len(builds)
	sent = max(sent, w.sentCount())
	if err := crashCheck(ctx, db, &rep, sent, calls.snapshot(), breaks); err != nil {
		return err
	}
	for i, n := range rep.perBreak {
		switch breaks[i].kind {
		case breakKill:
			rep.RebilledByKills += n
		case breakGraceful:
			rep.RebilledByGracefulStops += n
		case breakDBRestart:
			rep.RebilledByDBRestarts += n
		}
	}
	st := model.Stats()
	rep.LLMCalls = int(st.Succeeded)
	for _, n := range st.Faults {
		rep.FaultedCalls += int(n)
	}
	rep.WallSeconds = time.Since(began).Seconds()
	if *asJSON {
		if err := json.NewEncoder(env.stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.stdout, "stops %d (kills %d, graceful %d: longest %.2fs, mean %.2fs, grace %s)  upgrade %t (builds %d)  versions %s\n"+
			"concurrency %d  faults %t  db restarts %d  runs %d  completed %d  lost %d  duplicate saves %d  stuck %d (cancelled %d)\n"+
			"LLM calls %d  faulted %d  re-billed %d (in flight %d: by kills %d, graceful stops %d, db restarts %d; finished %d; at most %d per stop)  wall %.1fs\n",
			rep.Stops, rep.Kills, rep.GracefulStops, rep.MaxStopSeconds, rep.MeanStopSeconds, *stopGrace, rep.Upgrade, rep.Builds, strings.Join(rep.Versions, ", "),
			rep.Concurrency, rep.Faults, rep.DBRestarts, rep.Runs, rep.Completed, rep.Lost, rep.DuplicateSaves, rep.Stuck, rep.Cancelled,
			rep.LLMCalls, rep.FaultedCalls, rep.RebilledCalls, rep.RebilledInFlight, rep.RebilledByKills, rep.RebilledByGracefulStops, rep.RebilledByDBRestarts,
			rep.RebilledFinished, rep.MaxRebilledPerKill, rep.WallSeconds)
		for _, r := range rep.StuckRuns {
			fmt.Fprintln(env.stdout, "stuck:", r)
		}
	}
	// A call can take up to 1.5 × the mean latency, or with faults until
	// the first-byte deadline; with a second more for the machine, the
	// grace lets every call in flight finish.
	longestCall := *latency * 3 / 2
	if *faults {
		longestCall = max(longestCall, *firstByte)
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
	case rep.MaxStopSeconds > (*stopGrace + termSlack).Seconds():
		return fmt.Errorf("a graceful stop took %.2fs, more than the grace %s plus %s", rep.MaxStopSeconds, *stopGrace, termSlack)
	case rep.RebilledByGracefulStops > 0 && *stopGrace >= longestCall+time.Second:
		return fmt.Errorf("graceful stops cut %d calls in flight, though every call ends within the grace %s", rep.RebilledByGracefulStops, *stopGrace)
	case len(rep.Versions) != 1:
		return fmt.Errorf("the runs were recorded under %d versions %q, want one", len(rep.Versions), rep.Versions)
	case *appVersion != "" && rep.Versions[0] != *appVersion:
		return fmt.Errorf("the runs were recorded under version %q, want the declared %q", rep.Versions[0], *appVersion)
	case *upgrade && rep.Builds != stops+1:
		return fmt.Errorf("the workers ran %d builds, want %d", rep.Builds, stops+1)
	}
	return nil
}

// buildSluice builds n variants of this command from the module at src
// (default: the module of the current folder) into dir, as sluice-0 …
// sluice-(n-1): each with its own -X main.buildStamp, every other one with
// -trimpath, so that no two are the same binary, as separate releases of
// one code are not.
func buildSluice(ctx context.Context, src, dir string, n int) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("--upgrade builds sluice with the go command: %w", err)
	}
	if src == "" {
		out, err := exec.CommandContext(ctx, goCmd, "env", "GOMOD").Output() // #nosec G204 -- the go command
		mod := strings.TrimSpace(string(out))
		if err != nil || mod == "" || mod == os.DevNull {
			return fmt.Errorf("the current folder is not in the sluice module (go env GOMOD: %q, %v): give --src", mod, err)
		}
		src = filepath.Dir(mod)
	}
	build := func(i int) error {
		args := []string{"build", "-o", filepath.Join(dir, "sluice-"+strconv.Itoa(i)), "-ldflags", "-X main.buildStamp=" + strconv.Itoa(i)}
		if i%2 == 1 {
			args = append(args, "-trimpath")
		}
		cmd := exec.CommandContext(ctx, goCmd, append(args, "./cmd/sluice")...) // #nosec G204 -- the go command, on sluice's own source
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), src, err, out)
		}
		return nil
	}
	// The first two fill the build cache for either kind of path; the
	// others then only link, a few at a time.
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for i := range n {
		if i == 2 {
			wg.Wait()
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = build(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sluiceBuilds returns the paths of the n builds in dir (sluice-0 …), after
// checking that no two are the same binary.
func sluiceBuilds(dir string, n int) ([]string, error) {
	paths := make([]string, n)
	seen := map[[sha256.Size]byte]int{}
	for i := range paths {
		paths[i] = filepath.Join(dir, "sluice-"+strconv.Itoa(i))
		b, err := os.ReadFile(paths[i])
		if err != nil {
			return nil, fmt.Errorf("build %d: %w", i, err)
		}
		sum := sha256.Sum256(b)
		if j, ok := seen[sum]; ok {
			return nil, fmt.Errorf("builds %d and %d are the same binary", j, i)
		}
		seen[sum] = i
	}
	return paths, nil
}

// defaultRestartCmd restarts the local cluster of the newest PostgreSQL
// version installed the Debian way (/etc/postgresql/VERSION/main).
func defaultRestartCmd() string {
	version := "15"
	if entries, err := os.ReadDir("/etc/postgresql"); err == nil {
		best := 0
		for _, e := range entries {
			if n, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() && n > best {
				best, version = n, e.Name()
			}
		}
	}
	return "pg_ctlcluster --skip-systemctl-redirect " + version + " main restart"
}

func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// crashWorkerProc is a running worker whose stdout the parent follows.
type crashWorkerProc struct {
	cmd   *exec.Cmd
	done  chan error
	ready chan struct{}

	mu    sync.Mutex
	out   strings.Builder
	sent  int    // documents sent in all, as the worker last said
	stamp string // the buildStamp it printed
}

func startCrashWorker(ctx context.Context, exe string, env []string) (*crashWorkerProc, error) {
	cmd := exec.CommandContext(ctx, exe, "bench", "crash") // #nosec G204 -- this binary
	cmd.Env = env
	w := &crashWorkerProc{cmd: cmd, done: make(chan error, 1), ready: make(chan struct{})}
	cmd.Stderr = w
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == crashReady {
				close(w.ready)
			}
			if stamp, ok := strings.CutPrefix(sc.Text(), crashBuild); ok {
				w.mu.Lock()
				w.stamp = stamp
				w.mu.Unlock()
			}
			if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), crashSent)); err == nil {
				w.mu.Lock()
				w.sent = max(w.sent, n)
				w.mu.Unlock()
				continue // not worth keeping in the output
			}
			_, _ = w.Write(append(sc.Bytes(), '\n'))
		}
		_, _ = io.Copy(io.Discard, stdout)
		w.done <- cmd.Wait()
	}()
	return w, nil
}

func (w *crashWorkerProc) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out.Len() < 1<<20 { // enough to show why a worker failed
		w.out.Write(p)
	}
	return len(p), nil
}

func (w *crashWorkerProc) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// sleep waits d, failing if the worker exits or ctx ends first.
func (w *crashWorkerProc) sleep(ctx context.Context, d time.Duration) error {
	return w.await(ctx, nil, d)
}

func (w *crashWorkerProc) waitReady(ctx context.Context) error {
	return w.await(ctx, w.ready, time.Minute)
}

// await waits until ready is closed, or with ready nil until d has passed;
// it fails if d passes first, or the worker exits, or ctx ends.
func (w *crashWorkerProc) await(ctx context.Context, ready <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-t.C:
		if ready == nil {
			return nil
		}
		return fmt.Errorf("not ready after %s", d)
	case err := <-w.done:
		w.done <- err
		select {
		case <-ready: // a final worker may be done as soon as it is ready
			return nil
		default:
		}
		return fmt.Errorf("exited before it was stopped: %v", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// progress waits until the simulator has answered n more calls.
func (w *crashWorkerProc) progress(ctx context.Context, calls *callLog, n int) error {
	from, deadline := calls.answered(), time.Now().Add(crashStall)
	for calls.answered() < from+n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d calls answered in %s, want %d", calls.answered()-from, crashStall, n)
		}
		if err := w.sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// sentCount returns how many documents had been sent in all when the
// worker last said.
func (w *crashWorkerProc) sentCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}

// build returns the buildStamp the worker printed.
func (w *crashWorkerProc) build() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stamp
}

// term sends the worker SIGTERM and waits for it to exit by itself, for up
// to limit (then kills it), and returns how long it took; a worker that
// exits with an error fails.
func (w *crashWorkerProc) term(ctx context.Context, limit time.Duration) (time.Duration, error) {
	began := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-w.done:
		w.done <- err
		return time.Since(began), err
	case <-t.C:
		w.kill()
		return 0, fmt.Errorf("still running %s after SIGTERM", limit)
	case <-ctx.Done():
		w.kill()
		return 0, ctx.Err()
	}
}

func (w *crashWorkerProc) kill() {
	_ = w.cmd.Process.Kill()
	err := <-w.done
	w.done <- err
}

func (w *crashWorkerProc) wait() error {
	err := <-w.done
	w.done <- err
	return err
}

// crashCall is one call the simulator charged, named by the document and
// the step it was for (both read from its prompt).
type crashCall struct {
	doc, step string
	worker    int  // the index of the worker that sent it
	ok        bool // answered without a fault: the calls Stats counts as Succeeded
	start     time.Time
}

// callLog is the simulator's log of charged calls.
type callLog struct {
	mu    sync.Mutex
	calls []crashCall
	bad   int    // calls whose prompt names no document or step
	eg    string // the first of them
	done  int    // calls answered
}

// crashSteps names the pipeline's LLM steps by their system prompt.
var crashSteps = map[string]string{
	"Summarize the article in three sentences.":     "summarize",
	"Answer with one word: the article's category.": "classify",
}

func (l *callLog) add(worker int, c sim.Call) {
	var step, doc string
	if len(c.Messages) == 2 {
		step = crashSteps[c.Messages[0]]
		doc, _, _ = strings.Cut(strings.TrimPrefix(c.Messages[1], "Article "), ". ")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.Answered {
		l.done++
	}
	if step == "" || !strings.HasPrefix(doc, "doc-") {
		if l.bad++; l.bad == 1 {
			l.eg = fmt.Sprintf("%.120q", c.Messages)
		}
		return
	}
	l.calls = append(l.calls, crashCall{doc: doc, step: step, worker: worker, ok: c.Fault == forecast.NoFault, start: c.Start})
}

func (l *callLog) answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

func (l *callLog) snapshot() *callLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &callLog{calls: slices.Clone(l.calls), bad: l.bad, eg: l.eg, done: l.done}
}

// stepGrace is how much later than a step's recorded completion a call for
// it must start to count as made after the record: the column holds
// milliseconds, so a call in the same millisecond could be the recorded one.
const stepGrace = time.Millisecond

// crashCheck fills rep from what the database holds once every worker has
// stopped, and from the simulator's log: runs and their status, documents
// saved, and each LLM step's record against the calls made for it.
func crashCheck(ctx context.Context, dbURL string, rep *crashReport, sent int, log *callLog, breaks []crashBreak) error {
	if log.bad > 0 {
		// The prompts changed in examples/summarize: crashSteps must follow.
		return fmt.Errorf("%d calls name no document and step, e.g. %s", log.bad, log.eg)
	}
	db, err := openBenchDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.close()
	prefix := summarize.FunctionID + ":key:" // run IDs, see docs/engine.md
	rep.Versions = nil
	err = db.each(ctx, `SELECT workflow_uuid, status, COALESCE(error, ''), COALESCE(application_version, '') FROM `+db.table("workflow_status")+` WHERE name = $1 ORDER BY workflow_uuid`,
		[]any{summarize.FunctionID}, func(scan func(...any) error) error {
			var id, status, msg, version string
			if err := scan(&id, &status, &msg, &version); err != nil {
				return err
			}
			rep.Runs++
			if !slices.Contains(rep.Versions, version) {
				rep.Versions = append(rep.Versions, version)
			}
			if status == string(dbos.WorkflowStatusSuccess) {
				rep.Completed++
				return nil
			}
			rep.Stuck++
			if status == string(dbos.WorkflowStatusCancelled) {
				rep.Cancelled++
			}
			if len(rep.StuckRuns) < 20 {
				rep.StuckRuns = append(rep.StuckRuns, fmt.Sprintf("%s %s %.200s", id, status, msg))
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("list runs: %w", err)
	}
	// Every document a run was started for must be saved; documents are
	// numbered from 0 in the order they were sent.
	var saved int64
	err = db.each(ctx, `SELECT COUNT(DISTINCT document_id), COALESCE(SUM(writes), 0) - COUNT(DISTINCT document_id) FROM `+summarize.Table, nil,
		func(scan func(...any) error) error {
			var dup int64
			err := scan(&saved, &dup)
			rep.DuplicateSaves = int(dup)
			return err
		})
	if err != nil {
		return fmt.Errorf("count saves: %w", err)
	}
	rep.Lost = int(max(int64(max(rep.Runs, sent))-saved, 0))

	// When each LLM step was recorded (a failed attempt records an error).
	recorded := map[stepKey]time.Time{}
	err = db.each(ctx, `SELECT workflow_uuid, function_name, completed_at_epoch_ms FROM `+db.table("operation_outputs")+
		` WHERE function_name IN ('summarize', 'classify') AND error IS NULL AND workflow_uuid LIKE $1`,
		[]any{prefix + "%"}, func(scan func(...any) error) error {
			var id, step string
			var ms sql.NullInt64
			if err := scan(&id, &step, &ms); err != nil {
				return err
			}
			if !ms.Valid {
				return fmt.Errorf("step %s of run %s has no completion time", step, id)
			}
			recorded[stepKey{strings.TrimPrefix(id, prefix), step}] = time.UnixMilli(ms.Int64)
			return nil
		})
	if err != nil {
		return fmt.Errorf("read step records: %w", err)
	}
	if want := 2 * rep.Completed; len(recorded) < want {
		return fmt.Errorf("%d LLM steps recorded, want at least %d for %d completed runs", len(recorded), want, rep.Completed)
	}
	byKey := map[stepKey][]sentCall{}
	for _, c := range log.calls {
		if c.ok {
			k := stepKey{c.doc, c.step}
			byKey[k] = append(byKey[k], sentCall{c.start, c.worker})
		}
	}
	rep.RebilledInFlight, rep.RebilledFinished, rep.perBreak = splitRebills(byKey, recorded, breaks)
	rep.MaxRebilledPerKill = 0
	for _, n := range rep.perBreak {
		rep.MaxRebilledPerKill = max(rep.MaxRebilledPerKill, n)
	}
	rep.RebilledCalls = rep.RebilledInFlight + rep.RebilledFinished
	return nil
}

// stepKey names an LLM step of one document's run.
type stepKey struct{ doc, step string }

// sentCall is when a call of a step began, and which worker sent it.
type sentCall struct {
	start  time.Time
	worker int
}

// splitRebills sorts the re-billed calls: all but one of the calls each
// step made. calls holds each step's calls; recorded, when the database
// recorded the step (absent: its run did not complete); breaks, the stops
// and restarts in order, each worker's last being its stop. A call begun
// after its step was recorded (by more than stepGrace) made the step again:
// it is finished. Of the calls begun before, the last is the one recorded;
// the others were cut before their answer was recorded: in flight, each
// charged to the first break of the worker that sent it after it began, or
// else to that worker's stop (a call written just before a kill can reach
// the simulator after it). perBreak counts those each break cut; a cut call
// of a worker that was never stopped is counted in flight only.
func splitRebills(calls map[stepKey][]sentCall, recorded map[stepKey]time.Time, breaks []crashBreak) (inFlight, finished int, perBreak []int) {
	perBreak = make([]int, len(breaks))
	for k, sent := range calls {
		sent = slices.SortedFunc(slices.Values(sent), func(a, b sentCall) int { return a.start.Compare(b.start) })
		before := len(sent) // calls begun before the step was recorded
		if rec, ok := recorded[k]; ok {
			before = slices.IndexFunc(sent, func(c sentCall) bool { return c.start.After(rec.Add(stepGrace)) })
			if before < 0 {
				before = len(sent)
			}
		}
		finished += len(sent) - before
		for _, c := range sent[:max(before-1, 0)] {
			inFlight++
			charged := -1
			for j, b := range breaks {
				if b.worker != c.worker {
					continue
				}
				charged = j
				if !b.at.Before(c.start) {
					break
				}
			}
			if charged >= 0 {
				perBreak[charged]++
			}
		}
	}
	return inFlight, finished, perBreak
}

// crashWorker is the child. In "send" mode it sends new documents, keeping
// about two runs queued per run in flight, until it is stopped; in "drain"
// mode it sends documents up to the --events minimum, then waits for every
// run to end. Sending again is a no-op (the idempotency keys deduplicate),
// so a worker numbers its documents on from the runs already in the
// database. SIGTERM ends ctx, as in sluice's main: the worker stops sending
// and returns, and the app stops gracefully, as a pause.
func crashWorker(ctx context.Context, env *cmdEnv, mode string) (err error) {
	atoi := func(name string) (int, error) {
		n, err := strconv.Atoi(env.getenv(name))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return n, nil
	}
	minEvents, err := atoi(crashEventsEnv)
	if err != nil {
		return err
	}
	concurrency, err := atoi(crashConcurrencyEnv)
	if err != nil {
		return err
	}
	retries, err := atoi(crashRetriesEnv)
	if err != nil {
		return err
	}
	firstByte, err := time.ParseDuration(env.getenv(crashFirstByteEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", crashFirstByteEnv, err)
	}
	grace, err := time.ParseDuration(env.getenv(crashStopGraceEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", crashStopGraceEnv, err)
	}
	fmt.Fprintf(env.stdout, "%s%s\n", crashBuild, buildStamp)
	dbURL := env.getenv(crashDBEnv)
	app, err := newSummarizeApp(ctx, env, summarizeOptions{
		db: dbURL, providerURL: env.getenv(crashProviderEnv), profile: "groq", limits: "",
		concurrency: concurrency, retries: retries, retryBase: 50 * time.Millisecond,
		timeouts:   llm.Timeouts{FirstByte: firstByte},
		appVersion: env.getenv(crashAppVersionEnv), stopGrace: stopGraceConfig(grace),
	})
	if err != nil {
		return err
	}
	// The stop a deploy makes: no new work, the calls in flight finish
	// within the grace, unfinished runs wait for the next worker.
	defer func() {
		if serr := app.Stop(context.Background()); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop: %w", serr))
		}
	}()
	db, err := openBenchDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer func() { db.close() }()
	// The pipeline's saves create its table if missing, but on PostgreSQL
	// the first saves of a new database would race to: create it before
	// any run starts, and so that the check can count saves when none was
	// made.
	if err := db.exec(ctx, summarize.Schema); err != nil {
		return fmt.Errorf("create %s: %w", summarize.Table, err)
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintln(env.stdout, crashReady)
	count := func(q string) (int, error) {
		var n int64
		err := db.each(ctx, q, []any{summarize.FunctionID}, func(scan func(...any) error) error { return scan(&n) })
		return int(n), err
	}
	runsQ := `SELECT COUNT(*) FROM ` + db.table("workflow_status") + ` WHERE name = $1`
	pendingQ := runsQ + fmt.Sprintf(` AND status NOT IN ('%s', '%s', '%s', '%s')`, dbos.WorkflowStatusSuccess, dbos.WorkflowStatusError,
		dbos.WorkflowStatusCancelled, dbos.WorkflowStatusMaxRecoveryAttemptsExceeded)
	// A database restart breaks the reading connection: open another. It
	// reports false once ctx has ended: a stop was asked for, and the
	// worker returns without an error.
	retry := func() bool {
		db.close()
		if d, err := openBenchDB(ctx, dbURL); err == nil {
			db = d
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
		return true
	}
	next, err := count(runsQ)
	for err != nil {
		if !retry() {
			return nil
		}
		next, err = count(runsQ)
	}
	backlog := 2 * concurrency
	last, lastChange := -1, time.Now()
	for {
		pending, err := count(pendingQ)
		if err != nil {
			if !retry() {
				return nil
			}
			continue
		}
		switch {
		case mode == "drain" && next >= minEvents && pending == 0:
			return nil
		case pending < backlog && (mode == "send" || next < minEvents):
			doc := fmt.Sprintf("doc-%06d", next)
			if _, err := app.Send(ctx, summarize.Event, "upload-"+doc, summarize.Doc{DocumentID: doc}); err != nil {
				if !retry() {
					return nil
				}
				continue
			}
			next++
			fmt.Fprintf(env.stdout, "%s%d\n", crashSent, next)
			continue
		}
		if pending != last {
			last, lastChange = pending, time.Now()
		} else if time.Since(lastChange) > crashStall {
			return nil // the parent lists the runs that are stuck
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}
