package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/run"
)

// endRun records and counts how run r ended, its handler having returned
// err (nil when it completed; see endOf). A run that has not ended here
// records and counts nothing.
func (e *Engine) endRun(r *Run, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	state, ok := e.endOf(ctx, r, err)
	if !ok {
		return
	}
	if state != run.Completed {
		e.noteEnd(ctx, r, state, err)
	}
	e.cfg.Metrics.RunFinished(r.fn.ID, state)
}

// endOf says how run r ended, its handler having returned err (nil when it
// completed). ok is false when the run has not ended here: DBOS is shutting
// down (the run resumes at the next start), or another execution has taken
// the run over and goes on with it.
//
// A handler's error is not always the run's failure. A cancel on request
// does not end the run's context: DBOS marks the run cancelled and takes it
// from this execution, and the run learns of it only when DBOS refuses its
// next record — the step in flight's, if it ends after the cancel (the run
// "is no longer owned by this execution"), or the next step's (the run was
// cancelled) — or when the check before a provider call finds it has no
// owner (ErrNotOwner). A run that another process took over meets the same
// errors. So while the context runs, DBOS's record of the run decides: it
// was cancelled (on request, or by its deadline before DBOS ended the
// context), it is still this execution's (the error is its failure), or it
// is another's.
func (e *Engine) endOf(ctx context.Context, r *Run, err error) (run.State, bool) {
	if err == nil {
		return run.Completed, true
	}
	if state, ok := stoppedBy(r); ok {
		return state, true
	}
	if r.dctx.Err() != nil {
		return "", false
	}
	state, ok, rerr := e.stateNow(ctx, r)
	if rerr != nil {
		e.cfg.Logger.Warn("sluice: cannot read how a run ended", "run", r.id, "err", rerr)
		// Without DBOS's word, an error saying that this execution lost
		// the run is no failure of the run's own.
		return run.Failed, !lostRun(err)
	}
	return state, ok
}

// stateNow reads from DBOS's record of run r, whose handler returned an
// error while its context ran, how the run ended (see endOf): ok is false
// when it is no longer this execution's.
func (e *Engine) stateNow(ctx context.Context, r *Run) (state run.State, ok bool, err error) {
	c, err := e.client(ctx)
	if err != nil {
		return "", false, err
	}
	ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(r.id), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(false))
	switch {
	case err != nil:
		return "", false, fmt.Errorf("read run %s: %w", r.id, err)
	case len(ws) == 0:
		return "", false, fmt.Errorf("read run %s: not found", r.id)
	}
	switch w := ws[0]; {
	case w.Status == dbos.WorkflowStatusCancelled && timedOut(w):
		return run.TimedOut, true, nil
	case w.Status == dbos.WorkflowStatusCancelled:
		return run.Cancelled, true, nil
	case w.Status != dbos.WorkflowStatusPending:
		return "", false, nil // resumed, or ended by the execution that took it over
	}
	switch err := r.owned(ctx); {
	case errors.Is(err, ErrNotOwner):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return run.Failed, true, nil
}

// lostRun reports whether err says that this execution no longer owns its
// run: DBOS refused a record (the run was cancelled, or another execution
// holds it) or the check before a provider call found another owner.
func lostRun(err error) bool {
	return errors.Is(err, ErrNotOwner) || errors.Is(err, dbos.ErrConflictingWorkflowID) || errors.Is(err, dbos.ErrWorkflowCancelled)
}

