package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/dbos-inc/dbos-transact-golang/dbos/internals"

	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/store"
)

// Config configures an Engine. Store is required; every other field's zero
// value is its default.
type Config struct {
	// Store is the opened store the engine runs on: DBOS keeps its tables
	// in the store's database through the store's own handle
	// (store.Store.Handle), and the engine keeps its rate-limit counts,
	// dropped events and run ends in the store.
	//
	// The caller opened the store and closes it, after Shutdown (or when
	// New fails). DBOS closes the handle when the engine shuts down, so the
	// store is not usable after Shutdown (BeforeClose functions are its last
	// users) and its Close then only marks it closed.
	Store store.Store
	// AppName names the application in DBOS's tables (default "sluice").
	AppName string
	// AppVersion is the version runs are recorded under. A process resumes
	// and dequeues only the runs of its own version: runs of another one
	// are listed as such (run.OtherVersion) until a person resumes them
	// here (ResumeVersion) or cancels them. Default: DefaultVersion of the
	// app name and the registered functions, which does not change with how
	// the binary was built (docs/operations.md).
	AppVersion string
	// ExecutorID names this process among several on one database (default
	// "local"). A restarted process with the same ID resumes its runs; while
	// an engine with an ID runs, Launch refuses a second one with the same
	// ID on the same database (see Launch).
	ExecutorID string
	// PollInterval is how often each function's queue is polled for runs to
	// start (default 100ms).
	PollInterval time.Duration
	// RetryBase and RetryMax bound the exponential backoff between attempts
	// of a step that failed transiently (defaults 1s and 10m). Jitter of ±25%
	// keeps retries of many runs apart.
	RetryBase, RetryMax time.Duration
	// Logger receives DBOS's and the engine's logs (default: warnings and
	// errors to stderr).
	Logger *slog.Logger
	// Now is the engine's clock: rate-limit windows, and what the
	// backfills and the health monitor built on the engine read (default
	// time.Now).
	Now func() time.Time
	// Speed is how many times as fast as the wall clock Now runs, for
	// rehearsals in compressed time against a simulator on the same clock:
	// durable sleeps (Sleep, the waits between a step's attempts, for
	// quota or backoff) last their duration divided by Speed. Default 1.
	Speed float64
	// Metrics, if set, counts the runs and step attempts this process
	// executes (docs/metrics.md). Default: none.
	Metrics *metrics.Set
	// StopGrace is how long Shutdown lets the steps in flight finish (an
	// LLM call answered, a transaction committed) after it stopped taking
	// work; a step still running then is cut and runs again when its run
	// resumes. Default 30s; negative: none, steps are cut at once.
	StopGrace time.Duration
	// LockCheckEvery is how often the engine checks that it still holds
	// its executor lock (default 2s; see Launch): on PostgreSQL the
	// connection that holds it can drop, an SQLite file lock cannot.
	LockCheckEvery time.Duration
	// AdoptEvery, when above 0, is how often (of Now's clock) the engine
	// looks for runs left unfinished by other executors that no longer run
	// (no live engine holds their executor lock) and hands them back to
	// their queues, to be resumed by any live process from their last
	// recorded step: for processes of a cluster that may die for good.
	// Default 0: a run resumes only when its executor starts again.
	AdoptEvery time.Duration
}

// The defaults of Config's fields.
const (
	DefaultPollInterval = 100 * time.Millisecond
	DefaultRetryBase    = time.Second
	DefaultRetryMax     = 10 * time.Minute
	DefaultStopGrace    = 30 * time.Second
	// DefaultMaxInlineWait is Provider.MaxInlineWait's default.
	DefaultMaxInlineWait = 30 * time.Second
	// MaxQuotaSleep bounds a step's durable sleep for quota. The sleep is
	// the governor's estimate, a forecast of the calls in line: a flow
	// that ends, a priority hold that lifts or a limit raised at a restart
	// frees the key sooner, and nothing wakes a durable sleep. So a step
	// asks again at least this often, and a key that frees is used within
	// it: up to thirty more attempts an hour in a waiting run's record,
	// against a key left idle for as long as an estimate is wrong.
	MaxQuotaSleep = 2 * time.Minute
)

