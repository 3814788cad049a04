package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/run"
)

// ErrEnded is returned by Cancel for a run that has already ended.
var ErrEnded = errors.New("the run has already ended")

// Cancel stops a queued or running run. A running step finishes its current
// attempt's I/O but its result is not recorded.
func (e *Engine) Cancel(ctx context.Context, id string) error {
	d, err := e.RunDetail(ctx, id, 1)
	if err != nil {
		return err
	}
	if d.Status.Ended() {
		return fmt.Errorf("run %s is %s: %w", id, d.Status, ErrEnded)
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	return e.cancelRun(ctx, c, id, d.StartedAt)
}

// cancelRun cancels the run id, which started at started, and its parts,
// and records that it was cancelled on request. A run that has ended
// stays as it was.
func (e *Engine) cancelRun(ctx context.Context, c dbos.Context, id string, started time.Time) error {
	if err := e.noteCancel(ctx, id, started); err != nil {
		return err
	}
	if err := dbos.CancelWorkflow(c, id, dbos.WithCancelChildren()); err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	return nil
}

// ErrNotRerunnable is returned by Rerun for a run that has not ended.
var ErrNotRerunnable = errors.New("only a failed, cancelled or timed-out run can be re-run")

// Rerun starts a new run that reuses the recorded results of every step
// before the first one that failed (or did not finish), and runs from there.
// It returns the new run's ID.
func (e *Engine) Rerun(ctx context.Context, id string) (string, error) {
	d, err := e.RunDetail(ctx, id, 1)
	if err != nil {
		return "", err
	}
	if d.Status != run.Failed && d.Status != run.Cancelled && d.Status != run.TimedOut {
		return "", fmt.Errorf("run %s is %s: %w", id, d.Status, ErrNotRerunnable)
	}
	fn, _ := e.function(d.Function)
	// Fork copies the records of every DBOS step before start: begin at the
	// first attempt of the first step that did not complete.
	start := 0
	if failed := slices.IndexFunc(d.Steps, func(s StepView) bool { return s.Status != stepCompleted }); failed >= 0 {
		start = d.Steps[failed].FirstStepID
	} else if n := len(d.Steps); n > 0 {
		start = d.Steps[n-1].FirstStepID + d.Steps[n-1].Attempts
	}
	newID := fmt.Sprintf("%s:rerun:%s", strings.SplitN(id, ":rerun:", 2)[0], newID()[:8])
	in := dbos.ForkWorkflowInput{OriginalWorkflowID: id, ForkedWorkflowID: newID, StartStep: uint(start), QueueName: fn.queueName()}
	if pk := fn.partitionKey(); pk != "" && d.Event != nil {
		v, ok := decodeEvent(*d.Event).field(pk)
		if !ok || v == "" {
			v = "-"
		}
		in.QueuePartitionKey = v
	}
	c, err := e.client(ctx)
	if err != nil {
		return "", err
	}
	h, err := dbos.ForkWorkflow[json.RawMessage](c, in)
	if err != nil {
		return "", fmt.Errorf("re-run %s: %w", id, err)
	}
	return h.GetWorkflowID(), nil
}

// waitPoll is how often Wait reads a run's status.
const waitPoll = 20 * time.Millisecond

// Wait blocks until the run ends and returns its status and its output
// (JSON; nil unless it completed). Each check is one read of the run's
// status row, which also holds what Wait returns.
func (e *Engine) Wait(ctx context.Context, id string) (run.Summary, json.RawMessage, error) {
	if err := CheckRunID(id); err != nil {
		return run.Summary{}, nil, err
	}
	c, err := e.client(ctx)
	if err != nil {
		return run.Summary{}, nil, err
	}
	var timer *time.Timer
	for {
		ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(id), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(true))
		if err != nil {
			return run.Summary{}, nil, fmt.Errorf("run %s: %w", id, err)
		}
		if len(ws) == 0 {
			return run.Summary{}, nil, fmt.Errorf("run %s: %w", id, ErrRunNotFound)
		}
		if s := summary(ws[0], c.GetApplicationVersion()); s.Status.Ended() {
			ready, err := e.endRecorded(ctx, s)
			if err != nil {
				return run.Summary{}, nil, err
			}
			if ready {
				var out json.RawMessage
				if ws[0].Output != nil {
					out, _, _ = limitJSON(ws[0].Output, 0)
				}
				s, err := e.explainEnd(ctx, s)
				return s, out, err
			}
		}
		if timer == nil {
			timer = time.NewTimer(waitPoll)
			defer timer.Stop()
		} else {
			timer.Reset(waitPoll)
		}
		select {
		case <-ctx.Done():
			return run.Summary{}, nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// endGrace is how long after a run timed out Wait waits for the record
// of why. DBOS marks a run cancelled at its deadline from a process of its
// own, while the run's handler is still writing which step it was in; a
// run no process ran when its deadline passed never gets a record.
const endGrace = 3 * time.Second

// endRecorded reports whether Wait may answer for the ended run s: its
// end is recorded, or needs no record, or the record is not coming.
func (e *Engine) endRecorded(ctx context.Context, s run.Summary) (bool, error) {
	if s.Status != run.TimedOut || time.Since(s.EndedAt) >= endGrace { // DBOS times runs by the wall clock
		return true, nil
	}
	ends, err := e.st.RunEnds(ctx, []string{s.ID})
	if err != nil {
		return false, fmt.Errorf("run %s: %w", s.ID, err)
	}
	_, ok := ends[s.ID]
	return ok, nil
}
