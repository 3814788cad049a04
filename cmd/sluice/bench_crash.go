package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/scenario"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
)

// The worker is this same binary, started with these variables set; the
// simulator stays in the parent so its log of calls survives the kills.
const (
	crashWorkerEnv      = "SLUICE_BENCH_CRASH_WORKER" // "send": send documents until killed; "drain": send the minimum, then finish every run
	crashDBEnv          = "SLUICE_BENCH_CRASH_DB"
	crashProviderEnv    = "SLUICE_BENCH_CRASH_PROVIDER"
	crashEventsEnv      = "SLUICE_BENCH_CRASH_EVENTS"
	crashConcurrencyEnv = "SLUICE_BENCH_CRASH_CONCURRENCY"
	crashRetriesEnv     = "SLUICE_BENCH_CRASH_RETRIES"
	crashFirstByteEnv   = "SLUICE_BENCH_CRASH_FIRST_BYTE"
)

// What a worker prints on stdout, one line each, for the parent to follow.
const (
	crashReady = "ready" // the app has started: runs are executing
	crashSent  = "sent " // followed by how many documents have been sent in all
	crashStall = 2 * time.Minute
)

// crashFaults are the provider faults of --faults: fractions of admitted calls.
var crashFaults = scenario.Faults{Error5xx: 0.10, Timeout: 0.05, Reset: 0.02, BadJSON: 0.02}

func init() {
	registerBench(&command{
		name:    "crash",
		summary: "SIGKILL a worker running the summarize pipeline N times; count lost runs, duplicate saves, re-billed calls",
		run:     runBenchCrash,
	})
}

type crashReport struct {
	Kills          int  `json:"kills"`
	Concurrency    int  `json:"concurrency"`
	Faults         bool `json:"faults"`
	DBRestarts     int  `json:"db_restarts"`
	Runs           int  `json:"runs"`
	Completed      int  `json:"completed"`
	Lost           int  `json:"lost"`
	DuplicateSaves int  `json:"duplicate_saves"`
	Stuck          int  `json:"stuck"`
	LLMCalls       int  `json:"llm_calls"`
	FaultedCalls   int  `json:"faulted_calls"`
	RebilledCalls  int  `json:"rebilled_calls"`
	// RebilledInFlight are calls whose answer no step recorded: a kill (or
	// a database restart) came while they were in flight or before the
	// worker recorded their answer. RebilledFinished are calls made again
	// after their step was recorded: a durable step must make none.
	RebilledInFlight int `json:"rebilled_in_flight"`
	RebilledFinished int `json:"rebilled_finished"`
	// MaxRebilledPerKill is the most in-flight re-bills one interruption
	// (kill or restart) caused: at most the calls in flight, Concurrency.
	MaxRebilledPerKill int     `json:"max_rebilled_per_kill"`
	WallSeconds        float64 `json:"wall_seconds"`
	// StuckRuns lists the runs that did not complete: ID, status, error.
	StuckRuns []string `json:"stuck_runs,omitempty"`
}