func (c Config) withDefaults() Config {
	c.AppName = cmp.Or(c.AppName, "sluice")
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.RetryBase = cmp.Or(c.RetryBase, DefaultRetryBase)
	c.RetryMax = cmp.Or(c.RetryMax, DefaultRetryMax)
	c.StopGrace = cmp.Or(c.StopGrace, DefaultStopGrace)
	c.LockCheckEvery = cmp.Or(c.LockCheckEvery, 2*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Engine runs registered functions on DBOS. Register functions, then Launch;
// Shutdown stops it. Safe for concurrent use after Launch.
type Engine struct {
	cfg Config
	st  store.Store
	h   store.Handle // st's, shared with DBOS

	// maxReasonCandidates is how many runs a search by reason reads from
	// the index of reasons at most on SQLite (reasonCandidates); 0 means
	// defaultMaxReasonCandidates. Tests lower it to reach the other way.
	maxReasonCandidates int

	// The DBOS context and the transaction data source exist from Launch
	// on: the version runs are recorded under is known only once every
	// function is registered (DefaultVersion), and DBOS takes it when the
	// context is made. Read them through dbosContext before Launch returned.
	dctx dbos.Context
	ds   *dbos.DataSource

	// Runs executing now, and what to do once none is while stopping: DBOS
	// closes the database right after the last run returns.
	activeMu    sync.Mutex
	active      int
	stopping    bool
	stopped     bool // DBOS has shut down: no run starts any more
	beforeClose []func(context.Context) error
	unlock      func() // releases the executor lock taken by Launch

	// The drain of a graceful stop (see Shutdown): steps executing now,
	// and drain, closed when the engine stops taking work; idle is closed
	// once draining and no step executes.
	stepsMu    sync.Mutex
	steps      int
	drain      chan struct{}
	draining   bool
	idle       chan struct{}
	idleClosed bool // idle was closed

	sys    internals.SystemDatabase // DBOS's system database, for run owners
	owners ownerReads               // the owners of runs as they begin, read from sys

	lock *lockWatch // the executor lock, from Launch on

	classify Classifier // for errors the engine does not know; default ClassifyLLM

	// partEnded is closed, and replaced, whenever a part this process
	// runs returns: a run waiting for its parts looks again then.
	partsMu   sync.Mutex
	partEnded chan struct{}

	mu       sync.RWMutex
	fns      map[string]*Function
	byEvent  map[string][]*Function
	launched bool
	stopOnce sync.Once

	stopAdopt func()         // ends the adoption loop and the sweep of missed ends
	adopting  sync.WaitGroup // the adoption loop and the sweep of missed ends
}

// New checks the configuration and takes the store's handle. Functions are
// registered before Launch, which starts DBOS on the handle.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil {
		return nil, errors.New("engine config: no store")
	}
	if cfg.PollInterval < 0 || cfg.RetryBase < 0 || cfg.RetryMax < cfg.RetryBase {
		return nil, fmt.Errorf("engine config: poll interval and retry bounds must be positive and RetryMax ≥ RetryBase")
	}
	if cfg.Speed < 0 || math.IsNaN(cfg.Speed) || math.IsInf(cfg.Speed, 0) {
		return nil, fmt.Errorf("engine config: speed must be a finite number ≥ 0, got %v", cfg.Speed)
	}
	if cfg.LockCheckEvery < 0 {
		return nil, fmt.Errorf("engine config: lock check interval %s is negative", cfg.LockCheckEvery)
	}
	if cfg.AppVersion != "" {
		if err := CheckVersion(cfg.AppVersion); err != nil {
			return nil, fmt.Errorf("engine config: %w", err)
		}
	}
	st := cfg.Store
	h, err := st.Handle()
	if err != nil {
		return nil, err
	}
	_ = ctx // DBOS starts at Launch
	e := &Engine{
		cfg:     cfg,
		st:      st,
		h:       h,
		fns:     map[string]*Function{},
		byEvent: map[string][]*Function{},
		drain:   make(chan struct{}),
		idle:    make(chan struct{}),

		classify: ClassifyLLM,
	}
	e.owners.read = e.readOwners
	return e, nil
}

// Logger is the logger the engine writes to (Config.Logger).
func (e *Engine) Logger() *slog.Logger { return e.cfg.Logger }

// Now reads the engine's clock (Config.Now).
func (e *Engine) Now() time.Time { return e.cfg.Now() }

// Real converts d on the engine's clock into wall time: d divided by
// Config.Speed.
func (e *Engine) Real(d time.Duration) time.Duration { return clock.Real(e.cfg.Speed, d) }

