package sluice

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/backfill"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"

	// The databases Config.DatabaseURL may name.
	_ "github.com/sluice-dev/sluice/internal/store/postgres"
	_ "github.com/sluice-dev/sluice/internal/store/sqlite"
)

// App is a set of functions, the database their runs live in, and the
// governed LLM providers they call. Build it with New, register functions,
// then Start. Safe for concurrent use once started.
type App struct {
	cfg       Config
	st        store.Store // opened by New, closed by Stop after the engine
	e         *engine.Engine
	providers map[string]*engine.Provider
	routes    map[string]*engine.Route
	models    map[string]string // by provider name, Provider.Model
	ledgers   []*quota.Ledger
	clusters  map[string]*quota.Ledger // by provider name, the ledgers of a cluster
	backfills *backfill.Set
	monitor   *health.Monitor
	// thresholds and quotas are what the monitor judges each backfill by:
	// its StallAfter, and its provider's governor and flow.
	thresholds map[string]time.Duration
	quotas     map[string]func(now time.Time) health.Quota
	counters   map[string]func(now time.Time) health.Counters
	inFlight   map[string]func() health.InFlight
	webhooks   map[string]string // the backfills' own alert webhooks
	first      string
	metrics    *metrics.Set    // the series MetricsHandler serves (metrics.go)
	plans      planCache       // the dashboard's Plan page (plan.go)
	yaml       map[string]bool // the jobs declared in YAML (DeclaredInYAML)
	// throttle counts the wrong tokens sent to Handler, Dashboard and
	// CheckBearer's doors, per client address (http.go).
	throttle *authlimit.Throttle
}

