package sluice

import (
	"context"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/llm"
)

// Step runs fn as a durable step named name and returns its result. Once
// it has succeeded the result is recorded: when the run resumes after a
// crash, Step returns the record without calling fn. Failed attempts are
// retried by error class. Steps are identified by their order in the run
// and their name, so a run's code must call the same steps in the same
// order when it replays; R must survive a JSON round trip.
//
// fn must use the context it is given, which is cancelled if the run is.
func Step[R any](ctx *Context, name string, fn func(ctx context.Context) (R, error)) (R, error) {
	return engine.Step(ctx.run, name, fn)
}

// Sleep pauses the run for d, durably: the wake-up time is recorded, so a
// restart sleeps only what remains.
func Sleep(ctx *Context, d time.Duration) error { return engine.Sleep(ctx.run, d) }

// Tx is the transaction a Transaction step runs in, on the app's database.
// Its SQL uses $1, $2 … placeholders on SQLite and PostgreSQL alike. It is
// committed together with the step's record when fn returns nil, and rolled
// back when fn returns an error: fn neither commits nor rolls back.
type Tx interface {
	Exec(ctx context.Context, query string, args ...any) (dbos.Result, error)
	Query(ctx context.Context, query string, args ...any) (dbos.Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) dbos.Row
}

// Transaction runs fn as a step inside a transaction on the app's database
// that also records the step's result: its writes happen exactly once, even
// if the process dies right after them. Use it to save results.
func Transaction[R any](ctx *Context, name string, fn func(ctx context.Context, tx Tx) (R, error)) (R, error) {
	return engine.Transaction(ctx.run, name, func(c context.Context, tx dbos.Tx) (R, error) { return fn(c, tx) })
}

// LLM makes a governed chat completion as one durable step: the call's
// cost is reserved with the provider key's governor (every limit at once,
// fairly across flows), the call is made, and the reservation is settled
// with the usage the provider reports. A request that can never fit a
// limit fails at once, naming the limit; a wait for quota longer than
// Config.MaxInlineWait becomes a durable sleep; a rate limit is fed back to
// the governor and retried after the provider's retry-after. A finished
// call's response is recorded and never made again. The recorded response
// keeps its body fields (choices, usage), not its headers.
//
// The call has the provider's deadlines (llm.Config.Timeouts: connect,
// first byte, whole call); a call past one is retried with backoff.
// CallTimeouts overrides them for this call.
func LLM(ctx *Context, name string, req *llm.ChatRequest, opts ...CallOption) (*llm.ChatResponse, error) {
	p := ctx.app.caller(ctx.providerName)
	if p == nil {
		return nil, NonRetriable(errNoProvider)
	}
	var c callOptions
	for _, o := range opts {
		o(&c)
	}
	return engine.LLM(ctx.run, name, p, req, c.timeouts)
}

// CallOption changes one LLM call.
type CallOption func(*callOptions)

type callOptions struct {
	timeouts llm.Timeouts
}

// CallTimeouts sets this call's deadlines: the fields set in t win over
// the provider's llm.Config.Timeouts (e.g. a longer FirstByte for one
// call with a long output; see llm.Timeouts).
func CallTimeouts(t llm.Timeouts) CallOption {
	return func(c *callOptions) { c.timeouts = t }
}
