package engine

import (
	"errors"
	"time"

	"github.com/sluice-dev/sluice/run"
)

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
	// kind and on name what held the call back, as run.StepError's
	// WaitKind and WaitOn keep them.
	kind, on string
}

func (e *quotaWait) Error() string { return e.err.Error() }
func (e *quotaWait) Unwrap() error { return e.err }

// Classifier decides the class of an error a step returned; the second result
// is false when it has no opinion. The LLM layer installs one that knows the
// provider's errors.
type Classifier func(err error) (run.Class, time.Duration, bool)

// classify decides what a failed attempt means, most specific marking first.
func classify(err error, extra Classifier) (run.Class, time.Duration) {
	var q *quotaWait
	if errors.As(err, &q) {
		return run.QuotaWait, q.d
	}
	var nr *nonRetriable
	if errors.As(err, &nr) {
		return run.Fatal, 0
	}
	var ra *retryAfter
	if errors.As(err, &ra) {
		return run.RetryAfter, ra.d
	}
	if extra != nil {
		if c, d, ok := extra(err); ok {
			return c, d
		}
	}
	return run.Retry, 0
}