// SetClassifier installs the classifier for errors the engine does not know
// (the LLM layer's). Call before Launch.
func (e *Engine) SetClassifier(c Classifier) { e.classify = c }

// errNotLaunched is returned by the calls that need DBOS before Launch.
var errNotLaunched = errors.New("the engine is not launched")

// dbosContext returns the DBOS context once Launch has made it.
func (e *Engine) dbosContext() (dbos.Context, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.dctx == nil {
		return nil, errNotLaunched
	}
	return e.dctx, nil
}

// Launch starts DBOS on the store's database under the app's version,
// registers the functions' queues and schedules, and resumes the runs of
// this executor and version that a previous process left unfinished.
//
// Launch first takes the executor's lock, held until Shutdown has stopped
// every run, and fails with ErrExecutorRunning while another engine (in this
// process or another) holds it. DBOS resumes at launch every unfinished run
// of its executor ID without asking whether the executor that started it
// still runs it: a second engine with a live one's ID would hand the live
// one's runs in flight to a second execution, and their steps would run
// twice at once. On PostgreSQL the lock is held by a connection of its
// own, checked every Config.LockCheckEvery: when it drops, the engine stops
// taking work, says so in its log and in Ready, and takes the lock again
// as soon as it can.
func (e *Engine) Launch(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.launched {
		return errors.New("engine already launched")
	}
	// A stop that came first, before there was anything to stop, is not
	// followed by a start that nothing would stop.
	e.stepsMu.Lock()
	stopping := e.draining
	e.stepsMu.Unlock()
	if stopping {
		return errors.New("engine not launched: it is stopping")
	}
	version := e.cfg.AppVersion
	if version == "" {
		version = DefaultVersion(e.cfg.AppName, e.shape())
	}
	dctx, err := newDBOSContext(ctx, e.st, dbos.Config{
		AppName:            e.cfg.AppName,
		ApplicationVersion: version,
		ExecutorID:         e.cfg.ExecutorID,
		Logger:             e.cfg.Logger,
		SQLiteSystemDB:     e.h.SQLite,
		SystemDBPool:       e.h.Postgres,
	})
	if err != nil {
		return fmt.Errorf("start DBOS on %s: %w", e.st, err)
	}
	launched := false
	defer func() {
		if !launched {
			_ = dbos.Shutdown(dctx, time.Second)
		}
	}()
	var ds *dbos.DataSource
	if e.h.SQLite != nil {
		ds, err = dbos.NewDataSource(dctx, e.h.SQLite, dbos.WithDataSourceName("sluice"))
	} else {
		ds, err = dbos.NewDataSource(dctx, e.h.Postgres, dbos.WithDataSourceName("sluice"))
	}
	if err != nil {
		return fmt.Errorf("open transaction data source: %w", err)
	}
	lw, err := e.lockExecutor(ctx, dctx.GetExecutorID(), lockTries)
	if err != nil {
		return err
	}
	defer func() {
		if !launched {
			lw.release()
		}
	}()
	dbos.RegisterWorkflow(dctx, e.cronTick, dbos.WithWorkflowName(cronWorkflow))
	var schedules []dbos.ScheduleSpec
	for _, fn := range e.fns {
		dbos.RegisterWorkflow(dctx, fn.workflow, dbos.WithInstance(fn), dbos.WithWorkflowName(fn.ID))
		for _, p := range fn.parts {
			dbos.RegisterWorkflow(dctx, p.workflow, dbos.WithInstance(p), dbos.WithWorkflowName(p.ConfigName()))
		}
		q, err := dbos.RegisterQueue(dctx, fn.queueName(), fn.queueOptions(e.cfg.PollInterval)...)
		if err != nil {
			return fmt.Errorf("register queue of function %s: %w", fn.ID, err)
		}
		fn.queue = q
		if fn.Cron != "" {
			schedules = append(schedules, dbos.ScheduleSpec{
				ScheduleName: "sluice:" + fn.ID,
				Schedule:     dbosCron(fn.Cron),
				WorkflowName: cronWorkflow,
				Context:      fn.ID,
			})
		}
	}
	if len(schedules) > 0 {
		if err := dbos.ApplySchedules(dctx, schedules); err != nil {
			return fmt.Errorf("apply cron schedules: %w", err)
		}
	}
	rt, err := internals.RuntimeOf(dctx)
	if err != nil {
		return err
	}
	// Set before DBOS launches: Launch resumes this executor's unfinished
	// runs at once, and their steps read the data source and the system
	// database as they begin.
	e.dctx, e.ds, e.sys = dctx, ds, rt.SystemDB()
	if err := dbos.Launch(dctx); err != nil {
		e.dctx, e.ds, e.sys = nil, nil, nil
		return fmt.Errorf("launch DBOS: %w", err)
	}
	e.activeMu.Lock()
	e.unlock = lw.release
	e.activeMu.Unlock()
	e.launched, launched = true, true
	e.lock = lw
	lw.watch(e)
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.stopAdopt = cancel
	e.adopting.Go(func() { e.sweepMissedEnds(actx) })
	if e.cfg.AdoptEvery > 0 {
		e.adopting.Go(func() { e.adopt(actx) })
	}
	return nil
}

