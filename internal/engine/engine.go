package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

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
	// AppVersion pins the DBOS application version. DBOS recovers only runs
	// of the version that started them; the default derives it from the
	// binary, so a rebuilt binary does not resume an old binary's runs.
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
	// AdoptEvery, when above 0, is how often (of Now's clock) the engine
	// looks for runs left unfinished by other executors that no longer run
	// (no live engine holds their executor lock) and hands them back to
	// their queues, to be resumed by any live process from their last
	// recorded step: for processes of a cluster that may die for good.
	// Default 0: a run resumes only when its executor starts again.
	AdoptEvery time.Duration
}

func (c Config) withDefaults() Config {
	c.AppName = cmp.Or(c.AppName, "sluice")
	c.PollInterval = cmp.Or(c.PollInterval, 100*time.Millisecond)
	c.RetryBase = cmp.Or(c.RetryBase, time.Second)
	c.RetryMax = cmp.Or(c.RetryMax, 10*time.Minute)
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
	cfg  Config
	st   store.Store
	h    store.Handle // st's, shared with DBOS
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

	classify Classifier // for errors the engine does not know; default ClassifyLLM

	mu       sync.RWMutex
	fns      map[string]*Function
	byEvent  map[string][]*Function
	launched bool
	stopOnce sync.Once

	stopAdopt func()         // ends the adoption loop
	adopting  sync.WaitGroup // the adoption loop
}

// New creates a DBOS context on the store's handle. Functions are
// registered before Launch.
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
	st := cfg.Store
	h, err := st.Handle()
	if err != nil {
		return nil, err
	}
	dcfg := dbos.Config{
		AppName:            cfg.AppName,
		ApplicationVersion: cfg.AppVersion,
		ExecutorID:         cfg.ExecutorID,
		Logger:             cfg.Logger,
		SQLiteSystemDB:     h.SQLite,
		SystemDBPool:       h.Postgres,
	}
	dctx, err := newDBOSContext(ctx, h, dcfg)
	if err != nil {
		return nil, fmt.Errorf("start DBOS on %s: %w", st, err)
	}
	var ds *dbos.DataSource
	if h.SQLite != nil {
		ds, err = dbos.NewDataSource(dctx, h.SQLite, dbos.WithDataSourceName("sluice"))
	} else {
		ds, err = dbos.NewDataSource(dctx, h.Postgres, dbos.WithDataSourceName("sluice"))
	}
	if err != nil {
		_ = dbos.Shutdown(dctx, time.Second)
		return nil, fmt.Errorf("open transaction data source: %w", err)
	}
	e := &Engine{
		cfg:     cfg,
		st:      st,
		h:       h,
		dctx:    dctx,
		ds:      ds,
		fns:     map[string]*Function{},
		byEvent: map[string][]*Function{},

		classify: ClassifyLLM,
	}
	dbos.RegisterWorkflow(dctx, e.cronTick, dbos.WithWorkflowName(cronWorkflow))
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

