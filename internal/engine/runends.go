package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/run"
)

// runEnd is why a run ended without finishing, as sluice_run_ends keeps it.
type runEnd struct {
	status       run.State
	reason, step string
	attempt      int
	started      time.Time // zero: not known, or never started
}

// noteEnd records why a run stopped when its handler returns because the
// run's context ended: the deadline passed (timed_out) or the run was
// cancelled (the step it was in completes the record Cancel wrote). A
// shutdown records nothing: the run resumes at the next start.
func (e *Engine) noteEnd(r *Run) {
	if r.dctx.Err() == nil {
		return
	}
	cause := context.Cause(r.dctx)
	var end runEnd
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		end = runEnd{status: run.TimedOut, reason: fmt.Sprintf("run deadline of %s passed", r.fn.Timeout)}
	case errors.Is(cause, context.Canceled):
		end = runEnd{status: run.Cancelled, reason: "cancelled"}
	default:
		return // DBOS is shutting down
	}
	end.step, end.attempt, end.started = r.step, r.attempt, r.started
	if d, ok := r.dctx.Deadline(); ok && r.fn.Timeout > 0 {
		end.started = d.Add(-r.fn.Timeout) // DBOS set the deadline when the run first started
	}
	switch {
	case r.step != "":
		end.reason += fmt.Sprintf(" in step %s, attempt %d", r.step, r.attempt)
		if r.lastErr != "" {
			end.reason += " (last failed attempt: " + r.lastErr + ")"
		}
	case r.done != "":
		end.reason += " after step " + r.done
	default:
		end.reason += " before its first step"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A cancel's own record (written by Cancel) is completed with the step;
	// a deadline's is written here.
	_, err := e.db.exec(ctx, `INSERT INTO sluice_run_ends (run_id, status, reason, step, attempt, started_at, ended_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (run_id) DO UPDATE SET reason = excluded.reason, step = excluded.step, attempt = excluded.attempt,
			started_at = CASE WHEN sluice_run_ends.started_at = 0 THEN excluded.started_at ELSE sluice_run_ends.started_at END
		WHERE sluice_run_ends.step = ''`,
		r.id, end.status, end.reason, end.step, end.attempt, unixMilli(end.started), e.cfg.Now().UnixMilli())
	if err != nil {
		e.cfg.Logger.Warn("sluice: record why a run ended", "run", r.id, "err", err)
	}
}

// noteCancel records that a run was cancelled on request; the run's handler
// adds the step it was in when it stops.
func (e *Engine) noteCancel(ctx context.Context, id string, started time.Time) error {
	_, err := e.db.exec(ctx, `INSERT INTO sluice_run_ends (run_id, status, reason, step, attempt, started_at, ended_at)
		VALUES ($1, $2, $3, '', 0, $4, $5) ON CONFLICT (run_id) DO NOTHING`,
		id, run.Cancelled, "cancelled on request", unixMilli(started), e.cfg.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("record the cancel of run %s: %w", id, err)
	}
	return nil
}

// runEnds reads the records of the given runs.
func (e *Engine) runEnds(ctx context.Context, ids []string) (map[string]runEnd, error) {
	out := make(map[string]runEnd, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	marks := make([]string, len(ids))
	for i, id := range ids {
		args[i] = id
		marks[i] = fmt.Sprintf("$%d", i+1)
	}
	err := e.db.query(ctx, `SELECT run_id, status, reason, step, attempt, started_at FROM sluice_run_ends WHERE run_id IN (`+strings.Join(marks, ", ")+`)`, args, func(s scanner) error {
		var id string
		var end runEnd
		var attempt, started int64
		if err := s.Scan(&id, &end.status, &end.reason, &end.step, &attempt, &started); err != nil {
			return err
		}
		end.attempt = int(attempt)
		if started > 0 {
			end.started = time.UnixMilli(started).UTC()
		}
		out[id] = end
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read why runs ended: %w", err)
	}
	return out, nil
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
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
	ends, err := e.runEnds(ctx, ids)
	if err != nil {
		return err
	}
	for i := range out {
		s := &out[i]
		if s.Status != run.Cancelled && s.Status != run.TimedOut {
			continue
		}
		if end, ok := ends[s.ID]; ok {
			s.Error, s.Step = end.reason, end.step
			if s.StartedAt.IsZero() {
				s.StartedAt = end.started
			}
		}
	}
	return nil
}