// Store is the store the engine runs on (Config.Store). It is usable until
// Shutdown returns.
func (e *Engine) Store() store.Store { return e.st }

// BeforeClose adds fn to what Shutdown runs once no run executes any more,
// before the database closes: the place to flush what runs left in memory.
// fn may run more than once (a run may start while the engine stops); it must
// not block for long. Call before Launch.
func (e *Engine) BeforeClose(fn func(context.Context) error) {
	e.activeMu.Lock()
	defer e.activeMu.Unlock()
	e.beforeClose = append(e.beforeClose, fn)
}

// enter and leave bracket every run's handler.
func (e *Engine) enter() {
	e.activeMu.Lock()
	e.active++
	e.activeMu.Unlock()
}

func (e *Engine) leave() {
	e.activeMu.Lock()
	e.active--
	idle := e.stopping && e.active == 0
	unlock := e.takeUnlock()
	e.activeMu.Unlock()
	if idle {
		e.runBeforeClose()
	}
	unlock()
}

// takeUnlock returns what releases the executor lock once it may go — DBOS
// has stopped and no run executes — and a no-op before that or after it was
// taken. The caller holds activeMu.
func (e *Engine) takeUnlock() func() {
	if !e.stopped || e.active > 0 || e.unlock == nil {
		return func() {}
	}
	u := e.unlock
	e.unlock = nil
	return u
}

// runBeforeClose runs the BeforeClose functions. DBOS waits for every run
// to return before it closes the database, so when the last run calls this
// on its way out, the database is still open.
func (e *Engine) runBeforeClose() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.activeMu.Lock()
	fns := e.beforeClose
	e.activeMu.Unlock()
	for _, fn := range fns {
		if err := fn(ctx); err != nil {
			e.cfg.Logger.Error("sluice: before closing the database", "err", err)
		}
	}
}

// Shutdown stops the engine as a pause, never as a cancel: it stops taking
// work (no queued run starts, no step begins, a call waiting for quota
// gives up its place), lets the steps in flight finish for up to
// Config.StopGrace (at most timeout less 2s), then stops DBOS. Every
// unfinished run stays pending, to be resumed by the next Launch of this
// executor or, in a cluster, adopted by a live one; a step cut at the end
// of the grace runs again then (for an LLM step: that call is billed
// twice). Then it runs the BeforeClose functions once no run executes, and
// DBOS closes the store's handle. DBOS's own stop gets what remains of
// timeout, at least 2s: with runs that return when their context ends, a
// stop returns within the grace plus 2s. The executor lock is released
// once no run executes. Safe to call twice.
func (e *Engine) Shutdown(timeout time.Duration) error {
	var err error
	e.stopOnce.Do(func() {
		// No step begins from now on: a stop asked for while Launch still
		// holds mu, resuming the runs a crash left, must not let those
		// runs begin steps (and send calls) until Launch returns.
		e.drainSteps()
		e.mu.RLock()
		stopAdopt, dctx, lw := e.stopAdopt, e.dctx, e.lock
		e.mu.RUnlock()
		if stopAdopt != nil {
			stopAdopt()
			e.adopting.Wait()
		}
		began := time.Now()
		if dctx != nil {
			// No queue is listened to any more: a run DBOS was starting at
			// that moment starts, and waits at its first step.
			dbos.ListenQueues(dctx, pausedQueue)
			grace := min(e.cfg.StopGrace, timeout-shutdownReserve)
			if grace > 0 {
				t := time.NewTimer(grace)
				select {
				case <-e.idle:
				case <-t.C:
					e.stepsMu.Lock()
					n := e.steps
					e.stepsMu.Unlock()
					e.cfg.Logger.Warn("sluice: steps still running at the end of the stop's grace are cut; they run again when their runs resume",
						"steps", n, "grace", grace)
				}
				t.Stop()
			}
		}
		if lw != nil {
			lw.stopWatching()
		}
		e.activeMu.Lock()
		e.stopping = true
		idle := e.active == 0
		e.activeMu.Unlock()
		if idle {
			e.runBeforeClose()
		}
		// DBOS closes the shared handle: nothing may use the store after
		// it. The caller, who opened the store, closes it. Runs still
		// executing see their context end with DBOS's shutdown as its
		// cause, which leaves them pending.
		err = dbos.Shutdown(dctx, max(timeout-time.Since(began), shutdownReserve))
		e.activeMu.Lock()
		e.stopped = true
		unlock := e.takeUnlock()
		e.activeMu.Unlock()
		unlock()
	})
	return err
}

