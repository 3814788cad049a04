package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/run"
)

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
	// WaitOn names, for quota_wait, what held the call back ("tpm",
	// "tpd pacing", "a cluster lease"; see run.StepError.WaitOn).
	WaitOn string `json:"wait_on,omitempty"`
	Final  bool   `json:"final,omitempty"` // no attempt followed
}

// RunDetail is a run with its steps.
type RunDetail struct {
	run.Summary
	Event  *Event          `json:"event,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
	Steps  []StepView      `json:"steps"`
	// Attempts are the steps' attempts one by one with the waits between
	// them, as History gives them (GET /v1/runs/{id}/history answers them).
	Attempts []Attempt `json:"-"`
}

// ErrRunNotFound is returned for a run ID that does not exist.
var ErrRunNotFound = errors.New("run not found")

// RunDetail returns a run and its steps, their times on the engine's
// clock (Config.Now, see appClock). Step outputs longer than outputLimit
// bytes are cut, and the cut says so.
func (e *Engine) RunDetail(ctx context.Context, id string, outputLimit int) (*RunDetail, error) {
	d, err := e.runDetail(ctx, id, outputLimit)
	if err != nil {
		return nil, err
	}
	clk := e.appClock()
	d.Summary = onAppClock(clk, d.Summary)
	stepsOnAppClock(clk, d.Steps)
	attemptsOnAppClock(clk, d.Attempts)
	return d, nil
}

// runDetail is RunDetail with DBOS's times as it keeps them, by the wall
// clock, for the engine's own decisions.
func (e *Engine) runDetail(ctx context.Context, id string, outputLimit int) (*RunDetail, error) {
	c, w, err := e.lookUp(ctx, id, true)
	if err != nil {
		return nil, err
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
	d.Attempts = historyOf(steps)
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

// lookUp reads run id, a run of one of the engine's functions, with its
// output (and error) and, if input, its input.
func (e *Engine) lookUp(ctx context.Context, id string, input bool) (dbos.Context, dbos.WorkflowStatus, error) {
	if err := CheckRunID(id); err != nil {
		return nil, dbos.WorkflowStatus{}, err
	}
	c, err := e.client(ctx)
	if err != nil {
		return nil, dbos.WorkflowStatus{}, err
	}
	ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(id), dbos.WithFilterLoadInput(input), dbos.WithFilterLoadOutput(true))
	if err != nil {
		return nil, dbos.WorkflowStatus{}, fmt.Errorf("get run %s: %w", id, err)
	}
	if len(ws) == 0 {
		return nil, dbos.WorkflowStatus{}, fmt.Errorf("run %s: %w", id, ErrRunNotFound)
	}
	if _, ok := e.function(ws[0].Name); !ok {
		return nil, dbos.WorkflowStatus{}, fmt.Errorf("run %s: %w", id, ErrRunNotFound)
	}
	return c, ws[0], nil
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
			if n := len(out); n > 0 && retryWait(rows, i, out[n-1].Name, out[n-1].Error != "") {
				pendingWait = s.CompletedAt.Sub(s.StartedAt)
				continue
			}
			out = append(out, StepView{Name: "sleep", Kind: "sleep", Status: stepCompleted, Attempts: 1, FirstStepID: s.StepID,
				StartedAt: s.StartedAt.UTC(), EndedAt: s.CompletedAt.UTC(), DurationMS: msBetween(s.StartedAt, s.CompletedAt)})
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
		v.DurationMS = msBetween(v.StartedAt, v.EndedAt)
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
				fa.WaitOn = se.WaitOn
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

// msBetween is the milliseconds from from to to; 0 unless both are set:
// DBOS records a step under way, and the start of a run's part, with no
// end (and the time from year 1 is no duration).
func msBetween(from, to time.Time) float64 {
	if from.IsZero() || to.IsZero() {
		return 0
	}
	return ms(to.Sub(from))
}
