package engine

import (
	"context"
	"errors"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/run"
)

// Run is one execution of a function, passed to its handler. It is a
// context.Context that ends when the run is cancelled or times out.
type Run struct {
	dctx  dbos.Context
	fn    *Function
	event Event
	id    string

	// Where the run is, for the record of a run the deadline or a cancel
	// stops: the step being tried (empty between steps), its attempt, the
	// last failed attempt's error, and the last step that finished.
	step, lastErr, done string
	attempt             int
	started             time.Time // when this process began the run
	owner               *string   // DBOS's token of this execution; nil if not known
}

var _ context.Context = (*Run)(nil)

func (r *Run) Deadline() (time.Time, bool) { return r.dctx.Deadline() }
func (r *Run) Done() <-chan struct{}       { return r.dctx.Done() }
func (r *Run) Err() error                  { return r.dctx.Err() }
func (r *Run) Value(key any) any           { return r.dctx.Value(key) }

// ID is the run's ID (the DBOS workflow ID).
func (r *Run) ID() string { return r.id }

// Function is the function this run executes.
func (r *Run) Function() *Function { return r.fn }

// Event is the event that started the run.
func (r *Run) Event() Event { return r.event }

// Engine is the engine running the run.
func (r *Run) Engine() *Engine { return r.fn.e }

// Step runs fn as a durable step named name: once it has succeeded, its
// result is recorded and a replay after a crash returns the record instead
// of calling fn again. A failing attempt is retried by the class of its
// error (see the package comment).
func Step[R any](r *Run, name string, fn func(context.Context) (R, error)) (R, error) {
	return retry(r, name, func(attempt int) (R, error) {
		var zero R
		// Counted from before DBOS looks for the step's record until after
		// it wrote it: a stop that waited only for fn could end the run's
		// context between fn's return and the record, and DBOS records
		// nothing for a step whose run's context ended.
		t, ok := r.fn.e.stepBegin()
		if !ok {
			return zero, r.paused(r.dctx)
		}
		defer t.done()
		return dbos.RunAsStep(r.dctx, func(ctx context.Context) (R, error) {
			v, err := fn(withGuard(ctx, r))
			switch {
			case errors.Is(err, errDraining):
				t.done() // no call in flight: the stop need not wait for it
				return zero, r.paused(ctx)
			case errors.Is(err, ErrNotOwner):
				// Not an attempt of this run's: DBOS refuses to record
				// it (the record is fenced on the owner), and the run
				// stops here.
				return zero, err
			}
			return v, r.attempted(name, attempt, err)
		}, dbos.WithStepName(name))
	})
}

// paused is what a step that must not run returns while the engine stops:
// it waits for DBOS's shutdown to end the run's context, so that DBOS
// records nothing for the step, and the run resumes with it.
func (r *Run) paused(ctx context.Context) error {
	<-ctx.Done()
	return context.Cause(ctx)
}

// Transaction runs fn in a transaction on the engine's database, committed
// together with the step's record: the writes happen exactly once, even if
// the process dies right after them.
func Transaction[R any](r *Run, name string, fn func(ctx context.Context, tx dbos.Tx) (R, error)) (R, error) {
	return retry(r, name, func(attempt int) (R, error) {
		// Counted until the transaction, with the step's record, has
		// committed (see Step); one the stop refuses never begins, so no
		// transaction stays open.
		t, ok := r.fn.e.stepBegin()
		if !ok {
			var zero R
			return zero, r.paused(r.dctx)
		}
		defer t.done()
		return dbos.RunAsTransaction(r.dctx, r.fn.e.ds, func(ctx context.Context, tx dbos.Tx) (R, error) {
			v, err := fn(ctx, tx)
			return v, r.attempted(name, attempt, err)
		}, dbos.WithStepName(name))
	})
}

// Sleep pauses the run durably for d of the engine's clock (d divided by
// Config.Speed of wall time): a restart during the sleep sleeps only what
// remains.
func Sleep(r *Run, d time.Duration) error {
	_, err := dbos.Sleep(r.dctx, r.fn.e.Real(d))
	return err
}

// attempted counts an executed attempt of step name (a replay of a
// recorded one executes nothing) and returns its error as the run records
// it: nil when it succeeded.
func (r *Run) attempted(name string, attempt int, err error) error {
	if err == nil {
		r.fn.e.cfg.Metrics.StepAttempt(r.fn.ID, nil)
		return nil
	}
	se := r.attemptError(name, attempt, err)
	r.fn.e.cfg.Metrics.StepAttempt(r.fn.ID, se)
	return se
}

func (r *Run) attemptError(name string, attempt int, err error) *run.StepError {
	c, d := classify(err, r.fn.e.classify)
	se := run.StepError{Step: name, Attempt: attempt, Class: c, RetryAfter: d, Retries: r.fn.retries}
	if q, ok := errors.AsType[*quotaWait](err); ok {
		se.WaitKind, se.WaitOn = q.kind, q.on
	}
	return run.NewStepError(se, err)
}

// retry calls once for attempt 1, 2, … until it succeeds, fails for good,
// or runs out of retries, sleeping durably in between. Every decision reads
// only what the attempts recorded, so a replay takes the same path.
func retry[R any](r *Run, name string, once func(attempt int) (R, error)) (R, error) {
	var zero R
	for attempt := 1; ; {
		r.step, r.attempt = name, attempt
		v, err := once(attempt)
		if err == nil {
			r.step, r.lastErr, r.done = "", "", name
			return v, nil
		}
		var se *run.StepError
		if !errors.As(err, &se) {
			return zero, err // cancelled, timed out, lost ownership: not a step failure
		}
		if r.dctx.Err() == nil { // an attempt the run's end cut short says nothing new
			r.lastErr = se.Message
		}
		var wait time.Duration
		switch se.Class {
		case run.Fatal:
			se.Final = true
			return zero, se
		case run.QuotaWait:
			wait = se.RetryAfter
		default:
			if attempt > r.fn.retries {
				se.Final = true
				return zero, se
			}
			wait = se.RetryAfter
			if se.Class == run.Retry || wait <= 0 {
				wait = r.fn.e.backoff(attempt)
			}
			attempt++
		}
		if _, err := dbos.Sleep(r.dctx, max(r.fn.e.Real(wait), time.Millisecond)); err != nil {
			return zero, err
		}
	}
}
