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

// noteEnd records why a run stopped when its handler returned err: its
// failure, kept so that runs can be searched by its text (RunFilter.
// Reason), or, when the run's context ended, the deadline that passed
// (timed_out) or the cancel (the step it was in completes the record
// Cancel wrote). A shutdown records nothing: the run resumes at the next
// start.
func (e *Engine) noteEnd(r *Run, err error) {
	state, ok := stoppedBy(r)
	if !ok {
		if r.dctx.Err() == nil && !errors.Is(err, ErrNotOwner) {
			e.recordEnd(r, store.RunEnd{RunID: r.id, Status: string(run.Failed), Reason: cutText(err.Error(), maxReasonBytes),
				Step: r.step, Attempt: r.attempt, StartedAt: r.started, EndedAt: time.Now()})
		}
		return
	}
	end := store.RunEnd{Status: string(state), Reason: "cancelled"}
	if state == run.TimedOut {
		end.Reason = fmt.Sprintf("run deadline of %s passed", r.fn.Timeout)
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
	e.recordEnd(r, end)
}

// recordEnd writes end, the record of why run r ended.
func (e *Engine) recordEnd(r *Run, end store.RunEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
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

// countEnd counts in Config.Metrics how run r ended, its handler having
// returned err: completed, failed, timed out or cancelled. A run stopped
// by a shutdown has not ended: it resumes at the next start.
func (e *Engine) countEnd(r *Run, err error) {
	state := run.Completed
	if err != nil {
		var stopped bool
		if state, stopped = stoppedBy(r); !stopped {
			if r.dctx.Err() != nil {
				return
			}
			state = run.Failed
		}
	}
	e.cfg.Metrics.RunFinished(r.fn.ID, state)
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
