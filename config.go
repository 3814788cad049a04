package sluice

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/llm"
)

// Config configures an App. The zero value runs on ./sluice.db with no LLM
// provider.
type Config struct {
	// DatabaseURL is where runs, steps and sluice's own tables live (the
	// governors' charges too, so a restart remembers the day's usage):
	// "sqlite:PATH" or a path ending in .db, .sqlite or .sqlite3 (default
	// "sluice.db"), or "postgres://…" so several processes share the work.
	DatabaseURL string

	// Providers are the LLM provider keys functions call through LLM. The
	// first is the default; a function picks another with
	// FunctionConfig.Provider.
	Providers []Provider

	// Routes let a function or backfill draw on several providers (keys
	// and models): a route's name goes where a provider's does
	// (FunctionConfig.Provider, Backfill.Provider), and each call runs on
	// one of its targets, chosen before admission (see Route).
	Routes []Route

	// Flows configure the flows functions draw on (weight and priority of
	// their share of every provider key). A flow not listed gets weight 1
	// and priority 0; a function's flow defaults to its ID.
	Flows []governor.FlowConfig

	// MaxInlineWait is how long an LLM step waits for quota inside the step
	// before it ends the attempt and sleeps durably until the governor
	// expects room (default 30s).
	MaxInlineWait time.Duration

	// PollInterval is how often each function's queue is checked for runs
	// to start (default 100ms).
	PollInterval time.Duration

	// RetryBase and RetryMax bound the exponential backoff of transient
	// failures (defaults 1s and 10m; ±25% jitter).
	RetryBase, RetryMax time.Duration

	// AppVersion is the version runs are recorded under: a process
	// resumes and starts only the runs of its own version, so a run left
	// by a process of another version waits, listed as other_version,
	// until a person resumes it here (App.ResumeVersion, `sluice runs
	// resume --from-version`) or cancels it. Set it to your app's release
	// and change it when a function's steps change incompatibly
	// (docs/operations.md). Default: the app's name and a hash of the IDs
	// of its functions and their parts, the same for every build of the
	// same code whatever its flags.
	AppVersion string

	// StopGrace is how long Stop lets the steps in flight finish (an LLM
	// call answered) once it stopped taking work; a step still running
	// then is cut, and runs again when its run resumes. Default 30s;
	// negative: none.
	StopGrace time.Duration

	// ExecutorID names this process when several share a PostgreSQL
	// database (default "local"); a restarted process with the same ID
	// resumes the runs the previous one left.
	ExecutorID string

	// Cluster, when set, makes this process one of several on one
	// database that share every provider key: each process holds leases
	// of the keys' capacity from the database, so what all of them admit
	// never sums to more than a limit, whichever process a flow's work
	// lands on (docs/multinode.md). Every process on the keys must set it,
	// each with an ExecutorID of its own, which names it in the leases.
	Cluster *Cluster

	// AlertWebhook, when set, receives a JSON POST when a backfill stalls
	// and when it recovers (retried with backoff; one alert per change,
	// however many processes run the app). Alerts are logged either way.
	AlertWebhook string

	// HealthEvery is how often the backfills' health is judged (default
	// 30s): GET /v1/flows, /readyz and the alerts read it.
	HealthEvery time.Duration

	// HistoryEvery is how often each backfill's sample (items done, calls,
	// rejections and refusals by limit, state) is recorded for `sluice
	// report` (default 1m; a sample is taken at a health poll, so at most
	// as often as HealthEvery).
	HistoryEvery time.Duration

	// HistoryKeep is how long those samples are kept (default 90 days):
	// each process deletes the older ones once an hour. Negative keeps
	// them for good.
	HistoryKeep time.Duration

	// Logger receives the engine's logs (default: warnings to stderr).
	Logger *slog.Logger

	// Now and Speed give the app a clock of its own, for a rehearsal in
	// compressed time against a provider simulator on the same clock (as
	// `sluice demo --speed` runs): Speed is how many times as fast as the
	// wall clock Now runs (default 1; Now defaults to a clock that runs
	// Speed times as fast from New). Everything the app times reads that
	// clock: the governors' windows and day pacing, durable sleeps (Sleep,
	// waits for quota, retries' backoff), backfill polls and their items'
	// retries, stall thresholds, HealthEvery and HistoryEvery, each lasting
	// its duration divided by Speed of wall time. Deadlines of HTTP calls
	// stay in wall time. Never set Speed with a real provider: its windows
	// run on the wall clock.
	Now   func() time.Time
	Speed float64
}

