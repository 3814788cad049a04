package engine

import (
	"context"
	"errors"
	"fmt"
)

// A step's guard tells the code inside a step what the engine knows and the
// step cannot see from its context: that the engine stops taking work (a
// wait for quota should give up then: it is not a call in flight), and
// whether this process still owns the run (a call for a run that another
// process now executes would be billed twice).

// ErrNotOwner is returned by a step's call for a run that this process no
// longer owns: another process took it over (adoption of a process whose
// executor lock was free, or a resume by a person) and executes it. The run
// stops here; its new owner goes on from its last recorded step.
var ErrNotOwner = errors.New("this process no longer owns the run: another one executes it")

// errDraining is what a wait inside a step returns when the engine stops
// taking work: the step ends unrecorded, and the run resumes with it.
var errDraining = errors.New("the engine is stopping")

type guardKey struct{}

// guard is what a step's context carries for the code inside it.
type guard struct {
	drain <-chan struct{}
	owned func(ctx context.Context) error
}

func withGuard(ctx context.Context, r *Run) context.Context {
	return context.WithValue(ctx, guardKey{}, &guard{drain: r.fn.e.drain, owned: r.owned})
}

func guardOf(ctx context.Context) *guard {
	g, _ := ctx.Value(guardKey{}).(*guard)
	return g
}

// drainContext returns a context that also ends, with errDraining as its
// cause, when the engine running the step of ctx stops taking work: for a
// wait that should give up then. release frees it. Outside a step it is ctx
// itself.
func drainContext(ctx context.Context) (c context.Context, release func()) {
	g := guardOf(ctx)
	if g == nil {
		return ctx, func() {}
	}
	c, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-g.drain:
			cancel(errDraining)
		case <-done:
		}
	}()
	return c, func() { close(done); cancel(nil) }
}

// beforeSend confirms, right before a provider call leaves, that the
// process still owns the run of the step of ctx.
func beforeSend(ctx context.Context) error {
	if g := guardOf(ctx); g != nil && g.owned != nil {
		return g.owned(ctx)
	}
	return nil
}

// owned compares the run's owner now with the one this execution started
// under: DBOS records each execution's token in the run's row and fences
// every record of a step on it, so a different token means another
// execution took the run.
func (r *Run) owned(ctx context.Context) error {
	if r.owner == nil || r.fn.e.sys == nil {
		return nil // not known when the run began: nothing to compare
	}
	now, err := r.fn.e.sys.GetWorkflowOwner(ctx, r.id)
	if err != nil {
		return fmt.Errorf("confirm the run's owner before a call: %w", err)
	}
	if now == nil || *now != *r.owner {
		return ErrNotOwner
	}
	return nil
}

// ownerOf reads the token of the execution that owns run id now: called as
// the run begins, it is this execution's. nil when it cannot be read (the
// run then calls without the check). The runs that begin together are read
// together (ownerReads).
func (e *Engine) ownerOf(id string) *string {
	if e.sys == nil {
		return nil
	}
	owner, err := e.owners.get(id)
	if err != nil {
		e.cfg.Logger.Warn("sluice: cannot read a run's owner: its calls go without the ownership check", "run", id, "err", err)
		return nil
	}
	return owner
}
