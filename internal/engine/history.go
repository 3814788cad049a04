package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/run"
)

// The causes of a wait in a run's history.
const (
	WaitQueue      = "queue"       // the run waited in its function's queue to start
	WaitQuota      = "quota"       // the governor had no room: WaitOn names what held it back
	WaitRetry      = "retry"       // a transient failure's backoff
	WaitRetryAfter = "retry_after" // the provider, or the code, said how long to wait
)

// RunHistory is every attempt of every step of a run, in order, with the
// waits between them and why each wait happened: what the run page's table
// and timeline show, and GET /v1/runs/{id}/history answers. Times and
// durations are DBOS's, which records them by the wall clock, shown on the
// engine's clock (Config.Now, see appClock).
type RunHistory struct {
	ID        string    `json:"id"`
	Function  string    `json:"function"`
	Status    run.State `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Queued is the wait in the function's queue, from created to started
	// (nil when the run has not started).
	Queued   *Wait     `json:"queued,omitempty"`
	Error    string    `json:"error,omitempty"`
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one attempt of a step (or one durable sleep of the run's
// own) as the run recorded it.
type Attempt struct {
	// Step is the step's name; StepIndex its place among the run's steps
	// (RunDetail.Steps), from 1, as re-running from a step counts.
	Step      string `json:"step"`
	StepIndex int    `json:"step_index"`
	Kind      string `json:"kind"`    // "step" or "sleep"
	Attempt   int    `json:"attempt"` // from 1, each execution of the step
	// Status is "completed" or "failed"; an attempt the run's end cut
	// short, or one under way, has no end.
	Status     string    `json:"status"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	DurationMS float64   `json:"duration_ms"`
	// Class is what the failure meant for the next attempt (run.Class:
	// retry, fatal, retry_after, quota_wait); Error its message.
	Class string `json:"class,omitempty"`
	Error string `json:"error,omitempty"`
	// Wait is the durable wait before this attempt, and why; nil when the
	// attempt followed the one before at once.
	Wait *Wait `json:"wait,omitempty"`
}

// Wait is a durable wait of a run, and its cause.
type Wait struct {
	Cause      string    `json:"cause"` // WaitQueue, WaitQuota, WaitRetry or WaitRetryAfter
	StartedAt  time.Time `json:"started_at"`
	EndedAt    time.Time `json:"ended_at"`
	DurationMS float64   `json:"duration_ms"`
	// For WaitQuota: the governor's Blocker kind and words ("limit" and
	// "tpm", "pacing" and "tpd pacing", "lease", "budget"), empty for
	// attempts recorded before sluice kept them.
	WaitKind string `json:"wait_kind,omitempty"`
	WaitOn   string `json:"wait_on,omitempty"`
	// For WaitRetry and WaitRetryAfter: the class of the failure that
	// caused it (as Attempt.Class).
	Class string `json:"class,omitempty"`
}

// Label says the wait's cause in a few words: "quota: tpm",
// "retry backoff", "queued".
func (w *Wait) Label() string {
	switch w.Cause {
	case WaitQueue:
		return "queued"
	case WaitQuota:
		if w.WaitOn != "" {
			return "quota: " + w.WaitOn
		}
		return "quota"
	case WaitRetry:
		return "retry backoff"
	case WaitRetryAfter:
		return "retry after"
	}
	return w.Cause
}

// RunHistory returns every attempt of run id with the waits between them.
func (e *Engine) RunHistory(ctx context.Context, id string) (*RunHistory, error) {
	c, w, err := e.lookUp(ctx, id, false)
	if err != nil {
		return nil, err
	}
	s, err := e.explainEnd(ctx, summary(w, c.GetApplicationVersion()))
	if err != nil {
		return nil, err
	}
	rows, err := dbos.GetWorkflowSteps(c, id, dbos.WithStepsLoadOutput(false))
	if err != nil {
		return nil, fmt.Errorf("get steps of run %s: %w", id, err)
	}
	clk := e.appClock()
	attempts := historyOf(rows)
	attemptsOnAppClock(clk, attempts)
	return historyFor(onAppClock(clk, s), attempts), nil
}