// Cluster configures the processes that share the provider keys.
type Cluster struct {
	// LeaseTTL is how long a lease of a key's capacity lasts (default 2s,
	// from 1ms to 1h): a busy process takes a lease about every quarter
	// of it, and a process that dies holds at most its last lease's unused
	// room, for a limit's period after the lease ends.
	LeaseTTL time.Duration
	// AdoptEvery is how often (of the app's clock) a process looks for runs
	// left unfinished by processes that no longer run — none holds their
	// executor lock, so they died or stopped — and hands them back to
	// their queues, to be resumed by any live process from their last
	// recorded step (default 10s; negative: never, and a run resumes only
	// when a process with its executor ID starts again; at most 1h).
	AdoptEvery time.Duration
}

// DefaultAdoptEvery is Cluster.AdoptEvery's default.
const DefaultAdoptEvery = 10 * time.Second

// Provider is one LLM provider key.
type Provider struct {
	// Name names the provider in FunctionConfig.Provider, errors and stats
	// (default "default"). Never the key itself.
	Name string
	// LLM configures the client: base URL, API key, profile (groq, openai,
	// anthropic), default max_tokens.
	LLM llm.Config
	// Model is the model the key's calls use when it is a route's target:
	// a route sets each call's model to its target's. Default: the
	// request's own.
	Model string
	// Limits are the key's limits (rpm rpd tpm tpd itpm otpm); 0 = none.
	// Where a provider limits each model apart (Groq), give each model a
	// Provider of its own, with the same LLM config and its Model.
	Limits governor.Limits
	// Price is what the key's model charges, in money per million tokens
	// (input, cached input, output). With a price, every call's cost in
	// money is known, and a Budget can apply.
	Price governor.Price
	// Budget caps what the key's calls may cost, per day and per month (see
	// Budget); with Cluster set, what the calls of all the processes cost
	// together (docs/multinode.md).
	Budget Budget
	// FixedWindows and SettleOutput say how the provider counts, as
	// governor.Config's fields of the same names (defaults: rolling windows;
	// the admission charge stands).
	FixedWindows bool
	SettleOutput bool
	// DayBurst is how far ahead of an even pace the day limits (RPD, TPD)
	// may be spent: the governor spreads a day's budget over the day so it
	// is not gone by the morning. Default 1h; negative spends it as fast as
	// the other limits allow.
	DayBurst time.Duration
	// Lag is how much later than this process the provider may count a
	// call — the request's transit — so a call admitted the moment an old
	// charge ages out here does not arrive while it still counts there
	// (default 2s, or 40 ms of the wall clock under Config.Speed when that
	// is longer, at most a minute: transit and scheduling delays are
	// wall-clock time, which compressed time multiplies).
	Lag time.Duration
}

