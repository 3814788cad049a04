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
