package governor

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/num"
)

// TooLargeError reports a call that can never be admitted: it needs more of
// a limit than the limit's whole allowance.
type TooLargeError struct {
	Key   string
	Limit Limit
	Need  int64
	Max   int64
	// MaxOutput is the largest max_tokens that would fit with the same
	// input, or -1 if the input alone does not fit.
	MaxOutput int64
}

func (e *TooLargeError) Error() string {
	hint := "lower max_tokens or the batch"
	switch e.Limit {
	case RPM, RPD:
		hint = "this key allows no request at all"
	case ITPM:
		hint = "shorten the prompt or the batch"
	}
	if e.MaxOutput >= 0 && e.Limit != ITPM && e.Limit != RPM && e.Limit != RPD {
		hint += fmt.Sprintf(" (max_tokens ≤ %s fits)", num.Group(e.MaxOutput))
	}
	return fmt.Sprintf("request can never fit: needs %s %s, %s limit is %s: %s",
		num.Group(e.Need), e.Limit.Unit(), upper(e.Limit), num.Group(e.Max), hint)
}

// WaitError reports a wait for admission that ended before the call was admitted.
type WaitError struct {
	Key           string
	Err           error         // why the wait ended, e.g. context.DeadlineExceeded
	EstimatedWait time.Duration // how much longer admission would likely have taken
	// On says what the call waited on when the wait ended (see Blocker).
	On Blocker
	// KeptUntil is when the call's kept place in line lapses (Await with a
	// keep; Reservation.Rejoin takes it back), zero when it left the line.
	KeptUntil time.Time
}

// Blocker says what holds a waiting call back.
type Blocker struct {
	// Kind is one of "limit" (a window of Limit has no room yet), "pacing"
	// (the day pacer of Limit spreads the day's budget: "tpd pacing"),
	// "pause" (the provider refused a call without naming a limit, or named
	// one this governor was not told of), "lease" (the key is shared with
	// other processes, and this one holds no lease with room for it yet:
	// see Config.Leased), "turn" (it fits, but calls of
	// other flows are ahead of it in fair order) or "" (nothing: it is
	// about to be admitted).
	Kind  string
	Limit Limit // for "limit" and "pacing"
	// Until is when that stops holding it back, as far as the governor
	// knows now (zero for "turn").
	Until time.Time
}

// String names the blocker as logs and errors do: "tpm", "tpd pacing",
// "a provider pause", "its turn".
func (b Blocker) String() string {
	switch b.Kind {
	case "limit":
		return b.Limit.String()
	case "pacing":
		return b.Limit.String() + " pacing"
	case "pause":
		return "a provider pause"
	case "lease":
		return "a cluster lease"
	case "turn":
		return "its turn"
	}
	return "nothing"
}

func (e *WaitError) Error() string {
	on := ""
	if e.On.Kind != "" {
		on = "; waiting on " + e.On.String()
		if !e.On.Until.IsZero() {
			on += " until " + e.On.Until.UTC().Format(time.RFC3339)
		}
	}
	return fmt.Sprintf("not admitted (%v)%s; estimated further wait %s", e.Err, on, e.EstimatedWait.Round(time.Millisecond))
}

func (e *WaitError) Unwrap() error { return e.Err }

func upper(l Limit) string {
	b := []byte(l.String())
	for i := range b {
		b[i] -= 'a' - 'A'
	}
	return string(b)
}
