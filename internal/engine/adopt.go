package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/dbos-inc/dbos-transact-golang/dbos/internals"
)

// Adoption: DBOS resumes a run only in a process with the executor ID that
// started it, so the runs of a process that died and never comes back would
// wait forever. With Config.AdoptEvery, every process looks for runs left
// pending by executors that no longer run — whose executor lock (see
// Launch) nobody holds — and hands them back to their queues, where any
// live process starts them again from their last recorded step.

// adopt looks for dead executors' runs every e.cfg.AdoptEvery (of the
// engine's clock) until ctx ends.
func (e *Engine) adopt(ctx context.Context) {
	t := time.NewTicker(max(e.Real(e.cfg.AdoptEvery), time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := e.adoptOnce(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("sluice: cannot look for the runs of processes that stopped", "err", err)
		}
	}
}

// adoptOnce hands the pending runs of every other executor whose lock it
// can take back to their queues, holding that lock meanwhile (so the
// executor cannot start again and resume them at the same time).
func (e *Engine) adoptOnce(ctx context.Context) error {
	pending, err := dbos.ListWorkflows(e.dctx, dbos.WithFilterStatus(dbos.WorkflowStatusPending),
		dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(false))
	if err != nil {
		return err
	}
	self := e.dctx.GetExecutorID()
	var executors []string
	for _, w := range pending {
		if w.ExecutorID != "" && w.ExecutorID != self && !slices.Contains(executors, w.ExecutorID) {
			executors = append(executors, w.ExecutorID)
		}
	}
	slices.Sort(executors)
	rt, err := internals.RuntimeOf(e.dctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ex := range executors {
		lw, err := e.lockExecutor(ctx, ex, 1)
		if errors.Is(err, ErrExecutorRunning) {
			continue // it runs: its runs are its own
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		handles, err := rt.RecoverPendingWorkflows([]string{ex})
		lw.release()
		if err != nil {
			errs = append(errs, fmt.Errorf("hand back the runs of executor %q: %w", ex, err))
			continue
		}
		if len(handles) > 0 {
			e.cfg.Logger.Warn("sluice: handed the unfinished runs of a process that stopped back to their queues",
				"executor", ex, "runs", len(handles), "by", self)
		}
	}
	return errors.Join(errs...)
}