// New opens the database and builds the providers' clients and governors.
// Each governor starts from the charges its provider's key made in the last
// day, as recorded in the database by this and every other process that
// used the key under the same provider name.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sluice config: %w", err)
	}
	cfg = cfg.withDefaults()
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	ms := newMetrics()
	now := cfg.Now
	e, err := engine.New(ctx, engine.Config{
		Now:          now,
		Speed:        cfg.Speed,
		Metrics:      ms,
		Store:        st,
		AppVersion:   cfg.AppVersion,
		StopGrace:    cfg.StopGrace,
		ExecutorID:   cfg.ExecutorID,
		PollInterval: cfg.PollInterval,
		RetryBase:    cfg.RetryBase,
		RetryMax:     cfg.RetryMax,
		Logger:       cfg.Logger,
		AdoptEvery:   adoptEvery(cfg.Cluster),
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a := &App{cfg: cfg, st: st, e: e, providers: map[string]*engine.Provider{}, metrics: ms,
		throttle: authlimit.New(authlimit.Config{Logger: e.Logger()})}
	a.backfills = backfill.NewSet(e, st, e.Logger(), now)
	a.thresholds, a.quotas = map[string]time.Duration{}, map[string]func(time.Time) health.Quota{}
	a.webhooks = map[string]string{}
	a.counters = map[string]func(time.Time) health.Counters{}
	a.inFlight = map[string]func() health.InFlight{}
	if a.monitor, err = a.newMonitor(); err != nil {
		_ = a.shutdown(time.Second)
		return nil, fmt.Errorf("sluice config: %w", err)
	}
	for i, p := range cfg.Providers {
		if err := a.addProvider(ctx, p); err != nil {
			_ = a.shutdown(time.Second)
			return nil, fmt.Errorf("provider %s: %w", p.Name, err)
		}
		if i == 0 {
			a.first = p.Name
		}
	}
	for _, r := range cfg.Routes {
		if err := a.addRoute(r); err != nil {
			_ = a.shutdown(time.Second)
			return nil, err
		}
	}
	if err := a.watchMetrics(); err != nil {
		_ = a.shutdown(time.Second)
		return nil, fmt.Errorf("sluice metrics: %w", err)
	}
	// Charges made by runs still in flight when the app stops are written
	// once the last of them has returned, before the database closes.
	e.BeforeClose(a.flushLedgers)
	return a, nil
}

// newMonitor returns the health monitor of the app's backfills, judged by
// what RegisterBackfill adds to a's thresholds, quotas and counters before
// Start.
func (a *App) newMonitor() (*health.Monitor, error) {
	return health.New(health.Config{
		Source:     a.st,
		Every:      a.cfg.HealthEvery,
		Thresholds: a.thresholds, // filled by RegisterBackfill, before Start
		Quota: func(job string, now time.Time) health.Quota {
			if q := a.quotas[job]; q != nil {
				return q(now)
			}
			return health.Quota{}
		},
		History:      a.st,
		HistoryEvery: a.cfg.HistoryEvery,
		HistoryKeep:  a.cfg.HistoryKeep,
		Counters: func(job string, now time.Time) health.Counters {
			if c := a.counters[job]; c != nil {
				return c(now)
			}
			return health.Counters{}
		},
		InFlight: func(job string) health.InFlight {
			if f := a.inFlight[job]; f != nil {
				return f()
			}
			return health.InFlight{}
		},
		Webhook:  a.cfg.AlertWebhook,
		Webhooks: a.webhooks, // filled by RegisterBackfill, before Start
		Logger:   a.e.Logger(),
		Now:      a.cfg.Now,
		Speed:    a.cfg.Speed,
	})
}

// addProvider builds p's client, estimator and governor, the governor
// starting from the charges p's key made in the last day.
func (a *App) addProvider(ctx context.Context, p Provider) error {
	cfg, now, name := a.cfg, a.cfg.Now, p.Name
	client, err := llm.NewClient(p.LLM)
	if err != nil {
		return err
	}
	ledger, err := quota.Open(ctx, a.st, governor.Config{
		Key:          name, // the store keeps it in clear: never the API key
		Limits:       p.Budget.Limits(p.Limits),
		Price:        p.Price,
		FixedWindows: p.FixedWindows,
		SettleOutput: p.SettleOutput,
		DayBurst:     p.DayBurst,
		Lag:          p.Lag,
		Flows:        cfg.Flows,
		Now:          now,
		Speed:        cfg.Speed,
		Logger:       a.e.Logger(),
	}, quota.Config{Now: now, Cluster: cluster(cfg, a.e.Logger())})
	if err != nil {
		return err
	}
	a.ledgers = append(a.ledgers, ledger)
	if ledger.Node() != "" {
		if a.clusters == nil {
			a.clusters = map[string]*quota.Ledger{}
		}
		a.clusters[name] = ledger
	}
	est, err := llm.NewEstimator(llm.EstimatorConfig{Profile: client.Profile()})
	if err != nil {
		return err
	}
	if p.Model != "" {
		if a.models == nil {
			a.models = map[string]string{}
		}
		a.models[name] = p.Model
	}
	a.providers[name] = &engine.Provider{Name: name, Client: client, Governor: ledger.Governor, Estimator: est, MaxInlineWait: cfg.MaxInlineWait, Logger: a.e.Logger(),
		Now: now, Speed: cfg.Speed}
	return nil
}

// addRoute builds r's router over its targets' governors.
func (a *App) addRoute(r Route) error {
	rc := route.Config{Name: r.Name, MaxWait: r.MaxWait, Failures: r.Failures, Cooldown: r.Cooldown, MaxCooldown: r.MaxCooldown}
	if r.InOrder {
		rc.Rule = route.Ordered
	}
	er := &engine.Route{Name: r.Name, Now: a.cfg.Now}
	for _, name := range r.Targets {
		p := a.providers[name]
		rc.Targets = append(rc.Targets, route.Target{Name: name, Governor: p.Governor})
		er.Targets = append(er.Targets, p)
		er.Models = append(er.Models, a.models[name])
	}
	router, err := route.New(rc)
	if err != nil {
		return err
	}
	er.Router = router
	if a.routes == nil {
		a.routes = map[string]*engine.Route{}
	}
	a.routes[r.Name] = er
	return nil
}

// caller is the provider or route named name (the first provider for
// ""), or nil.
func (a *App) caller(name string) engine.Caller {
	name = cmp.Or(name, a.first)
	if p := a.providers[name]; p != nil {
		return p
	}
	if r := a.routes[name]; r != nil {
		return r
	}
	return nil
}

func (a *App) flushLedgers(ctx context.Context) error {
	var errs []error
	for _, l := range a.ledgers {
		errs = append(errs, l.Flush(ctx))
	}
	return errors.Join(errs...)
}

// Start launches the app: it starts the functions' queues and schedules and
// resumes the runs a previous process left unfinished. The governors write
// their charges to the database in the background until Stop.
func (a *App) Start(ctx context.Context) error {
	for _, l := range a.ledgers {
		l.Start(context.WithoutCancel(ctx))
	}
	if err := a.e.Launch(ctx); err != nil {
		return err
	}
	if err := a.backfills.Start(ctx); err != nil {
		return err
	}
	if err := a.recordConfig(ctx); err != nil {
		a.e.Logger().Warn("sluice: cannot record the configuration's version; sluice report will not see this start", "err", err)
	}
	a.monitor.Start(context.WithoutCancel(ctx))
	return nil
}

// Stop stops the app as a pause: it takes no new work, lets the steps in
// flight finish for up to Config.StopGrace, and leaves every unfinished run
// to resume at the next Start (here or, in a cluster, on another process);
// a step cut at the end of the grace runs again then. Nothing is cancelled.
// ctx's deadline, if any, bounds the whole stop (the grace shortens to fit);
// without one a stop takes at most the grace and a few seconds. Safe to
// call twice.
func (a *App) Stop(ctx context.Context) error {
	timeout := a.stopGrace() + 5*time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	// The background writers stop first so that none is writing when the
	// database closes; the charges of runs still in flight are flushed by
	// the engine once they have returned (see New).
	a.backfills.Stop()
	a.plans.close()
	var errs []error
	errs = append(errs, a.monitor.Stop(ctx))
	for _, l := range a.ledgers {
		errs = append(errs, l.Stop(ctx))
	}
	errs = append(errs, a.shutdown(timeout))
	return errors.Join(errs...)
}

// stopGrace is Config.StopGrace, none when negative.
func (a *App) stopGrace() time.Duration {
	return max(a.cfg.StopGrace, 0)
}

// shutdown stops the engine, then closes the store it ran on: DBOS has
// closed the store's handle by then, so Close only marks the store closed,
// or releases the handle if DBOS never took it. Both are safe to call twice.
func (a *App) shutdown(timeout time.Duration) error {
	return errors.Join(a.e.Shutdown(timeout), a.st.Close())
}

// CheckVersion refuses a version name (Config.AppVersion) that the API, the
// command line and the database would not all carry the same way: it wants
// 1 to 128 letters, digits or ._:+@/- starting with a letter or digit.
func CheckVersion(v string) error { return engine.CheckVersion(v) }

// The errors the App's methods return that a caller can name with
// errors.Is (and ErrSameVersion, beside the versions).
var (
	// ErrNoFunction is returned by Send when no function listens to the
	// event.
	ErrNoFunction = engine.ErrNoFunction
	// ErrRunNotFound is returned by Wait and Result for a run ID no run has.
	ErrRunNotFound = engine.ErrRunNotFound
	// ErrExecutorRunning is returned by Start while another process (or
	// App) with the same executor ID runs on the database.
	ErrExecutorRunning = engine.ErrExecutorRunning
	// ErrDatabaseLocked is returned by Send when its SQLite database stayed
	// locked by another connection or process for the whole of the 30 s
	// Send waits for it: nothing was started, and the same event may be
	// sent again under its ID.
	ErrDatabaseLocked = store.ErrLocked
)

// Send sends an event: every function it triggers starts a run. id
// deduplicates (empty: a random one); data is encoded as JSON.
func (a *App) Send(ctx context.Context, name, id string, data any) ([]run.Sent, error) {
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return nil, fmt.Errorf("send %s: encode data: %w", name, err)
		}
		raw = b
	}
	return a.e.Send(ctx, engine.Event{Name: name, ID: id, Data: raw})
}

