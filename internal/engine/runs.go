package engine

import (
	"cmp"
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

// stateOf is the state of DBOS's run w in a process of version current:
// an unfinished run of another version is neither queued nor running here.
func stateOf(w dbos.WorkflowStatus, current string) run.State {
	switch w.Status {
	case dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusDelayed, dbos.WorkflowStatusPending:
		switch {
		case w.ApplicationVersion != current:
			return run.OtherVersion
		case w.Status == dbos.WorkflowStatusPending:
			return run.Running
		}
		return run.Queued
	case dbos.WorkflowStatusSuccess:
		return run.Completed
	case dbos.WorkflowStatusCancelled:
		return run.Cancelled
	default:
		return run.Failed
	}
}

// RunStates are the states Runs filters by, in the order the API and the
// dashboard list them.
var RunStates = []run.State{run.Queued, run.Running, run.OtherVersion, run.Completed, run.Failed, run.Cancelled, run.TimedOut}

// StatesText lists RunStates for a message: "queued, running, …".
func StatesText() string {
	names := make([]string, len(RunStates))
	for i, s := range RunStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func dbosStatuses(s run.State) ([]dbos.WorkflowStatusType, error) {
	switch s {
	case "":
		return nil, nil
	case run.Queued:
		return []dbos.WorkflowStatusType{dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusDelayed}, nil
	case run.Running:
		return []dbos.WorkflowStatusType{dbos.WorkflowStatusPending}, nil
	case run.OtherVersion:
		return unfinished, nil
	case run.Completed:
		return []dbos.WorkflowStatusType{dbos.WorkflowStatusSuccess}, nil
	case run.Failed:
		return []dbos.WorkflowStatusType{dbos.WorkflowStatusError, dbos.WorkflowStatusMaxRecoveryAttemptsExceeded}, nil
	case run.Cancelled, run.TimedOut:
		return []dbos.WorkflowStatusType{dbos.WorkflowStatusCancelled}, nil
	}
	return nil, invalid("status", "%s is not one of %s", quote(string(s)), StatesText())
}

// RunFilter selects runs. Zero fields select everything.
type RunFilter struct {
	Function string
	Status   run.State
	Since    time.Time
	Limit    int // default 100
}

// Runs lists runs, newest first.
func (e *Engine) Runs(ctx context.Context, f RunFilter) ([]run.Summary, error) {
	statuses, err := dbosStatuses(f.Status)
	if err != nil {
		return nil, err
	}
	names := []string{f.Function}
	if f.Function == "" {
		names = names[:0]
		for _, fn := range e.Functions() {
			names = append(names, fn.ID)
		}
	} else if _, ok := e.function(f.Function); !ok {
		return nil, invalid("function", "%s is not a registered function", quote(f.Function))
	}
	if len(names) == 0 {
		return nil, nil
	}
	limit := max(1, cmp.Or(f.Limit, 100))
	opts := []dbos.ListWorkflowsOption{
		dbos.WithFilterName(names...),
		dbos.WithFilterSortDesc(),
		dbos.WithFilterLimit(limit),
		dbos.WithFilterLoadInput(false),
		dbos.WithFilterLoadOutput(false),
	}
	if len(statuses) > 0 {
		opts = append(opts, dbos.WithFilterStatus(statuses...))
	}
	if !f.Since.IsZero() {
		opts = append(opts, dbos.WithFilterCreatedAfter(f.Since))
	}
	c, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	current := c.GetApplicationVersion()
	switch f.Status {
	case run.Queued, run.Running:
		opts = append(opts, dbos.WithFilterAppVersion(current))
	case run.OtherVersion:
		others, err := otherVersionNames(c, names, f.Since)
		if err != nil {
			return nil, err
		}
		if len(others) == 0 {
			return []run.Summary{}, nil
		}
		opts = append(opts, dbos.WithFilterAppVersion(others...))
	}
	out := make([]run.Summary, 0, limit)
	var failed []string
	// DBOS records both cancelled and timed-out runs as cancelled: asked
	// for one of them, page on until limit runs of it are found.
	for offset := 0; len(out) < limit; offset += limit {
		ws, err := dbos.ListWorkflows(c, append(opts, dbos.WithFilterOffset(offset))...)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		for _, w := range ws {
			s := summary(w, current)
			if f.Status != "" && s.Status != f.Status || len(out) == limit {
				continue
			}
			if s.Status == run.Failed {
				failed = append(failed, s.ID)
			}
			out = append(out, s)
		}
		if len(ws) < limit || f.Status != run.Cancelled && f.Status != run.TimedOut {
			break
		}
	}
	if len(failed) > 0 {
		// DBOS reads a run's error only with its output; a failed run has
		// no output, so reading only the failed ones again stays cheap.
		errs, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(failed...), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(true))
		if err != nil {
			return nil, fmt.Errorf("list runs: read errors: %w", err)
		}
		byID := make(map[string]error, len(errs))
		for _, w := range errs {
			byID[w.ID] = w.Error
		}
		for i := range out {
			if err := byID[out[i].ID]; err != nil {
				out[i].Error = err.Error()
			}
		}
	}
	if err := e.explainEnds(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// otherVersionNames names the versions other than c's that have
// unfinished runs of the functions names created since since: one
// aggregate, so that a listing of them reads only their runs.
func otherVersionNames(c dbos.Context, names []string, since time.Time) ([]string, error) {
	rows, err := dbos.GetWorkflowAggregates(c, dbos.GetWorkflowAggregatesInput{
		GroupByApplicationVersion: true,
		SelectCount:               true,
		Status:                    unfinished,
		Name:                      names,
		StartTime:                 since,
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: find other versions: %w", err)
	}
	var out []string
	for _, r := range rows {
		if v := deref(r.Group["application_version"]); v != c.GetApplicationVersion() {
			out = append(out, v)
		}
	}
	return out, nil
}

// summary is DBOS's run w as a process of version current shows it.
func summary(w dbos.WorkflowStatus, current string) run.Summary {
	s := run.Summary{
		ID:        w.ID,
		Function:  w.Name,
		Status:    stateOf(w, current),
		CreatedAt: w.CreatedAt.UTC(),
		StartedAt: w.StartedAt.UTC(),
		RerunOf:   w.ForkedFrom,
		Version:   w.ApplicationVersion,
	}
	if w.Error != nil {
		s.Error = w.Error.Error()
	}
	if timedOut(w) {
		s.Status = run.TimedOut
		// DBOS clears a cancelled run's start time; the deadline tells it.
		// The run's record, if a process saw it stop, says more
		// (explainEnds).
		if s.StartedAt.IsZero() {
			s.StartedAt = w.Deadline.Add(-w.Timeout).UTC()
		}
		s.Error = fmt.Sprintf("run deadline of %s passed", w.Timeout)
	}
	if s.Status.Ended() {
		s.EndedAt = cmpTime(w.CompletedAt, w.UpdatedAt).UTC()
	}
	if w.Attempts > 1 {
		s.Recoveries = w.Attempts - 1
	}
	return s
}

// A step's status in a StepView.
const (
	stepCompleted = "completed"
	stepFailed    = "failed"
	stepRetrying  = "retrying" // failed attempts so far; the next one will come
)

// StepView is one step of a run as the API shows it: all attempts of a
// step are folded into one entry.
type StepView struct {
	Name            string          `json:"name"`
	Kind            string          `json:"kind"`   // "step" or "sleep"
	Status          string          `json:"status"` // completed, failed, retrying
	Attempts        int             `json:"attempts"`
	FirstStepID     int             `json:"first_step_id"`
	StartedAt       time.Time       `json:"started_at,omitzero"`
	EndedAt         time.Time       `json:"ended_at,omitzero"`
	DurationMS      float64         `json:"duration_ms"`
	WaitedMS        float64         `json:"waited_ms,omitempty"` // durable waits between attempts
	Output          json.RawMessage `json:"output,omitempty"`
	OutputBytes     int             `json:"output_bytes,omitempty"`
	OutputTruncated string          `json:"output_truncated,omitempty"` // says which limit cut the output
	Error           string          `json:"error,omitempty"`
	FailedAttempts  []FailedAttempt `json:"failed_attempts,omitempty"`
}

// FailedAttempt is one failed attempt of a step: its error and what the
// error's class made the engine do next.
type FailedAttempt struct {
	Attempt int    `json:"attempt"`
	Class   string `json:"class"` // retry, fatal, retry_after or quota_wait (see run.Class)
	Error   string `json:"error"`
	// RetryAfterMS is the wait the provider or the governor asked for
	// (retry_after, quota_wait); a retry's backoff shows in waited_ms.
	RetryAfterMS float64 `json:"retry_after_ms,omitempty"`
	Final        bool    `json:"final,omitempty"` // no attempt followed
}

// RunDetail is a run with its steps.
type RunDetail struct {
	run.Summary
	Event  *Event          `json:"event,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
	Steps  []StepView      `json:"steps"`
}

// ErrRunNotFound is returned for a run ID that does not exist.
var ErrRunNotFound = errors.New("run not found")

// RunDetail returns a run and its steps. Step outputs longer than
// outputLimit bytes are cut, and the cut says so.
func (e *Engine) RunDetail(ctx context.Context, id string, outputLimit int) (*RunDetail, error) {
	if err := CheckRunID(id); err != nil {
		return nil, err
	}
	c, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(id), dbos.WithFilterLoadInput(true), dbos.WithFilterLoadOutput(true))
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("run %s: %w", id, ErrRunNotFound)
	}
	w := ws[0]
	if _, ok := e.function(w.Name); !ok {
		return nil, fmt.Errorf("run %s: %w", id, ErrRunNotFound)
	}
	d := &RunDetail{Summary: summary(w, c.GetApplicationVersion())}
	if in, ok := decodeInput(w.Input); ok {
		d.Event = &in.Event
	}
	if w.Output != nil {
		d.Output, _, _ = limitJSON(w.Output, outputLimit)
	}
	steps, err := dbos.GetWorkflowSteps(c, id, dbos.WithStepsLoadOutput(true))
	if err != nil {
		return nil, fmt.Errorf("get steps of run %s: %w", id, err)
	}
	d.Steps = foldSteps(steps, outputLimit, d.Status)
	if d.Summary, err = e.explainEnd(ctx, d.Summary); err != nil {
		return nil, err
	}
	if (d.Status == run.Cancelled || d.Status == run.TimedOut) && d.Step == "" {
		// No process saw it stop: name the step whose attempts had not
		// succeeded when it did, if any.
		if n := len(d.Steps); n > 0 && d.Steps[n-1].Status != stepCompleted {
			d.Step = d.Steps[n-1].Name
		}
	}
	return d, nil
}

func decodeInput(v any) (input, bool) {
	var in input
	var b []byte
	switch x := v.(type) {
	case nil:
		return in, false
	case string:
		b = []byte(x)
	case *string:
		if x == nil {
			return in, false
		}
		b = []byte(*x)
	default:
		var err error
		if b, err = json.Marshal(x); err != nil {
			return in, false
		}
	}
	if err := json.Unmarshal(b, &in); err != nil || in.Event.Name == "" {
		return in, false
	}
	return in, true
}

// limitJSON encodes v and cuts it to limit bytes; the note names the limit.
func limitJSON(v any, limit int) (json.RawMessage, int, string) {
	var b []byte
	switch x := v.(type) {
	case json.RawMessage:
		b = x
	case string:
		if json.Valid([]byte(x)) {
			b = []byte(x)
		} else {
			b, _ = json.Marshal(x)
		}
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			b, _ = json.Marshal(fmt.Sprint(v))
		}
	}
	n := len(b)
	if limit <= 0 || n <= limit {
		return b, n, ""
	}
	cut, _ := json.Marshal(string(b[:limit]))
	return cut, n, fmt.Sprintf("output is %d bytes; showing the first %d (output limit %d bytes)", n, limit, limit)
}

// foldSteps groups DBOS's step rows — one per attempt, and a DBOS.sleep
// between attempts — into one entry per sluice step.
func foldSteps(rows []dbos.StepInfo, outputLimit int, runStatus run.State) []StepView {
	var out []StepView
	var pendingWait time.Duration
	for i, s := range rows {
		if s.StepName == "DBOS.sleep" {
			// A wait between two attempts of the same step belongs to it.
			if len(out) > 0 && i+1 < len(rows) && rows[i+1].StepName == out[len(out)-1].Name && out[len(out)-1].Error != "" {
				pendingWait = s.CompletedAt.Sub(s.StartedAt)
				continue
			}
			out = append(out, StepView{Name: "sleep", Kind: "sleep", Status: stepCompleted, Attempts: 1, FirstStepID: s.StepID,
				StartedAt: s.StartedAt.UTC(), EndedAt: s.CompletedAt.UTC(), DurationMS: ms(s.CompletedAt.Sub(s.StartedAt))})
			continue
		}
		var v *StepView
		if n := len(out); n > 0 && out[n-1].Name == s.StepName && out[n-1].Error != "" && out[n-1].Kind == "step" {
			v = &out[n-1] // the next attempt of a failed one
			v.Attempts++
			v.WaitedMS += ms(pendingWait)
		} else {
			out = append(out, StepView{Name: s.StepName, Kind: "step", FirstStepID: s.StepID, StartedAt: s.StartedAt.UTC(), Attempts: 1})
			v = &out[len(out)-1]
		}
		pendingWait = 0
		v.EndedAt = s.CompletedAt.UTC()
		v.DurationMS = ms(v.EndedAt.Sub(v.StartedAt))
		if s.Error != nil {
			v.Error = s.Error.Error()
			v.Status = stepFailed
			fa := FailedAttempt{Attempt: v.Attempts, Class: "unknown", Error: v.Error, Final: true}
			var se *run.StepError
			if errors.As(s.Error, &se) {
				fa.Attempt, fa.Class, fa.Final = se.Attempt, se.Class.String(), se.Final
				fa.Error = se.Message
				if se.Class == run.RetryAfter || se.Class == run.QuotaWait {
					fa.RetryAfterMS = ms(se.RetryAfter)
				}
				if !se.Final {
					v.Status = stepRetrying
				}
			}
			v.FailedAttempts = append(v.FailedAttempts, fa)
			v.Output = nil
			continue
		}
		v.Error, v.Status = "", stepCompleted
		if s.Output != nil {
			v.Output, v.OutputBytes, v.OutputTruncated = limitJSON(s.Output, outputLimit)
		}
	}
	for i := range out {
		if out[i].Status == stepRetrying && runStatus.Ended() {
			out[i].Status = stepFailed
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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

// DroppedEvent is an event a function's rate limit dropped: the store's
// record (store.DroppedEvent, whose fields it must keep, so that one
// converts to the other) with the names the HTTP API shows.
type DroppedEvent struct {
	Function  string    `json:"function"`
	EventID   string    `json:"event_id"`
	EventName string    `json:"event_name"`
	Key       string    `json:"key,omitempty"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

// Dropped lists events a rate limit dropped, newest first.
func (e *Engine) Dropped(ctx context.Context, function string, limit int) ([]DroppedEvent, error) {
	recs, err := e.st.DroppedEvents(ctx, function, max(1, cmp.Or(limit, 100)))
	if err != nil {
		return nil, err
	}
	var out []DroppedEvent
	for _, r := range recs {
		out = append(out, DroppedEvent(r))
	}
	return out, nil
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

// client is the DBOS handle for management calls made on behalf of ctx,
// once the engine is launched.
func (e *Engine) client(ctx context.Context) (dbos.Context, error) {
	dctx, err := e.dbosContext()
	if err != nil || ctx == nil {
		return dctx, err
	}
	return dbos.WithoutCancel(dctx), nil
}

func cmpTime(a, b time.Time) time.Time {
	if !a.IsZero() {
		return a
	}
	return b
}