// Route is a way for calls over several providers: each call runs on one
// target, chosen before admission — by default the cheapest (at the
// providers' prices; an unpriced one costs nothing, ties in the order
// listed) whose governor expects to admit it within MaxWait, else the one
// that would admit it soonest. A target whose calls fail (5xx, overload,
// timeouts, closed connections; a 401, 403 or 404: its key or model is
// wrong there) Failures times in a row is left out for
// Cooldown, then gets one call to show it is back (out twice as long each
// time that call fails, up to MaxCooldown); a target that refuses with a
// limit it cannot wait out is left while its governor expects the wait. A
// call never runs on two targets: one that fails is retried by its class,
// and the retry is routed again. The response names its target
// (llm.ChatResponse.Target). See docs/routing.md.
type Route struct {
	// Name is what functions and backfills name the route by; it may not
	// be a provider's name.
	Name string
	// Targets are provider names (Config.Providers), in order of
	// preference.
	Targets []string
	// InOrder ranks the targets in the order listed, whatever they cost:
	// a fixed primary and its fallbacks.
	InOrder bool
	// MaxWait is how long a call may wait for a better-ranked target
	// before a later one is used (default 30s; negative: not at all).
	MaxWait time.Duration
	// Failures and Cooldown say when a failing target is left out, and for
	// how long at first (defaults 3 and 30s); MaxCooldown bounds how long
	// it is left out as its calls go on failing (default 5m).
	Failures              int
	Cooldown, MaxCooldown time.Duration
}

// Budget is money a key's calls may cost, per day and per month (see
// governor.Budget).
type Budget = governor.Budget

func (c Config) validate() error {
	seen := map[string]bool{}
	for i, p := range c.Providers {
		name := cmp.Or(p.Name, defaultProviderName)
		if seen[name] {
			return fmt.Errorf("providers[%d]: name %q used twice", i, name)
		}
		seen[name] = true
		if err := p.Budget.Validate(p.Price); err != nil {
			return fmt.Errorf("providers[%d] (%s): %w", i, name, err)
		}
	}
	for i, r := range c.Routes {
		switch {
		case r.Name == "":
			return fmt.Errorf("routes[%d]: no name", i)
		case seen[r.Name]:
			return fmt.Errorf("routes[%d]: name %q is already a provider's or a route's", i, r.Name)
		case len(r.Targets) == 0:
			return fmt.Errorf("routes[%d] (%s): no targets", i, r.Name)
		case r.MaxWait > route.MaxDuration || r.Cooldown > route.MaxDuration || r.MaxCooldown > route.MaxDuration:
			return fmt.Errorf("routes[%d] (%s): a wait over %v", i, r.Name, route.MaxDuration)
		case r.Cooldown < 0 || r.MaxCooldown < 0:
			return fmt.Errorf("routes[%d] (%s): a negative cooldown", i, r.Name)
		case r.Failures < 0 || r.Failures > 1000:
			return fmt.Errorf("routes[%d] (%s): failures %d: want 1 to 1000 (0 means 3)", i, r.Name, r.Failures)
		}
		seen[r.Name] = true
		targets := map[string]bool{}
		for _, t := range r.Targets {
			if targets[t] {
				return fmt.Errorf("routes[%d] (%s): target %q listed twice", i, r.Name, t)
			}
			targets[t] = true
			if !slices.ContainsFunc(c.Providers, func(p Provider) bool { return cmp.Or(p.Name, defaultProviderName) == t }) {
				return fmt.Errorf("routes[%d] (%s): target %q is no provider's name", i, r.Name, t)
			}
		}
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"MaxInlineWait", c.MaxInlineWait}, {"PollInterval", c.PollInterval}, {"RetryBase", c.RetryBase}, {"RetryMax", c.RetryMax},
		{"HealthEvery", c.HealthEvery}, {"HistoryEvery", c.HistoryEvery},
	} {
		if d.d < 0 {
			return fmt.Errorf("%s %s is negative (0 means the default)", d.name, d.d)
		}
	}
	if c.RetryBase > 0 && c.RetryMax > 0 && c.RetryBase > c.RetryMax {
		return fmt.Errorf("RetryBase %s is above RetryMax %s", c.RetryBase, c.RetryMax)
	}
	if c.AppVersion != "" {
		if err := CheckVersion(c.AppVersion); err != nil {
			return fmt.Errorf("AppVersion: %w", err)
		}
	}
	if c.Speed != 0 && !(c.Speed >= 1 && c.Speed <= MaxSpeed) { // NaN fails both
		return fmt.Errorf("speed %v: want a number between 1 and %d (0 means 1)", c.Speed, MaxSpeed)
	}
	if c.Cluster != nil && c.Cluster.LeaseTTL != 0 && (c.Cluster.LeaseTTL < time.Millisecond || c.Cluster.LeaseTTL > time.Hour) {
		return fmt.Errorf("cluster lease TTL %v: want from 1ms to 1h (0 means %s)", c.Cluster.LeaseTTL, defaultLeaseTTL)
	}
	if c.Cluster != nil && c.Cluster.AdoptEvery > time.Hour {
		return fmt.Errorf("cluster adoption period %v: want at most 1h (0 means %s, negative never)", c.Cluster.AdoptEvery, DefaultAdoptEvery)
	}
	return nil
}