// Wait blocks until the run ends (or ctx does) and returns how it ended,
// its times on the app's clock (Config.Now), as the run API shows them.
func (a *App) Wait(ctx context.Context, runID string) (run.Summary, error) {
	s, _, err := a.e.Wait(ctx, runID)
	return s, err
}

// Result waits until the run ends (or ctx does) and returns its output,
// the R its handler returned, decoded into R. A run that did not complete
// returns a *RunError saying how it ended.
func Result[R any](ctx context.Context, a *App, runID string) (R, error) {
	var out R
	s, raw, err := a.e.Wait(ctx, runID)
	if err != nil {
		return out, err
	}
	if s.Status != run.Completed {
		return out, &RunError{Run: s}
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("run %s: decode output into %T: %w", runID, out, err)
	}
	return out, nil
}

// RunError is the error of a run that ended without completing: failed,
// cancelled or timed out.
type RunError struct {
	Run run.Summary
}

func (e *RunError) Error() string {
	msg := fmt.Sprintf("run %s %s", e.Run.ID, e.Run.Status)
	if e.Run.Step != "" {
		msg += " in step " + e.Run.Step
	}
	if e.Run.Error != "" {
		msg += ": " + e.Run.Error
	}
	return msg
}

// Stats returns the governor statistics of a provider (flows waiting,
// admitted, tokens; usage of every limit). With Config.Cluster, each
// limit's use is the whole cluster's, as the leases of every process take
// it (see docs/multinode.md), read from the database under ctx; the flows
// are this process's. When the cluster's use cannot be read, Stats returns
// the process's own statistics with an error saying so.
func (a *App) Stats(ctx context.Context, provider string) (governor.Stats, error) {
	name := cmp.Or(provider, a.first)
	if _, ok := a.providers[name]; !ok {
		return governor.Stats{}, fmt.Errorf("unknown provider %q", provider)
	}
	return a.statsOf(ctx, name, a.e.Now())
}