func runBenchCrash(ctx context.Context, env *cmdEnv, args []string) error {
	if mode := env.getenv(crashWorkerEnv); mode != "" {
		return crashWorker(ctx, env, mode)
	}
	fs := newFlagSet(env, "bench crash", "[flags]",
		"Runs examples/summarize against the provider simulator in a worker process that keeps\n"+
			"sending new documents, SIGKILLs the worker exactly --kills times at random points and\n"+
			"restarts it, then lets the last worker finish every run. Counts come from the simulator's\n"+
			"log of calls, the database's step records and the save target: lost runs, duplicate saves,\n"+
			"stuck runs and calls re-billed after their step was recorded must be 0; calls re-billed\n"+
			"because a kill cut them are bounded by the calls in flight (--concurrency) per kill.\n"+
			"See docs/reliability.md.")
	kills := fs.Int("kills", 10, "how many times to SIGKILL the worker")
	events := fs.Int("events", 0, "send at least this many documents (one run each); the workers send more as long as kills remain")
	concurrency := fs.Int("concurrency", summarize.DefaultConcurrency, "runs in flight in the worker (the pipeline's concurrency)")
	dbURL := fs.String("db", "", "database: postgres://… URL, or an SQLite path (default: a new SQLite file in a temporary folder)")
	latency := fs.Duration("latency", 20*time.Millisecond, "mean response time of the simulated provider")
	faults := fs.Bool("faults", false, fmt.Sprintf("the simulator fails calls: 5xx %.0f %%, timeouts %.0f %%, resets %.0f %%, bad JSON %.0f %%",
		100*crashFaults.Error5xx, 100*crashFaults.Timeout, 100*crashFaults.Reset, 100*crashFaults.BadJSON))
	retries := fs.Int("retries", 0, "retries of a failing step (default: the pipeline's 5, or 20 with --faults)")
	firstByte := fs.Duration("first-byte", 2*time.Second, "how long the worker's LLM client waits for an answer to begin: it ends the simulator's timeouts")
	dbRestart := fs.Bool("db-restart", false, "restart the database once in the life of every killed worker (postgres:// --db only)")
	restartCmd := fs.String("db-restart-cmd", defaultRestartCmd(), "shell command that restarts the database and returns once it accepts connections")
	seed := fs.Uint64("seed", 1, "seed of the kill times and the simulator")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	switch {
	case *kills < 0 || *kills > 10_000:
		return errors.New("--kills must be between 0 and 10000")
	case *events < 0 || *events > 1_000_000:
		return errors.New("--events must be between 0 and 1000000")
	case *kills == 0 && *events == 0:
		return errors.New("with --kills 0, --events must be at least 1")
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
	simCfg := sim.Config{Profile: "groq", Latency: *latency, Seed: int64(*seed), Wire: true}
	if *faults {
		simCfg.Faults = crashFaults
	}
	model, err := sim.NewModel(simCfg)
	if err != nil {
		return err
	}
	var calls callLog
	// A hung call must end by the client's deadline, never the simulator's.
	provider := sim.NewServer(model, sim.ServerConfig{HangTimeout: time.Hour, OnFinish: calls.add})
	if err := provider.Start(ctx); err != nil {
		return err
	}
	defer provider.Stop(context.Background())

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	workerEnv := append(os.Environ(),
		crashDBEnv+"="+db,
		crashProviderEnv+"=http://"+provider.Addr()+"/v1",
		crashEventsEnv+"="+strconv.Itoa(*events),
		crashConcurrencyEnv+"="+strconv.Itoa(*concurrency),
		crashRetriesEnv+"="+strconv.Itoa(*retries),
		crashFirstByteEnv+"="+firstByte.String())
	rng := rand.New(rand.NewPCG(*seed, 7)) // #nosec G404 -- kill times need no secrecy
	rep := crashReport{Concurrency: *concurrency, Faults: *faults}
	var breaks []time.Time // when each kill and restart came
	sent := 0              // documents the workers said they had sent
	for rep.Kills < *kills {
		w, err := startCrashWorker(ctx, exe, append(workerEnv, crashWorkerEnv+"=send"))
		if err != nil {
			return err
		}
		fail := func(err error) error {
			w.kill()
			return fmt.Errorf("worker %d: %w\n%s", rep.Kills+1, err, w.output())
		}
		if err := w.waitReady(ctx); err != nil {
			return fail(err)
		}
		if *dbRestart {
			if err := w.sleep(ctx, time.Duration(rng.Int64N(int64(300*time.Millisecond)))); err != nil {
				return fail(err)
			}
			breaks = append(breaks, time.Now())
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
		// new documents until it is killed.
		if err := w.sleep(ctx, 100*time.Millisecond+time.Duration(rng.Int64N(int64(600*time.Millisecond)))); err != nil {
			return fail(err)
		}
		w.kill() // SIGKILL: no shutdown, no flush
		// After the worker is gone: a call it sent just before the kill may
		// reach the simulator a moment later, and is still this kill's.
		breaks = append(breaks, time.Now())
		rep.Kills++
		sent = max(sent, w.sentCount())
	}
	// The last worker sends what --events still asks, finishes every run
	// and exits.
	w, err := startCrashWorker(ctx, exe, append(workerEnv, crashWorkerEnv+"=drain"))
	if err != nil {
		return err
	}
	if err := w.wait(); err != nil {
		return fmt.Errorf("final worker: %v\n%s", err, w.output())
	}
	sent = max(sent, w.sentCount())
	if err := crashCheck(ctx, db, &rep, sent, calls.snapshot(), breaks); err != nil {
		return err
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
		fmt.Fprintf(env.stdout, "kills %d  concurrency %d  faults %t  db restarts %d  runs %d  completed %d  lost %d  duplicate saves %d  stuck %d\n"+
			"LLM calls %d  faulted %d  re-billed %d (in flight %d, finished %d; at most %d per kill)  wall %.1fs\n",
			rep.Kills, rep.Concurrency, rep.Faults, rep.DBRestarts, rep.Runs, rep.Completed, rep.Lost, rep.DuplicateSaves, rep.Stuck,
			rep.LLMCalls, rep.FaultedCalls, rep.RebilledCalls, rep.RebilledInFlight, rep.RebilledFinished, rep.MaxRebilledPerKill, rep.WallSeconds)
		for _, r := range rep.StuckRuns {
			fmt.Fprintln(env.stdout, "stuck:", r)
		}
	}
	switch {
	case rep.Stuck > 0:
		return fmt.Errorf("%d runs did not complete", rep.Stuck)
	case rep.Lost > 0 || rep.DuplicateSaves > 0 || rep.RebilledFinished > 0:
		return fmt.Errorf("%d runs lost, %d duplicate saves, %d calls re-billed after their step was recorded", rep.Lost, rep.DuplicateSaves, rep.RebilledFinished)
	case rep.RebilledCalls != rep.LLMCalls-2*rep.Completed:
		return fmt.Errorf("the simulator answered %d calls, but its log holds %d beyond the two of each of %d runs", rep.LLMCalls, rep.RebilledCalls, rep.Completed)
	}
	return nil
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

	mu   sync.Mutex
	out  strings.Builder
	sent int // documents sent in all, as the worker last said
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
		return fmt.Errorf("exited before it was killed: %v", err)
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

func (l *callLog) add(c sim.Call) {
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
	l.calls = append(l.calls, crashCall{doc: doc, step: step, ok: c.Fault == sim.NoFault, start: c.Start})
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
func crashCheck(ctx context.Context, dbURL string, rep *crashReport, sent int, log *callLog, breaks []time.Time) error {
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
	err = db.each(ctx, `SELECT workflow_uuid, status, COALESCE(error, '') FROM `+db.table("workflow_status")+` WHERE name = $1 ORDER BY workflow_uuid`,
		[]any{summarize.FunctionID}, func(scan func(...any) error) error {
			var id, status, msg string
			if err := scan(&id, &status, &msg); err != nil {
				return err
			}
			rep.Runs++
			if status == string(dbos.WorkflowStatusSuccess) {
				rep.Completed++
				return nil
			}
			rep.Stuck++
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
	byKey := map[stepKey][]time.Time{}
	for _, c := range log.calls {
		if c.ok {
			k := stepKey{c.doc, c.step}
			byKey[k] = append(byKey[k], c.start)
		}
	}
	rep.RebilledInFlight, rep.RebilledFinished, rep.MaxRebilledPerKill = splitRebills(byKey, recorded, breaks)
	rep.RebilledCalls = rep.RebilledInFlight + rep.RebilledFinished
	return nil
}

// stepKey names an LLM step of one document's run.
type stepKey struct{ doc, step string }

// splitRebills sorts the re-billed calls: all but one of the calls each
// step made. calls holds the start times of each step's calls; recorded,
// when the database recorded the step (absent: its run did not complete);
// breaks, the times of the kills and restarts, in order. A call begun after
// its step was recorded (by more than stepGrace) made the step again: it is
// finished. Of the calls begun before, the last is the one recorded; the
// others were cut before their answer was recorded: in flight, each charged
// to the first break after it began. maxPerBreak is the most one break cut.
func splitRebills(calls map[stepKey][]time.Time, recorded map[stepKey]time.Time, breaks []time.Time) (inFlight, finished, maxPerBreak int) {
	perBreak := make([]int, len(breaks)+1) // the last counts cuts after every break: none expected
	for k, starts := range calls {
		starts = slices.SortedFunc(slices.Values(starts), time.Time.Compare)
		before := len(starts) // calls begun before the step was recorded
		if rec, ok := recorded[k]; ok {
			before, _ = slices.BinarySearchFunc(starts, rec.Add(stepGrace), func(s, t time.Time) int {
				if s.After(t) {
					return 1
				}
				return -1
			})
		}
		finished += len(starts) - before
		for _, s := range starts[:max(before-1, 0)] {
			inFlight++
			j, _ := slices.BinarySearchFunc(breaks, s, time.Time.Compare)
			perBreak[j]++
		}
	}
	for _, n := range perBreak[:len(breaks)] {
		maxPerBreak = max(maxPerBreak, n)
	}
	return inFlight, finished, maxPerBreak
}

// crashWorker is the child. In "send" mode it sends new documents, keeping
// about two runs queued per run in flight, until it is killed; in "drain"
// mode it sends documents up to the --events minimum, then waits for every
// run to end. Sending again is a no-op (the idempotency keys deduplicate),
// so a worker numbers its documents on from the runs already in the
// database.
func crashWorker(ctx context.Context, env *cmdEnv, mode string) error {
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
	dbURL := env.getenv(crashDBEnv)
	app, err := newSummarizeApp(ctx, env, summarizeOptions{
		db: dbURL, providerURL: env.getenv(crashProviderEnv), profile: "groq", limits: "",
		concurrency: concurrency, retries: retries, retryBase: 50 * time.Millisecond,
		timeouts: llm.Timeouts{FirstByte: firstByte},
	})
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())
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
	// A database restart breaks the reading connection: open another.
	retry := func() error {
		db.close()
		if d, err := openBenchDB(ctx, dbURL); err == nil {
			db = d
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		return nil
	}
	next, err := count(runsQ)
	for err != nil {
		if err = retry(); err != nil {
			return err
		}
		next, err = count(runsQ)
	}
	backlog := 2 * concurrency
	last, lastChange := -1, time.Now()
	for {
		pending, err := count(pendingQ)
		if err != nil {
			if err := retry(); err != nil {
				return err
			}
			continue
		}
		switch {
		case mode == "drain" && next >= minEvents && pending == 0:
			return nil
		case pending < backlog && (mode == "send" || next < minEvents):
			doc := fmt.Sprintf("doc-%06d", next)
			if _, err := app.Send(ctx, summarize.Event, "upload-"+doc, summarize.Doc{DocumentID: doc}); err != nil {
				if err := retry(); err != nil {
					return err
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
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
