package governor

import (
	"cmp"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/num"
)

// TooLargeError reports a call that can never be admitted: it needs more of
// a limit than the limit's whole allowance.
type TooLargeError struct {
	Key string
	// Flow is the flow whose own budget the call can never fit; "" for a
	// limit of the key.
	Flow  string
	Limit Limit
	Need  int64
	Max   int64
	// MaxOutput is the largest max_tokens that would fit with the same
	// input: 0 if the input alone does not fit, and -1 if it is not known,
	// as when a provider refused the call.
	MaxOutput int64
}

func (e *TooLargeError) Error() string {
	if e.Limit.Unit() == "money" {
		whose := ""
		if e.Flow != "" {
			whose = fmt.Sprintf(" of flow %q", e.Flow)
		}
		return fmt.Sprintf("request can never fit: costs up to %s, the budget of %s%s is %s; %s",
			FormatMoney(e.Need), e.Limit.Title(), whose, FormatMoney(e.Max), e.Hint("", 1))
	}
	return fmt.Sprintf("request can never fit: needs %s %s, %s limit is %s; %s",
		num.Group(e.Need), e.Limit.Unit(), upper(e.Limit), num.Group(e.Max), e.Hint("", 1))
}

// Hint says, as a clause, what would make the call fit: nothing for a
// limit of requests, a shorter prompt for ITPM, otherwise a lower maximum
// or fewer choices, with the largest maximum that fits when MaxOutput
// knows it. field names the maximum as the caller sent it ("" is
// max_tokens); n is the call's choices (below 1: one). This is the one
// wording of the hint: the governor's, the llm client's and the gateway's
// refusals all give it.
func (e *TooLargeError) Hint(field string, n int64) string {
	field = cmp.Or(field, "max_tokens")
	n = max(n, 1)
	switch {
	case e.Limit == RPM || e.Limit == RPD:
		return "the key allows no request at all"
	case e.Limit == ITPM:
		return "shorten the prompt"
	case e.MaxOutput < 0 && e.Limit == OTPM:
		return "lower " + field
	case e.MaxOutput < 0:
		return "shorten the prompt or lower " + field
	case e.MaxOutput < 1:
		return "shorten the prompt: it alone does not fit"
	}
	fit := e.MaxOutput / n
	switch {
	case fit < 1:
		return fmt.Sprintf("lower n: even %s 1 does not fit %d choices", field, n)
	case n > 1:
		return fmt.Sprintf("lower %[1]s or n: with n = %[2]d, %[1]s ≤ %[3]s fits", field, n, num.Group(fit))
	}
	return fmt.Sprintf("lower %[1]s: %[1]s ≤ %[2]s fits", field, num.Group(fit))
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
	// Kind is one of "limit" (a window of Limit has no room yet), "budget"
	// (the flow's own budget Limit, MPD or MPM, is spent), "pacing"
	// (the day pacer of Limit spreads the day's budget: "tpd pacing"),
	// "pause" (the provider refused a call without naming a limit, or named
	// one this governor was not told of), "lease" (the key is shared with
	// other processes of sluice's cluster, and this one holds no lease with
	// room for it yet), "probe" (the key was told no limit, and its first
	// calls go a few at a time until the provider has answered some), "turn"
	// (it fits, but calls of other flows are ahead of it in fair order) or
	// "" (nothing: it is about to be admitted).
	Kind  string
	Limit Limit // for "limit", "budget" and "pacing"
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
	case "budget":
		return "the flow's " + b.Limit.String()
	case "pause":
		return "a provider pause"
	case "lease":
		return "a cluster lease"
	case "probe":
		return "the key's first answers"
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
