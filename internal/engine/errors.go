package engine

import (
	"encoding/gob"
	"errors"
	"fmt"
	"time"
)

// Class says what a failed attempt means for the next one.
type Class uint8

const (
	// Retry: a transient failure (5xx, timeout, reset): back off exponentially
	// with jitter and try again while retries remain.
	Retry Class = iota
	// Fatal: retrying cannot help (a 4xx, a request too large for a limit, an
	// exhausted quota, or an error the user marked NonRetriable).
	Fatal
	// Wait: the provider or the user said when to try again; the wait counts
	// as an attempt.
	Wait
	// Quota: the governor has no room yet; sleep until it estimates there is.
	// Waiting for quota does not use up retries.
	Quota
)

func (c Class) String() string {
	switch c {
	case Retry:
		return "retry"
	case Fatal:
		return "fatal"
	case Wait:
		return "retry_after"
	case Quota:
		return "quota_wait"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// StepError is how a failed step attempt is recorded. Its fields are exported
// so DBOS can store it and give it back unchanged on replay: after a restart
// the run decides exactly as it did before.
type StepError struct {
	Step       string        // the step's name
	Attempt    int           // 1 for the first attempt
	Class      Class         // what the failure means for the next attempt
	RetryAfter time.Duration // for Wait and Quota: how long to wait
	Message    string        // the cause's message
	Final      bool          // no attempt follows: the step failed
	Retries    int           // the retries the function allows

	cause error // the live error, absent after replay
}

func init() { gob.Register(&StepError{}) }

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

// nonRetriable marks an error that must not be retried.
type nonRetriable struct{ err error }

func (e *nonRetriable) Error() string { return e.err.Error() }
func (e *nonRetriable) Unwrap() error { return e.err }

// NonRetriable marks err so the step fails at once instead of retrying.
func NonRetriable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetriable{err: err}
}

// retryAfter marks an error that may succeed after a given wait.
type retryAfter struct {
	err error
	d   time.Duration
}

func (e *retryAfter) Error() string { return e.err.Error() }
func (e *retryAfter) Unwrap() error { return e.err }

// RetryAfter marks err so the next attempt waits d (durably) instead of the
// exponential backoff.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfter{err: err, d: d}
}

// quotaWait is returned by a governed step that found no room in time.
type quotaWait struct {
	err error
	d   time.Duration
}

func (e *quotaWait) Error() string { return e.err.Error() }
func (e *quotaWait) Unwrap() error { return e.err }

// Classifier decides the class of an error a step returned; the second result
// is false when it has no opinion. The LLM layer installs one that knows the
// provider's errors.
type Classifier func(err error) (Class, time.Duration, bool)

// classify decides what a failed attempt means, most specific marking first.
func classify(err error, extra Classifier) (Class, time.Duration) {
	var q *quotaWait
	if errors.As(err, &q) {
		return Quota, q.d
	}
	var nr *nonRetriable
	if errors.As(err, &nr) {
		return Fatal, 0
	}
	var ra *retryAfter
	if errors.As(err, &ra) {
		return Wait, ra.d
	}
	if extra != nil {
		if c, d, ok := extra(err); ok {
			return c, d
		}
	}
	return Retry, 0
}