// noteEnd records why run r ended in state, its handler having returned
// err: a failure's text, kept so that runs can be searched by it
// (RunFilter.Reason); or the deadline that passed (timed_out) or the
// cancel, with the step the run was in (completing the record of a cancel
// on request that noteCancel wrote).
func (e *Engine) noteEnd(ctx context.Context, r *Run, state run.State, err error) {
	if state == run.Failed {
		e.recordEnd(ctx, r, store.RunEnd{RunID: r.id, Status: string(run.Failed), Reason: cutText(err.Error(), maxReasonBytes),
			Step: r.step, Attempt: r.attempt, StartedAt: r.started, EndedAt: time.Now()})
		return
	}
	end := store.RunEnd{Status: string(state), Reason: fmt.Sprintf("run deadline of %s passed", r.fn.Timeout)}
	if state == run.Cancelled {
		end.Reason = e.cancelReason(ctx, r.id)
	}
	end.RunID, end.Step, end.Attempt, end.StartedAt = r.id, r.step, r.attempt, r.started
	if d, ok := r.dctx.Deadline(); ok && r.fn.Timeout > 0 {
		end.StartedAt = d.Add(-r.fn.Timeout) // DBOS set the deadline when the run first started
	}
	switch {
	case r.step != "":
		end.Reason += fmt.Sprintf(" in step %s, attempt %d", r.step, r.attempt)
		if r.lastErr != "" {
			end.Reason += " (last failed attempt: " + r.lastErr + ")"
		}
	case r.done != "":
		end.Reason += " after step " + r.done
	default:
		end.Reason += " before its first step"
	}
	end.EndedAt = time.Now() // as DBOS times runs: by the wall clock
	// A cancel's own record (written by Cancel) is completed with the step;
	// a deadline's is written here.
	e.recordEnd(ctx, r, end)
}

// cancelReason is how the record of the cancelled run id begins: the
// reason that a cancel on request recorded (noteCancel, before DBOS
// cancelled the run), which the run completes with where it was, or
// "cancelled" for a run cancelled otherwise (through DBOS itself).
func (e *Engine) cancelReason(ctx context.Context, id string) string {
	ends, err := e.st.RunEnds(ctx, []string{id})
	if c, ok := ends[id]; err == nil && ok && c.Step == "" && c.Status == string(run.Cancelled) {
		return c.Reason
	}
	return "cancelled"
}

// recordEnd writes end, the record of why run r ended.
func (e *Engine) recordEnd(ctx context.Context, r *Run, end store.RunEnd) {
	if err := e.st.RecordRunEnd(ctx, end); err != nil {
		e.cfg.Logger.Warn("sluice: record why a run ended", "run", r.id, "err", err)
	}
}

// maxReasonBytes bounds the failure a run's end record keeps.
const maxReasonBytes = 4096

// cutText is s cut to at most n bytes, at a character's start.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// stoppedBy says how a run whose context ended was stopped: timed out by
// its deadline or cancelled. It is false while the context runs, and when
// DBOS is shutting down: the run resumes at the next start.
func stoppedBy(r *Run) (run.State, bool) {
	if r.dctx.Err() == nil {
		return "", false
	}
	cause := context.Cause(r.dctx)
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		return run.TimedOut, true
	case errors.Is(cause, context.Canceled):
		return run.Cancelled, true
	}
	return "", false
}

// noteCancel records that a run was cancelled on request; the run's handler
// adds the step it was in when it stops.
func (e *Engine) noteCancel(ctx context.Context, id string, started time.Time) error {
	return e.st.RecordCancel(ctx, store.RunEnd{RunID: id, Status: string(run.Cancelled), Reason: "cancelled on request",
		StartedAt: started, EndedAt: time.Now()})
}

// timedOut reports whether DBOS's cancelled run w was stopped by its
// deadline: it ended at or after it.
func timedOut(w dbos.WorkflowStatus) bool {
	if w.Status != dbos.WorkflowStatusCancelled || w.Deadline.IsZero() {
		return false
	}
	return !cmpTime(w.CompletedAt, w.UpdatedAt).Before(w.Deadline)
}

// explainEnd is explainEnds for one run.
func (e *Engine) explainEnd(ctx context.Context, s run.Summary) (run.Summary, error) {
	one := []run.Summary{s}
	err := e.explainEnds(ctx, one)
	return one[0], err
}