// MaxSpeed bounds Config.Speed: a simulated day in under a minute and a
// half leaves the engine's steps, not the key's limits, the bottleneck.
const MaxSpeed = 1000

// The defaults of Config, as its fields document them; where a package
// below applies the same default to its own zero value, its constant.
const (
	defaultDatabaseURL   = "sluice.db"
	defaultMaxInlineWait = engine.DefaultMaxInlineWait
	defaultPollInterval  = engine.DefaultPollInterval
	defaultRetryBase     = engine.DefaultRetryBase
	defaultRetryMax      = engine.DefaultRetryMax
	defaultStopGrace     = engine.DefaultStopGrace
	defaultExecutorID    = "local"
	defaultHealthEvery   = health.DefaultEvery
	defaultHistoryEvery  = health.DefaultHistoryEvery
	defaultProviderName  = "default"
	defaultLeaseTTL      = quota.DefaultLeaseTTL
)

// withDefaults is c with every default of its fields filled in (a
// negative StopGrace stays: none). A provider's DayBurst, Window and
// Accounting are the governor's (governor.Config). It runs after validate.
func (c Config) withDefaults() Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, defaultDatabaseURL)
	c.MaxInlineWait = cmp.Or(c.MaxInlineWait, defaultMaxInlineWait)
	c.PollInterval = cmp.Or(c.PollInterval, defaultPollInterval)
	c.RetryBase = cmp.Or(c.RetryBase, defaultRetryBase)
	c.RetryMax = cmp.Or(c.RetryMax, defaultRetryMax)
	c.StopGrace = cmp.Or(c.StopGrace, defaultStopGrace)
	c.ExecutorID = cmp.Or(c.ExecutorID, defaultExecutorID)
	c.HealthEvery = cmp.Or(c.HealthEvery, defaultHealthEvery)
	c.HistoryEvery = cmp.Or(c.HistoryEvery, defaultHistoryEvery)
	c.Speed = cmp.Or(c.Speed, 1)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if c.Now == nil {
		c.Now = clock.New(c.Speed).Now
	}
	c.Providers = slices.Clone(c.Providers)
	for i := range c.Providers {
		p := &c.Providers[i]
		p.Name = cmp.Or(p.Name, defaultProviderName)
		p.Lag = cmp.Or(p.Lag, defaultLag(c.Speed))
	}
	if c.Cluster != nil {
		cl := *c.Cluster
		cl.LeaseTTL = cmp.Or(cl.LeaseTTL, defaultLeaseTTL)
		cl.AdoptEvery = cmp.Or(cl.AdoptEvery, DefaultAdoptEvery)
		c.Cluster = &cl
	}
	return c
}

// defaultLag is a provider's Lag when none is given: 2 s, or 40 ms of the
// wall clock at speed when that is longer, at most a minute.
func defaultLag(speed float64) time.Duration {
	return min(max(2*time.Second, time.Duration(max(speed, 1)*float64(40*time.Millisecond))), time.Minute)
}
