package sluice

import (
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
)

// NonRetriable marks err so the step that returned it fails at once
// instead of being retried: use it for errors no retry can fix.
func NonRetriable(err error) error { return engine.NonRetriable(err) }

// RetryAfter marks err so the step's next attempt comes after d, waited
// durably (a restart during the wait keeps it), instead of the backoff.
func RetryAfter(err error, d time.Duration) error { return engine.RetryAfter(err, d) }

// StepError is the error of a failed step attempt, as the run records it.
// After a restart the recorded error is given back, so errors.As against the
// original error type works only in the process that saw it; StepError's
// fields survive.
type StepError = engine.StepError

// Error classes of a StepError.
const (
	ClassRetry = engine.Retry // transient: backed off and retried
	ClassFatal = engine.Fatal // not retried
	ClassWait  = engine.Wait  // retried after the wait the error named
	ClassQuota = engine.Quota // waiting for the governor: does not use up retries
)
