// Package run is the vocabulary of sluice's durable runs that the sluice
// SDK and its engine share: how a function is configured, how a run ended,
// what an event started, and the error of a failed step with its class.
//
// It is a package of its own so that the engine, the HTTP API and the SDK
// all use these definitions instead of copies: the sluice package takes and
// returns them (sluice.Register takes a Function, App.Wait returns a
// Summary, a failed step returns a *StepError).
package run

import (
	"encoding/gob"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Function configures a function. ID, a handler (given to sluice.Register)
// and a trigger (Event or Cron) are required; every other zero value is a
// useful default.
//
// The event fields that Idempotency, the keys of Concurrency, Throttle and
// RateLimit, and Priority name are read by their exact keys. A handler's
// typed data matches keys whatever their case, so Send refuses an event
// whose data writes one of those keys in another case: the two would read
// different values.
type Function struct {
	// ID names the function; runs are listed under it. Letters, digits and
	// ._:- (at most 128).
	ID string
	// Event triggers a run for each event of this name.
	Event string
	// Cron triggers a run on a schedule: five fields (minute hour day
	// month weekday) or six with seconds first. Runs of one tick are
	// started once even when several processes run the app.
	Cron string
	// Retries is how many times a failing step is tried again after its
	// first attempt (default 3; NoRetries for none). Waiting for quota does
	// not count.
	Retries int
	// Timeout bounds a whole run from its start (default none). A run that
	// exceeds it is stopped where it is and ends TimedOut; its error names
	// the deadline, the step it was in and that step's last failed attempt.
	Timeout time.Duration
	// Idempotency names an event field ("event.data.documentId", or just
	// "documentId") whose value identifies the run: a second event with the
	// same value starts nothing. Default: the event's ID.
	Idempotency string
	// Concurrency limits runs executing at once: across every process, or
	// per process, and optionally per value of an event field.
	Concurrency []Concurrency
	// Throttle limits how many runs start per period; the excess waits.
	Throttle *Throttle
	// RateLimit limits how many events start a run per period; the excess
	// is dropped and recorded (use it against duplicate triggers, not to
	// protect a quota).
	RateLimit *RateLimit
	// Priority names an event field holding an integer: among queued runs,
	// higher starts sooner (default 0).
	Priority string
	// Flow is the governor flow the function's LLM calls draw on (default:
	// the ID). Functions sharing a flow share its share of the key.
	Flow string
	// Provider names the provider or route (Config.Routes) LLM calls
	// use (default: the first provider).
	Provider string
}

// NoRetries, as Function.Retries, tries each step once.
const NoRetries = -1

// Concurrency limits runs executing at once.
type Concurrency struct {
	Limit     int    // at most this many
	Key       string // optional event field: the limit holds per value (a tenant, a user)
	PerWorker bool   // the limit holds in each process instead of across all
}

// Throttle limits run starts per period; excess runs wait in the queue.
type Throttle struct {
	Limit  int
	Period time.Duration
	Key    string // optional event field: the throttle holds per value
}

// RateLimit limits events accepted per period; excess events are dropped.
type RateLimit struct {
	Limit  int
	Period time.Duration
	Key    string // optional event field: the limit holds per value
}

// State is where a run is: queued, running, waiting for a person because
// another version recorded it, or how it ended.
type State string

// The states of a run.
const (
	Queued  State = "queued"
	Running State = "running"
	// OtherVersion: the run has not ended and was recorded under a version
	// other than the process's. The process does not execute it by itself
	// (it is neither queued nor running there) until a person resumes it
	// under the process's version or cancels it (see VersionReport).
	OtherVersion State = "other_version"
	Completed    State = "completed"
	Failed       State = "failed"
	Cancelled    State = "cancelled"
	TimedOut     State = "timed_out" // stopped by its function's Timeout
)

// Ended reports whether a run in state s has ended.
func (s State) Ended() bool {
	switch s {
	case Completed, Failed, Cancelled, TimedOut:
		return true
	}
	return false
}

// Summary is a run's state, when it ended (or now), and why.
type Summary struct {
	ID        string    `json:"id"`
	Function  string    `json:"function"`
	Status    State     `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Error says why a run failed, timed out or was cancelled; Step names
	// the step a timed-out or cancelled run was in.
	Error      string `json:"error,omitempty"`
	Step       string `json:"step,omitempty"`
	RerunOf    string `json:"rerun_of,omitempty"`   // the run this one re-runs
	Recoveries int    `json:"recoveries,omitempty"` // times the run was resumed after its process stopped
	// Version is the app version the run is recorded under; an unfinished
	// run of a version other than the process's is OtherVersion.
	Version string `json:"version"`
}

// VersionRuns counts the unfinished runs recorded under a version other
// than the process's: they wait, OtherVersion, for a person to resume them
// under the process's version or to cancel them.
type VersionRuns struct {
	Version string `json:"version"`
	// Runs counts them by function; parts of runs are counted under
	// "function/part".
	Runs map[string]int64 `json:"runs"`
	// Total is the sum of Runs.
	Total int64 `json:"total"`
	// Unknown lists the functions and parts among Runs that the process
	// does not have: their runs cannot be resumed there.
	Unknown []string `json:"unknown,omitempty"`
}

// VersionReport says what resuming or cancelling the unfinished runs of a
// version did.
type VersionReport struct {
	Version string `json:"version"`
	// Done lists the runs (and parts of runs) resumed under the process's
	// version, or cancelled.
	Done []string `json:"done"`
	// Skipped lists the runs left as they were, each with why.
	Skipped []SkippedRun `json:"skipped,omitempty"`
}

// SkippedRun is a run that resuming or cancelling a version left alone.
type SkippedRun struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Sent says what an event did to one function.
type Sent struct {
	Function string `json:"function"`
	RunID    string `json:"run_id"`
	// Status is "queued" (a run started), "existing" (the event ID or
	// idempotency key was seen before: nothing new started) or "dropped"
	// (the function's rate limit was full).
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"` // why it was dropped
}

// Class says what a failed attempt means for the next one. It prints as
// the run records show it: retry, fatal, retry_after, quota_wait.
type Class uint8

const (
	// Retry: a transient failure (5xx, timeout, reset): back off
	// exponentially with jitter and try again while retries remain.
	Retry Class = iota
	// Fatal: retrying cannot help (a 4xx, a request too large for a limit,
	// an exhausted quota, or an error marked sluice.NonRetriable).
	Fatal
	// RetryAfter: the provider or the code (sluice.RetryAfter) said when to
	// try again; the wait is durable and counts as an attempt.
	RetryAfter
	// QuotaWait: the governor has no room yet; the run sleeps durably until
	// it estimates there is. Waiting for quota does not use up retries.
	QuotaWait
)

func (c Class) String() string {
	switch c {
	case Retry:
		return "retry"
	case Fatal:
		return "fatal"
	case RetryAfter:
		return "retry_after"
	case QuotaWait:
		return "quota_wait"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// StepError is the error of a failed step attempt, as the run records it.
// After a restart the recorded error is given back, so errors.As against the
// original error type works only in the process that saw it; StepError's
// fields survive.
type StepError struct {
	Step       string        // the step's name
	Attempt    int           // 1 for the first attempt
	Class      Class         // what the failure means for the next attempt
	RetryAfter time.Duration // for RetryAfter and QuotaWait: how long to wait
	Message    string        // the cause's message
	Final      bool          // no attempt follows: the step failed
	Retries    int           // the retries the function allows
	// WaitKind and WaitOn say, for QuotaWait, what held the call back
	// when it gave up waiting inline: the governor's Blocker kind
	// ("limit", "pacing", "budget", "pause", "lease", "probe", "turn") and
	// its words ("tpm", "tpd pacing", "a cluster lease"), or "route" and
	// "every target out" for a route none of whose targets could take it.
	// Empty in attempts recorded before they were kept.
	WaitKind, WaitOn string

	cause error // the live error, absent after replay
}

// NewStepError returns e as the error of an attempt that failed with
// cause, which Unwrap gives back while this process lives (a recorded
// StepError keeps only its fields). An empty Message is cause's.
func NewStepError(e StepError, cause error) *StepError {
	e.cause = cause
	if e.Message == "" && cause != nil {
		e.Message = cause.Error()
	}
	return &e
}

// The engine records a step's error with DBOS, which keeps an error's Go
// type by gob-encoding it. The name is the one StepError was first
// recorded under, so runs recorded by an earlier version replay the same.
func init() { gob.RegisterName("*engine.StepError", &StepError{}) }

func (e *StepError) Error() string {
	switch {
	case e.Final && e.Class == Fatal:
		return fmt.Sprintf("step %s: %s (not retried)", e.Step, e.Message)
	case e.Final:
		return fmt.Sprintf("step %s: %s (gave up after %d attempts)", e.Step, e.Message, e.Attempt)
	}
	return fmt.Sprintf("step %s attempt %d: %s", e.Step, e.Attempt, e.Message)
}

// Unwrap gives the original error while the attempt's process is alive.
func (e *StepError) Unwrap() error { return e.cause }

// Backfill configures a backfill: how it draws on the key and how it is
// judged. sluice.Backfill adds the functions that list, load, ask about and
// save its items. ID is required; every other zero value is a useful
// default.
type Backfill struct {
	// ID names the backfill, its job and its runs. Letters, digits and
	// ._:- (at most 100).
	ID string
	// Flow is the governor flow its calls draw on (default: the ID); its
	// weight and priority are the flow's (sluice.Config.Flows).
	Flow string
	// Provider names the provider or route (Config.Routes) its calls use
	// (default: the first provider).
	Provider string
	// After names another backfill: an item becomes eligible here once
	// that backfill has saved it (English titles after English summaries).
	After string
	// PendingSQL lists the keys of the items that still need the backfill
	// with a query on the app's database, instead of a Pending function:
	// $1 is the key to list after, $2 the most keys to list; its one column
	// is the key, in increasing order.
	PendingSQL string
	// MaxBatch is the most items one call carries (default 1): a hard
	// bound, so that a Parse written for batches of at most MaxBatch items
	// never gets a larger one. The governor picks the size of each batch
	// up to it: the largest that fits every limit and is done within about
	// Within at the share of the key the flow can expect.
	MaxBatch int
	// Within: default 15 min (governor.DefaultWithin), or a quarter of
	// StallAfter when that is shorter.
	Within time.Duration
	// StallAfter: items are eligible and none was processed for this long
	// (since the last progress, or since monitoring began) is a stall
	// (default 2 h). An item's age never counts.
	StallAfter time.Duration
	// MaxRejects is how many rejected outputs park an item (default 3);
	// RetryAfter how long a rejected item waits before its next try
	// (default 10 min).
	MaxRejects int
	RetryAfter time.Duration
	// Poll is how often a run starts to look for new items (default 1 min);
	// a run that has more to do hands on to the next at once.
	Poll time.Duration
	// BatchesPerRun is how many batches (a call each, or none for items
	// parked or rejected without one) one run gives out before it hands
	// on to the next (default 100), so no run's record grows without
	// bound. The calls going then are handed on, not waited for.
	BatchesPerRun int
	// InFlight is the most batches going at once (at most 1,024). 0, the
	// default, keeps as many going as the key's quota and the provider's
	// latency need: what the governor admits times the latency observed,
	// with headroom, grown while calls are admitted without waiting and
	// cut back when they wait in the governor's line. A run splits the
	// items into shares that no two share an item of, and goes through
	// several at once. The governor still admits each call only when it
	// fits every limit.
	InFlight int
	// AlertWebhook, when set, receives this backfill's stall and recovery
	// alerts instead of the app's Config.AlertWebhook.
	AlertWebhook string
}

// BatchWithin is the time the governor sizes the backfill's batches for:
// Within, or, when it is not set, 15 minutes (governor.DefaultWithin) or a
// quarter of StallAfter when that is shorter, so that a flow at its share
// finishes several calls within its stall threshold.
func (b Backfill) BatchWithin() time.Duration {
	if b.Within > 0 {
		return b.Within
	}
	if b.StallAfter > 0 {
		return min(governor.DefaultWithin, b.StallAfter/4)
	}
	return governor.DefaultWithin
}
