package sluice

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/run"
)

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
// returns an R, recorded as the run's output (Result reads it back).
// Register before Start.
func Register[T, R any](app *App, cfg run.Function, handler func(ctx *Context, ev Event[T]) (R, error)) error {
	if handler == nil {
		return fmt.Errorf("function %s: handler is nil", cfg.ID)
	}
	if cfg.Provider != "" {
		if app.caller(cfg.Provider) == nil {
			return fmt.Errorf("function %s: unknown provider or route %q", cfg.ID, cfg.Provider)
		}
	}
	f := &engine.Function{Function: cfg}
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