// statsOf is provider name's governor statistics at now, with the
// cluster's use of each limit when it is one of a cluster. When the store
// cannot be read, the process's own use stands, with the error.
func (a *App) statsOf(ctx context.Context, name string, now time.Time) (governor.Stats, error) {
	st := a.providers[name].Governor.Stats(now)
	l := a.clusters[name]
	if l == nil {
		return st, nil
	}
	minute, day, _, err := l.ClusterUse(ctx, now)
	if err != nil {
		return st, fmt.Errorf("read the cluster's use of %s (these are this process's own figures): %w", name, err)
	}
	for lim := range governor.NumLimits {
		ls := &st.Limits[lim]
		used := minute.On(lim)
		if lim.Period() > time.Minute {
			used = day.On(lim)
		}
		if used > ls.Used {
			ls.Used = used
			ls.Capacity = max(ls.Max-used, 0)
		}
	}
	return st, nil
}

// NodeFlow is what one process of a cluster (Config.Cluster) last said of
// one of its flows on a provider's key: the calls waiting in its line, and
// the calls it admitted since it started with the tokens charged to them,
// as settled.
type NodeFlow struct {
	Node, Flow string
	Waiting    int
	Admitted   int64
	Tokens     governor.Cost // Input and Output
	// At is when the process said it, on its clock.
	At time.Time
}

// ClusterFlows returns what every process of the app's cluster, this one
// too, said of its flows on a provider's key ("" for the first provider)
// in the last few seconds (each writes it down every lease, from a second
// to five apart), by flow and then process: so any process shows the
// whole cluster's flows. It is nil when the app is not one of a cluster.
func (a *App) ClusterFlows(ctx context.Context, provider string) ([]NodeFlow, error) {
	name := cmp.Or(provider, a.first)
	if _, ok := a.providers[name]; !ok {
		return nil, fmt.Errorf("unknown provider %q", provider)
	}
	l := a.clusters[name]
	if l == nil {
		return nil, nil
	}
	rows, _, err := l.ClusterFlows(ctx, a.e.Now())
	if err != nil {
		return nil, fmt.Errorf("read the cluster's flows of %s: %w", name, err)
	}
	out := make([]NodeFlow, len(rows))
	for i, r := range rows {
		out[i] = NodeFlow{Node: r.Node, Flow: r.Flow, Waiting: int(r.Waiting), Admitted: r.Admitted,
			Tokens: governor.Cost{Input: r.Input, Output: r.Output}, At: r.At}
	}
	return out, nil
}

// Governor returns the governor of a provider's key (the first provider's
// for ""), for code in the same process that must share the key with the
// app's functions — an OpenAI-compatible gateway, another client's calls —
// instead of spending it a second time. What is admitted through it counts
// against the app's limits and is kept with the app's charges.
func (a *App) Governor(provider string) (*governor.Governor, error) {
	p, ok := a.providers[cmp.Or(provider, a.first)]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", provider)
	}
	return p.Governor, nil
}

var errNoProvider = errors.New("no LLM provider is configured (Config.Providers)")

// adoptEvery is the engine's AdoptEvery for c: none without a cluster, or
// when negative.
func adoptEvery(c *Cluster) time.Duration {
	if c == nil {
		return 0
	}
	return max(c.AdoptEvery, 0)
}

// cluster is the quota leases' configuration of cfg's process, nil when it
// is not one of a cluster.
func cluster(cfg Config, logger *slog.Logger) *quota.Cluster {
	if cfg.Cluster == nil {
		return nil
	}
	return &quota.Cluster{Node: cfg.ExecutorID, LeaseTTL: cfg.Cluster.LeaseTTL, Speed: cfg.Speed, Logger: logger}
}