// explainEnds fills the error and step of the cancelled and timed-out runs
// among out from their records; a run the deadline stopped while no process
// ran it has no record and says only that.
func (e *Engine) explainEnds(ctx context.Context, out []run.Summary) error {
	var ids []string
	for _, s := range out {
		if s.Status == run.Cancelled || s.Status == run.TimedOut {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	ends, err := e.st.RunEnds(ctx, ids)
	if err != nil {
		return err
	}
	for i := range out {
		s := &out[i]
		if s.Status != run.Cancelled && s.Status != run.TimedOut {
			continue
		}
		if end, ok := ends[s.ID]; ok {
			s.Error, s.Step = end.Reason, end.Step
			if s.StartedAt.IsZero() {
				s.StartedAt = end.StartedAt
			}
		}
	}
	return nil
}

// The sweep of ends no process saw (recordMissedEnds): how many runs it
// reads at a time, and how often it looks again after the launch's sweep.
const (
	missedEndsBatch = 500
	missedEndsEvery = 5 * time.Minute
)

// sweepMissedEnds runs recordMissedEnds at launch and then every
// missedEndsEvery of the wall clock, until ctx ends.
func (e *Engine) sweepMissedEnds(ctx context.Context) {
	t := time.NewTicker(missedEndsEvery)
	defer t.Stop()
	for {
		if _, err := e.recordMissedEnds(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("sluice: cannot record why earlier runs ended", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recordMissedEnds records why a run ended for the runs of the registered
// functions that ended without a record in sluice_run_ends, which a
// search by reason reads: runs that failed under a version of sluice that
// recorded only timed-out and cancelled runs, and runs that DBOS stopped
// with no process of theirs running (a queued run whose deadline passed,
// a cancel through DBOS itself). A failed run's reason is its error as
// DBOS recorded it; a timed-out one's names its deadline, as the run
// listing does; a cancelled one's says only that. Each record has no step,
// so a process that sees its run stop later completes it as it completes
// a cancel's. It returns how many runs it recorded.
func (e *Engine) recordMissedEnds(ctx context.Context) (int, error) {
	names := e.functionIDs()
	if len(names) == 0 {
		return 0, nil
	}
	c, err := e.client(ctx)
	if err != nil {
		return 0, err
	}
	var args params
	q := e.sys.RenderSQL(`SELECT w.workflow_uuid FROM %sworkflow_status w WHERE w.status IN (%s) AND w.name IN (%s)
		AND NOT EXISTS (SELECT 1 FROM sluice_run_ends r WHERE r.run_id = w.workflow_uuid) LIMIT %d`,
		e.sys.Dialect().SchemaPrefix(e.sys.Schema()), statusLiterals(run.Failed, run.Cancelled), args.list(names), missedEndsBatch)
	recorded := 0
	for {
		ids, err := e.queryIDs(ctx, q, args...)
		if err != nil {
			return recorded, fmt.Errorf("find runs that ended unrecorded: %w", err)
		}
		if len(ids) == 0 {
			return recorded, nil
		}
		ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(ids...), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(true))
		if err != nil {
			return recorded, fmt.Errorf("read runs that ended unrecorded: %w", err)
		}
		for _, w := range ws {
			end := store.RunEnd{RunID: w.ID, Status: string(run.Cancelled), Reason: "cancelled",
				StartedAt: w.StartedAt, EndedAt: cmpTime(w.CompletedAt, w.UpdatedAt)}
			switch {
			case w.Status != dbos.WorkflowStatusCancelled:
				end.Status, end.Reason = string(run.Failed), "failed"
				switch {
				case w.Error != nil:
					end.Reason = cutText(w.Error.Error(), maxReasonBytes)
				case w.Status == dbos.WorkflowStatusMaxRecoveryAttemptsExceeded:
					end.Reason = fmt.Sprintf("failed: started %d times, DBOS's most recovery attempts", w.Attempts)
				}
			case timedOut(w):
				end.Status, end.Reason = string(run.TimedOut), fmt.Sprintf("run deadline of %s passed", w.Timeout)
				end.StartedAt = w.Deadline.Add(-w.Timeout)
			}
			if err := e.st.RecordRunEnd(ctx, end); err != nil {
				return recorded, fmt.Errorf("record why run %s ended: %w", w.ID, err)
			}
			recorded++
		}
		if len(ws) < len(ids) {
			// A run gone between the two reads (DBOS deletes none today):
			// stop rather than find it again and again.
			return recorded, nil
		}
	}
}