// History is the run's history, as RunHistory returns it.
func (d *RunDetail) History() *RunHistory { return historyFor(d.Summary, d.Attempts) }

// historyFor is the history of run s whose attempts are attempts.
func historyFor(s run.Summary, attempts []Attempt) *RunHistory {
	h := &RunHistory{ID: s.ID, Function: s.Function, Status: s.Status, CreatedAt: s.CreatedAt, StartedAt: s.StartedAt,
		EndedAt: s.EndedAt, Error: s.Error, Attempts: attempts}
	if h.Attempts == nil {
		h.Attempts = []Attempt{}
	}
	if !s.StartedAt.IsZero() && s.StartedAt.After(s.CreatedAt) {
		h.Queued = &Wait{Cause: WaitQueue, StartedAt: s.CreatedAt, EndedAt: s.StartedAt, DurationMS: ms(s.StartedAt.Sub(s.CreatedAt))}
	}
	return h
}

// retryWait reports whether rows[i], a DBOS.sleep, is the wait between two
// attempts of the step whose last attempt so far failed (last): the engine
// sleeps so between attempts, and such a sleep belongs to the step.
func retryWait(rows []dbos.StepInfo, i int, last string, lastFailed bool) bool {
	return lastFailed && i+1 < len(rows) && rows[i+1].StepName == last
}

// historyOf lists DBOS's step rows of a run as attempts, each with the
// wait before it, grouped into steps as foldSteps groups them.
func historyOf(rows []dbos.StepInfo) []Attempt {
	var out []Attempt
	var wait *Wait
	var prev *run.StepError // the failure of the attempt before, if it failed
	index := 0
	for i, s := range rows {
		last := len(out) - 1
		lastFailed := last >= 0 && out[last].Kind == "step" && out[last].Status == stepFailed
		if s.StepName == "DBOS.sleep" {
			w := &Wait{StartedAt: s.StartedAt.UTC(), EndedAt: s.CompletedAt.UTC(), DurationMS: msBetween(s.StartedAt, s.CompletedAt)}
			if last >= 0 && retryWait(rows, i, out[last].Step, lastFailed) {
				w.Cause, w.Class = WaitRetry, out[last].Class
				if prev != nil {
					switch prev.Class {
					case run.QuotaWait:
						w.Cause, w.Class, w.WaitKind, w.WaitOn = WaitQuota, "", prev.WaitKind, prev.WaitOn
					case run.RetryAfter:
						w.Cause = WaitRetryAfter
					}
				}
				wait = w
				continue
			}
			index++
			out = append(out, Attempt{Step: "sleep", StepIndex: index, Kind: "sleep", Attempt: 1, Status: stepCompleted,
				StartedAt: w.StartedAt, EndedAt: w.EndedAt, DurationMS: w.DurationMS})
			prev, wait = nil, nil
			continue
		}
		a := Attempt{Step: s.StepName, Kind: "step", Attempt: 1, Status: stepCompleted, StartedAt: s.StartedAt.UTC(),
			EndedAt: s.CompletedAt.UTC(), DurationMS: msBetween(s.StartedAt, s.CompletedAt), Wait: wait}
		if last >= 0 && lastFailed && out[last].Step == s.StepName {
			a.StepIndex, a.Attempt = out[last].StepIndex, out[last].Attempt+1
		} else {
			index++
			a.StepIndex = index
		}
		wait, prev = nil, nil
		if s.Error != nil {
			a.Status, a.Class, a.Error = stepFailed, "unknown", s.Error.Error()
			if se, ok := errors.AsType[*run.StepError](s.Error); ok {
				a.Class, a.Error, prev = se.Class.String(), se.Message, se
			}
		}
		out = append(out, a)
	}
	return out
}
