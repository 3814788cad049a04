package engine

import (
	"cmp"
	"context"
	"fmt"
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
	// Since and Until bound when runs were created, both included, on the
	// engine's clock (Config.Now).
	Since, Until time.Time
	// EventKey selects the runs an event started by its key as the engine
	// stores it: the event's ID, or the value of the function's
	// idempotency field when it has one (see SearchLimits).
	EventKey string
	// Reason selects the runs whose failure, timeout or cancel reason
	// contains it, as written (case matters), among those sluice recorded
	// a reason for.
	Reason string
	Limit  int // default 100
}

// Runs lists runs, newest first, their times on the engine's clock
// (Config.Now), as DBOS's records are shown (see appClock).
func (e *Engine) Runs(ctx context.Context, f RunFilter) ([]run.Summary, error) {
	statuses, err := dbosStatuses(f.Status)
	if err != nil {
		return nil, err
	}
	names := []string{f.Function}
	if f.Function == "" {
		names = e.functionIDs()
	} else if _, ok := e.function(f.Function); !ok {
		return nil, invalid("function", "%s is not a registered function", quote(f.Function))
	}
	if len(names) == 0 {
		return nil, nil
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	// DBOS records runs by the wall clock: the search's bounds, on the
	// app's, are looked up there, and the runs found shown on the app's.
	clk := e.appClock()
	f.Since, f.Until = clk.ToWall(f.Since), clk.ToWall(f.Until)
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
	if !f.Until.IsZero() {
		opts = append(opts, dbos.WithFilterCreatedBefore(f.Until))
	}
	c, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	if f.EventKey != "" || f.Reason != "" {
		ids, err := e.searchIDs(ctx, names, f, limit)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return []run.Summary{}, nil
		}
		opts = append(opts, dbos.WithFilterWorkflowIDs(ids...))
	}
	current := c.GetApplicationVersion()
	switch f.Status {
	case run.Queued, run.Running:
		// A run is on its function's queue: asked by queue, SQLite finds
		// the few not ended by queueIndex instead of reading every run.
		queues := make([]string, len(names))
		for i, name := range names {
			queues[i] = QueueName(name)
		}
		opts = append(opts, dbos.WithFilterAppVersion(current), dbos.WithFilterQueueName(queues...))
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
	for i := range out {
		out[i] = onAppClock(clk, out[i])
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
	// Checked here, not by the database: PostgreSQL refuses a NUL or
	// invalid UTF-8 where SQLite finds nothing, and both must answer alike.
	if err := checkText("function", function, MaxEventNameBytes); err != nil {
		return nil, err
	}
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