// Launch registers the functions' queues and schedules and starts DBOS, which
// resumes runs a previous process left unfinished.
//
// Launch first takes the executor's lock, held until Shutdown has stopped
// every run, and fails with ErrExecutorRunning while another engine (in this
// process or another) holds it. DBOS resumes at launch every unfinished run
// of its executor ID without asking whether the executor that started it
// still runs it: a second engine with a live one's ID would hand the live
// one's runs in flight to a second execution, and their steps would run
// twice at once.
func (e *Engine) Launch(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.launched {
		return errors.New("engine already launched")
	}
	unlock, err := lockExecutor(ctx, e.h, e.st.String(), e.cfg.AppName, e.dctx.GetExecutorID(), lockTries)
	if err != nil {
		return err
	}
	launched := false
	defer func() {
		if !launched {
			unlock()
		}
	}()
	var schedules []dbos.ScheduleSpec
	for _, fn := range e.fns {
		q, err := dbos.RegisterQueue(e.dctx, fn.queueName(), fn.queueOptions(e.cfg.PollInterval)...)
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
		if err := dbos.ApplySchedules(e.dctx, schedules); err != nil {
			return fmt.Errorf("apply cron schedules: %w", err)
		}
	}
	if err := dbos.Launch(e.dctx); err != nil {
		return fmt.Errorf("launch DBOS: %w", err)
	}
	e.activeMu.Lock()
	e.unlock = unlock
	e.activeMu.Unlock()
	e.launched, launched = true, true
	if e.cfg.AdoptEvery > 0 {
		actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		e.stopAdopt = cancel
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

// Shutdown stops running runs at their next step boundary (they resume at
// the next Launch), runs the BeforeClose functions once no run executes, and
// stops DBOS, which closes the store's handle. The executor lock is released
// once no run executes: if a run outlives the timeout, a new engine with the
// same executor ID can launch only after that run has returned. Safe to call
// twice.
func (e *Engine) Shutdown(timeout time.Duration) error {
	var err error
	e.stopOnce.Do(func() {
		e.mu.RLock()
		stopAdopt := e.stopAdopt
		e.mu.RUnlock()
		if stopAdopt != nil {
			stopAdopt()
			e.adopting.Wait()
		}
		e.activeMu.Lock()
		e.stopping = true
		idle := e.active == 0
		e.activeMu.Unlock()
		if idle {
			e.runBeforeClose()
		}
		// DBOS closes the shared handle: nothing may use the store after
		// it. The caller, who opened the store, closes it.
		err = dbos.Shutdown(e.dctx, timeout)
		e.activeMu.Lock()
		e.stopped = true
		unlock := e.takeUnlock()
		e.activeMu.Unlock()
		unlock()
	})
	return err
}

// ErrExecutorRunning is returned by Launch while another engine with the same
// executor ID runs on the same database.
var ErrExecutorRunning = errors.New("an engine with this executor ID already runs on this database")

// lockTries and lockRetry bound how long Launch waits for an executor lock
// held by a session that is ending.
const (
	lockTries = 20
	lockRetry = 100 * time.Millisecond
)

// migrationLockPoll is how often a process waiting for another's DBOS
// migrations looks again.
const migrationLockPoll = 50 * time.Millisecond

// newDBOSContext makes the DBOS context, which migrates DBOS's system
// tables. On PostgreSQL it does so under a session advisory lock, one at a
// time across processes: DBOS's system migrations are not serialized, and
// processes that start together on a new database race in them (all but
// one fail on "duplicate key value violates unique constraint
// pg_namespace_nspname_index" as each creates the dbos schema). On SQLite
// the database's write lock serializes them.
func newDBOSContext(ctx context.Context, h store.Handle, cfg dbos.Config) (dbos.Context, error) {
	if h.Postgres == nil {
		return dbos.NewContext(ctx, cfg)
	}
	c, err := h.Postgres.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock DBOS's migrations: %w", err)
	}
	defer c.Release()
	key := int64(lockKey("sluice dbos migrations"))
	// Polled, not waited for: a session waiting in pg_advisory_lock is a
	// transaction open all the while, and DBOS's CREATE INDEX
	// CONCURRENTLY, under the lock, waits for every open transaction.
	if _, err := pollAdvisoryLock(ctx, c, key, 0, migrationLockPoll); err != nil {
		return nil, fmt.Errorf("lock DBOS's migrations: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := c.Exec(uctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
			// The lock must not outlive this call on a pooled session.
			_ = c.Conn().Close(uctx)
		}
	}()
	return dbos.NewContext(ctx, cfg)
}

// lockKey is the key of a lock named name: an advisory lock's on
// PostgreSQL, a lock file's on SQLite.
func lockKey(name string) uint64 {
	hash := fnv.New64a()
	_, _ = hash.Write([]byte(name))
	return hash.Sum64()
}

// pollAdvisoryLock tries to take the session advisory lock key on c, tries
// times (until it does, when tries is 0) every apart, and reports whether
// it did; ctx's end is an error.
func pollAdvisoryLock(ctx context.Context, c interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key int64, tries int, every time.Duration) (bool, error) {
	for try := 1; ; try++ {
		var ok bool
		if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
			return false, err
		}
		if ok || tries > 0 && try >= tries {
			return ok, nil
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// lockExecutor takes the lock that keeps one live engine per executor ID,
// application and database, and returns what releases it. The lock goes
// with the process that holds it, so a process killed without a shutdown
// leaves nothing to clean up: on PostgreSQL it is an advisory lock held by
// a connection of its own, on SQLite an flock on a file beside the database.
// db names the database in errors.
// It tries tries times, lockRetry apart, before calling the lock taken.
func lockExecutor(ctx context.Context, h store.Handle, db, app, executor string, tries int) (func(), error) {
	key := lockKey("sluice executor\x00" + app + "\x00" + executor)
	busy := func(where string) error {
		return fmt.Errorf("launch executor %q of %s on %s: %w (held through %s); give each process its own executor ID, or stop the other one first", executor, app, db, ErrExecutorRunning, where)
	}
	if h.Postgres != nil {
		c, err := h.Postgres.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("lock executor %q: %w", executor, err)
		}
		// A session that just ended — an engine shut down or killed a
		// moment ago — may hold the lock until the server has finished
		// with it: try again for a short while before calling it taken.
		// The tries run on a pooled session, which goes back to the pool
		// when the lock is taken elsewhere (adoption tries the locks of
		// live executors often).
		ok, err := pollAdvisoryLock(ctx, c, int64(key), tries, lockRetry)
		if err != nil {
			_ = c.Conn().Close(context.Background()) // a session that failed may hold the lock: the pool drops it
			c.Release()
			return nil, fmt.Errorf("lock executor %q: %w", executor, err)
		}
		if !ok {
			c.Release()
			return nil, busy(fmt.Sprintf("PostgreSQL advisory lock %d", int64(key)))
		}
		conn := c.Hijack() // a session of its own: the lock lives as long as it
		return func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// Unlock before closing: the server ends a closed session
			// asynchronously, and an engine launched right after this one
			// must find the lock free.
			_, _ = conn.Exec(cctx, `SELECT pg_advisory_unlock($1)`, int64(key))
			_ = conn.Close(cctx)
		}, nil
	}
	path := fmt.Sprintf("%s.executor-%016x.lock", h.File, key)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) // #nosec G304 -- beside the database the caller named
	if err != nil {
		return nil, fmt.Errorf("lock executor %q: %w", executor, err)
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		if errors.Is(err, errLocked) {
			return nil, busy(path)
		}
		return nil, fmt.Errorf("lock executor %q: %w", executor, err)
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
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

// AppVersion is the version runs are recorded under: Config.AppVersion, or
// one DBOS derives from the binary.
func (e *Engine) AppVersion() string { return e.dctx.GetApplicationVersion() }