// drainSteps makes every step that has not begun wait for the stop
// instead (stepBegin), and idle close once none executes.
func (e *Engine) drainSteps() {
	e.stepsMu.Lock()
	defer e.stepsMu.Unlock()
	if e.draining {
		return
	}
	e.draining = true
	close(e.drain)
	e.checkIdle()
}

// checkIdle closes idle once draining and no step executes. The caller
// holds stepsMu.
func (e *Engine) checkIdle() {
	if e.draining && e.steps == 0 && !e.idleClosed {
		e.idleClosed = true
		close(e.idle)
	}
}

// shutdownReserve is what Shutdown keeps of its timeout for DBOS's own
// stop after the grace.
const shutdownReserve = 2 * time.Second

// pausedQueue names no queue: listening to it alone listens to none of
// the functions' queues.
const pausedQueue = "sluice:(paused)"

// stepBegin counts a step that begins executing, and is false once the
// engine drains: that step must not begin. The token's done uncounts it.
func (e *Engine) stepBegin() (*stepToken, bool) {
	e.stepsMu.Lock()
	defer e.stepsMu.Unlock()
	if e.draining {
		return nil, false
	}
	e.steps++
	return &stepToken{e: e}, true
}

// stepToken is a step counted by stepBegin.
type stepToken struct {
	e    *Engine
	once sync.Once
}

// done uncounts the step. Safe to call twice.
func (t *stepToken) done() { t.once.Do(t.e.stepEnd) }

// stepEnd counts a step that stopped executing.
func (e *Engine) stepEnd() {
	e.stepsMu.Lock()
	defer e.stepsMu.Unlock()
	e.steps--
	e.checkIdle()
}

// Draining is closed when the engine stops taking work (Shutdown): a step
// waiting for something that may take long, such as quota, gives up then.
func (e *Engine) Draining() <-chan struct{} { return e.drain }

// ErrExecutorRunning is returned by Launch while another engine with the same
// executor ID runs on the same database.
var ErrExecutorRunning = errors.New("an engine with this executor ID already runs on this database")

// lockTries bounds how long Launch waits for an executor lock held by a
// session that is ending (see store.Store.LockExecutor).
const lockTries = 20

// newDBOSContext makes the DBOS context, which migrates DBOS's system
// tables, under the store's lock of DBOS's migrations: one process at a
// time on a database (see store.Store.LockDBOSMigrations). The context
// DBOS gets never ends with ctx: DBOS derives every run's context from it,
// and a run whose context ends other than by DBOS's own Shutdown is
// cancelled for good — a caller's context ended by SIGTERM would cancel
// every run in flight instead of pausing it.
func newDBOSContext(ctx context.Context, st store.Store, cfg dbos.Config) (dbos.Context, error) {
	var dctx dbos.Context
	err := st.LockDBOSMigrations(ctx, func() error {
		var err error
		dctx, err = dbos.NewContext(context.WithoutCancel(ctx), cfg)
		if err != nil {
			return err
		}
		return indexRuns(ctx, cfg)
	})
	return dctx, err
}

// backoff is the wait before attempt n+1 after n transient failures.
func (e *Engine) backoff(n int) time.Duration {
	d := e.cfg.RetryBase
	for i := 1; i < n && d < e.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, e.cfg.RetryMax)
	jitter := 0.75 + rand.Float64()*0.5 // #nosec G404 -- spreading retries needs no secrecy
	return time.Duration(float64(d) * jitter)
}
