package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/run"
)

// ErrEnded is returned by Cancel for a run that has already ended.
var ErrEnded = errors.New("the run has already ended")

// Cancel stops a queued or running run. A running step finishes its current
// attempt's I/O but its result is not recorded.
func (e *Engine) Cancel(ctx context.Context, id string) error {
	d, err := e.runDetail(ctx, id, 1)
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

// ErrNotRerunnable is returned by Rerun for a run that has not ended or
// that completed (RerunFrom re-runs one from a step it names).
var ErrNotRerunnable = errors.New("only a failed, cancelled or timed-out run can be re-run")

// Rerun starts a new run that reuses the recorded results of every step
// before the first one that failed (or did not finish), and runs from there.
// It returns the new run's ID.
func (e *Engine) Rerun(ctx context.Context, id string) (string, error) {
	return e.RerunFrom(ctx, id, "")
}

// RerunFrom starts a new run that reuses the recorded results of every
// step of run id before the step from, and runs that step and every one
// after it again. from is the step's place among the run's steps (1 for
// the first, as RunDetail.Steps and the run's history count them) or its
// name (its first step of that name); "" is the first step that did not
// complete, as Rerun. A run that completed can be re-run from a step it
// names; one that has not ended cannot. It returns the new run's ID.
func (e *Engine) RerunFrom(ctx context.Context, id, from string) (string, error) {
	d, err := e.runDetail(ctx, id, 1)
	if err != nil {
		return "", err
	}
	if !d.Status.Ended() || from == "" && d.Status == run.Completed {
		return "", fmt.Errorf("run %s is %s: %w", id, d.Status, ErrNotRerunnable)
	}
	fn, _ := e.function(d.Function)
	// Fork copies the records of every DBOS step before start: begin at the
	// first attempt of the chosen step.
	start := 0
	if from != "" {
		i, err := stepAt(d.Steps, from)
		if err != nil {
			return "", err
		}
		start = d.Steps[i].FirstStepID
	} else if failed := slices.IndexFunc(d.Steps, func(s StepView) bool { return s.Status != stepCompleted }); failed >= 0 {
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

// stepAt finds the step from names among steps: its place, from 1, or
// its name. The error names the parameter as the API does (from_step).
func stepAt(steps []StepView, from string) (int, error) {
	if n, err := strconv.Atoi(from); err == nil {
		if n < 1 || n > len(steps) {
			if len(steps) == 0 {
				return 0, invalid("from_step", "step %d is out of range: the run has no steps", n)
			}
			return 0, invalid("from_step", "step %d is out of range: the run has %d steps (1 to %d)", n, len(steps), len(steps))
		}
		return n - 1, nil
	}
	if err := checkText("from_step", from, 256); err != nil {
		return 0, err
	}
	if i := slices.IndexFunc(steps, func(s StepView) bool { return s.Name == from }); i >= 0 {
		return i, nil
	}
	return 0, invalid("from_step", "the run has no step named %s", quote(from))
}

// waitPoll is how often Wait reads a run's status.
const waitPoll = 20 * time.Millisecond

// Wait blocks until the run ends and returns its status, its times on the
// engine's clock (Config.Now, see appClock), and its output (JSON; nil
// unless it completed). Each check is one read of the columns of the run's
// status row that Wait returns; a run that ended otherwise is read once
// more through DBOS's listing, which decodes its error.
func (e *Engine) Wait(ctx context.Context, id string) (run.Summary, json.RawMessage, error) {
	s, out, err := e.wait(ctx, id)
	if err != nil {
		return s, out, err
	}
	return onAppClock(e.appClock(), s), out, nil
}

// wait is Wait with the run's times as DBOS keeps them.
func (e *Engine) wait(ctx context.Context, id string) (run.Summary, json.RawMessage, error) {
	if err := CheckRunID(id); err != nil {
		return run.Summary{}, nil, err
	}
	c, err := e.client(ctx)
	if err != nil {
		return run.Summary{}, nil, err
	}
	var timer *time.Timer
	for {
		w, out, ok, err := e.readCompleted(ctx, id)
		if err != nil {
			return run.Summary{}, nil, fmt.Errorf("run %s: %w", id, err)
		}
		if ok {
			return summary(w, c.GetApplicationVersion()), out, nil
		}
		if w.Status == "" || endedStatus(w.Status) {
			s, out, done, err := e.readEnded(ctx, c, id)
			if err != nil || done {
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

// readEnded reads run id through DBOS's listing, which decodes a failed
// run's error; done is true once Wait may answer with s and out.
func (e *Engine) readEnded(ctx context.Context, c dbos.Context, id string) (s run.Summary, out json.RawMessage, done bool, err error) {
	ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(id), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(true))
	if err != nil {
		return s, nil, false, fmt.Errorf("run %s: %w", id, err)
	}
	if len(ws) == 0 {
		return s, nil, false, fmt.Errorf("run %s: %w", id, ErrRunNotFound)
	}
	if s = summary(ws[0], c.GetApplicationVersion()); !s.Status.Ended() {
		return s, nil, false, nil
	}
	ready, err := e.endRecorded(ctx, s)
	if err != nil || !ready {
		return run.Summary{}, nil, false, err
	}
	if ws[0].Output != nil {
		out, _, _ = limitJSON(ws[0].Output, 0)
	}
	s, err = e.explainEnd(ctx, s)
	return s, out, true, err
}

// endedStatus reports whether DBOS's status st is an end.
func endedStatus(st dbos.WorkflowStatusType) bool {
	switch st {
	case dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusDelayed, dbos.WorkflowStatusPending:
		return false
	}
	return true
}

// readCompleted reads run id's row in DBOS's table of runs: only the
// columns a summary uses, and the output. ok is true when the run
// completed and its output is in one of DBOS's JSON encodings, and then w
// and out are what Wait returns; otherwise w.Status is the run's status
// ("" when there is no such run). ListWorkflows reads all 34 columns of the
// row, which costs a run waited for more than its own steps do.
func (e *Engine) readCompleted(ctx context.Context, id string) (w dbos.WorkflowStatus, out json.RawMessage, ok bool, err error) {
	p := e.sys.Dialect().SchemaPrefix(e.sys.Schema())
	q := e.sys.RenderSQL(`SELECT status, name, created_at, updated_at, application_version, recovery_attempts,
		started_at_epoch_ms, forked_from, completed_at, serialization,
		COALESCE(%sworkflow_output.output, %sworkflow_status.output)
		FROM %sworkflow_status LEFT JOIN %sworkflow_output USING (workflow_uuid)
		WHERE workflow_uuid = $1`, p, p, p, p)
	var created, updated int64
	var version, forked, ser, output *string
	var started, completed *int64
	err = e.sys.Pool().QueryRow(ctx, q, id).Scan(&w.Status, &w.Name, &created, &updated, &version, &w.Attempts,
		&started, &forked, &completed, &ser, &output)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, nil, false, nil
	}
	if err != nil {
		return w, nil, false, err
	}
	if w.Status != dbos.WorkflowStatusSuccess {
		return w, nil, false, nil
	}
	if output != nil {
		switch deref(ser) {
		case "", "DBOS_JSON":
			if *output != nilMarker {
				b, err := base64.StdEncoding.DecodeString(*output)
				if err != nil {
					return w, nil, false, nil // DBOS's read says what is wrong
				}
				out = b
			}
		case dbos.PortableSerializerName:
			out = json.RawMessage(*output)
		default:
			return w, nil, false, nil
		}
		if out != nil && !json.Valid(out) {
			return w, nil, false, nil
		}
	}
	w.ID = id
	w.CreatedAt = time.UnixMilli(created)
	w.UpdatedAt = time.UnixMilli(updated)
	w.ApplicationVersion = deref(version)
	w.ForkedFrom = deref(forked)
	if started != nil {
		w.StartedAt = time.UnixMilli(*started)
	}
	if completed != nil {
		w.CompletedAt = time.UnixMilli(*completed)
	}
	return w, out, true, nil
}

// nilMarker is how DBOS's JSON encoding stores a nil output.
const nilMarker = "__DBOS_NIL"

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
