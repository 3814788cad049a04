package sluice

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
)

// FunctionConfig configures a function. ID, a handler and a trigger (Event
// or Cron) are required; every other zero value is a useful default.
type FunctionConfig struct {
	// ID names the function; runs are listed under it. Letters, digits and
	// ._:- (at most 128).
	ID string
	// Event triggers a run for each event of this name.
	Event string
	// Cron triggers a run on a schedule: five fields (minute hour day
	// month weekday) or six with seconds first. Runs of one tick are
	// started once even when several processes run the app.
	Cron string
	// Retries is how many times a failing step is tried again after its
	// first attempt (default 3; NoRetries for none). Waiting for quota does
	// not count.
	Retries int
	// Timeout bounds a whole run from its start (default none). A run that
	// exceeds it is stopped where it is and ends "timed_out"; its error
	// names the deadline, the step it was in and that step's last failed
	// attempt.
	Timeout time.Duration
	// Idempotency names an event field ("event.data.documentId", or just
	// "documentId") whose value identifies the run: a second event with the
	// same value starts nothing. Default: the event's ID.
	Idempotency string
	// Concurrency limits runs executing at once: across every process, or
	// per process, and optionally per value of an event field.
	Concurrency []Concurrency
	// Throttle limits how many runs start per period; the excess waits.
	Throttle *Throttle
	// RateLimit limits how many events start a run per period; the excess
	// is dropped and recorded (use it against duplicate triggers, not to
	// protect a quota).
	RateLimit *RateLimit
	// Priority names an event field holding an integer: among queued runs,
	// higher starts sooner (default 0).
	Priority string
	// Flow is the governor flow the function's LLM calls draw on (default:
	// the ID). Functions sharing a flow share its share of the key.
	Flow string
	// Provider names the provider LLM calls use (default: the first).
	Provider string
}

// NoRetries, as FunctionConfig.Retries, tries each step once.
const NoRetries = -1

// Concurrency limits runs executing at once.
type Concurrency struct {
	Limit     int    // at most this many
	Key       string // optional event field: the limit holds per value (a tenant, a user)
	PerWorker bool   // the limit holds in each process instead of across all
}

// Throttle limits run starts per period; excess runs wait in the queue.
type Throttle struct {
	Limit  int
	Period time.Duration
	Key    string // optional event field: the throttle holds per value
}

// RateLimit limits events accepted per period; excess events are dropped.
type RateLimit struct {
	Limit  int
	Period time.Duration
	Key    string // optional event field: the limit holds per value
}

// Event is an event as a function receives it, its data decoded into T.
type Event[T any] struct {
	Name string
	ID   string
	Data T
	TS   time.Time
}

// Context is the context of one run, passed to the function. Steps take it;
// it is a context.Context that ends when the run is cancelled or times out.
type Context struct {
	run          *engine.Run
	app          *App
	providerName string
}

var _ context.Context = (*Context)(nil)

func (c *Context) Deadline() (time.Time, bool) { return c.run.Deadline() }
func (c *Context) Done() <-chan struct{}       { return c.run.Done() }
func (c *Context) Err() error                  { return c.run.Err() }
func (c *Context) Value(key any) any           { return c.run.Value(key) }

// RunID returns the run's ID.
func (c *Context) RunID() string { return c.run.ID() }

// FunctionID returns the ID of the function the run executes.
func (c *Context) FunctionID() string { return c.run.Function().ID }

// Register adds a function whose handler receives events decoded into T and
// returns an R, recorded as the run's output. Register before Start.
func Register[T, R any](app *App, cfg FunctionConfig, handler func(ctx *Context, ev Event[T]) (R, error)) error {
	if handler == nil {
		return fmt.Errorf("function %s: handler is nil", cfg.ID)
	}
	retries := cfg.Retries
	switch {
	case retries == 0:
		retries = 3
	case retries == NoRetries:
		retries = 0
	case retries < 0:
		return fmt.Errorf("function %s: retries %d: want ≥ 0 or NoRetries", cfg.ID, retries)
	}
	if cfg.Provider != "" {
		if _, ok := app.providers[cfg.Provider]; !ok {
			return fmt.Errorf("function %s: unknown provider %q", cfg.ID, cfg.Provider)
		}
	}
	f := &engine.Function{
		ID:          cfg.ID,
		Event:       cfg.Event,
		Cron:        cfg.Cron,
		Retries:     retries,
		Timeout:     cfg.Timeout,
		Idempotency: cfg.Idempotency,
		Priority:    cfg.Priority,
		Flow:        cfg.Flow,
	}
	for _, c := range cfg.Concurrency {
		f.Concurrency = append(f.Concurrency, engine.Concurrency(c))
	}
	if t := cfg.Throttle; t != nil {
		f.Throttle = &engine.Throttle{Limit: t.Limit, Period: t.Period, Key: t.Key}
	}
	if r := cfg.RateLimit; r != nil {
		f.RateLimit = &engine.RateLimit{Limit: r.Limit, Period: r.Period, Key: r.Key}
	}
	// An event whose data does not decode into T is refused by Send (400
	// at the HTTP API) instead of starting a run that fails.
	f.Decode = func(data json.RawMessage) error {
		var v T
		return json.Unmarshal(data, &v)
	}
	provider := cmp.Or(cfg.Provider, app.first)
	f.Handler = func(r *engine.Run, ev engine.Event) (any, error) {
		var data T
		if len(ev.Data) > 0 && string(ev.Data) != "null" {
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				return nil, engine.NonRetriable(fmt.Errorf("decode event %s data: %w", ev.Name, err))
			}
		}
		ctx := &Context{run: r, app: app}
		ctx.providerName = provider
		return handler(ctx, Event[T]{Name: ev.Name, ID: ev.ID, Data: data, TS: ev.TS})
	}
	return app.e.Register(f)
}
