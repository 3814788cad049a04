package governor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limit names one of the limits a provider puts on a key.
type Limit uint8

// The limits sluice models. Each counts one resource over one period.
const (
	RPM  Limit = iota // requests per minute
	RPD               // requests per day
	TPM               // tokens (input + output) per minute
	TPD               // tokens (input + output) per day
	ITPM              // input tokens per minute
	OTPM              // output tokens per minute
	// MPD and MPM are budgets in money, per day and per month (30 days):
	// each call is charged its price (Config.Price), in billionths of the
	// prices' unit of money. No provider announces them.
	MPD // money per day
	MPM // money per month

	// NumLimits counts the limits: range over it to visit each in a fixed
	// order (for l := range NumLimits).
	NumLimits
)

var limitNames = [NumLimits]string{"rpm", "rpd", "tpm", "tpd", "itpm", "otpm", "mpd", "mpm"}

var limitTitles = [NumLimits]string{
	"requests per minute", "requests per day", "tokens per minute",
	"tokens per day", "input tokens per minute", "output tokens per minute",
	"money per day", "money per month",
}

// String returns the short lowercase name: "rpm", "tpd", "otpm".
func (l Limit) String() string {
	if l < NumLimits {
		return limitNames[l]
	}
	return "limit(" + strconv.Itoa(int(l)) + ")"
}

// Title returns the long name providers use in messages: "output tokens per minute".
func (l Limit) Title() string {
	if l < NumLimits {
		return limitTitles[l]
	}
	return l.String()
}

// Month is the period of MPM: 30 days.
const Month = 30 * 24 * time.Hour

// Budget reports whether l is a budget of money (MPD, MPM): sluice's own,
// which no provider announces or names.
func (l Limit) Budget() bool { return l == MPD || l == MPM }

// Period is the window the limit counts over: a minute, a day or, for
// MPM, a month of 30 days.
func (l Limit) Period() time.Duration {
	switch l {
	case RPD, TPD, MPD:
		return 24 * time.Hour
	case MPM:
		return Month
	default:
		return time.Minute
	}
}

// Unit names what the limit counts, for messages: "requests", "tokens",
// "input tokens", "output tokens" or "money".
func (l Limit) Unit() string {
	switch l {
	case RPM, RPD:
		return "requests"
	case MPD, MPM:
		return "money"
	case ITPM:
		return "input tokens"
	case OTPM:
		return "output tokens"
	default:
		return "tokens"
	}
}

// MarshalText writes l by its String, as configuration files name it.
func (l Limit) MarshalText() ([]byte, error) {
	if l >= NumLimits {
		return nil, fmt.Errorf("no limit %d", uint8(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads a limit name such as "tpm" (any case). An unknown
// name's error lists the provider's limits: a budget (mpd, mpm) is set as
// a budget, not among them.
func (l *Limit) UnmarshalText(b []byte) error {
	ls := strings.ToLower(strings.TrimSpace(string(b)))
	for i, n := range limitNames {
		if n == ls {
			*l = Limit(i)
			return nil
		}
	}
	return fmt.Errorf("unknown limit %q (want one of %s)", b, strings.Join(limitNames[:OTPM+1], ", "))
}

// longLimits are the limits of a day or longer: paced, and with room held
// for priority flows.
var longLimits = [...]Limit{RPD, TPD, MPD, MPM}

// Limits holds the allowance of each limit; zero means the limit does not apply.
type Limits [NumLimits]int64

// MarshalText writes ls as String does.
func (ls Limits) MarshalText() ([]byte, error) { return []byte(ls.String()), nil }

// UnmarshalText reads "rpm=30,tpm=8000,tpd=200000", as flags and
// configuration files write limits; the empty string is no limits. Unknown
// names, repeated names and values that are not positive integers are
// errors that name them.
func (ls *Limits) UnmarshalText(b []byte) error {
	out, err := parseLimits(string(b))
	if err != nil {
		return err
	}
	*ls = out
	return nil
}

func parseLimits(s string) (Limits, error) {
	var ls Limits
	if strings.TrimSpace(s) == "" {
		return ls, nil
	}
	seen := map[Limit]bool{}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ls, fmt.Errorf("limit %q: want name=value, e.g. tpm=8000", part)
		}
		var l Limit
		if err := l.UnmarshalText([]byte(name)); err != nil {
			return ls, err
		}
		if l.Budget() {
			return ls, fmt.Errorf("limit %s is a budget of money: set it as a budget (day=5.00,month=100), not among the limits", l)
		}
		if seen[l] {
			return ls, fmt.Errorf("limit %s given twice", l)
		}
		seen[l] = true
		n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(val), "_", ""), 10, 64)
		if err != nil || n <= 0 {
			return ls, fmt.Errorf("limit %s: value %q is not a positive whole number", l, val)
		}
		ls[l] = n
	}
	return ls, nil
}

// String formats the limits that apply as "rpm=30,tpm=8000", as
// UnmarshalText reads them: the budgets (MPD, MPM) are not among them.
func (ls Limits) String() string {
	var b strings.Builder
	for l := range NumLimits {
		if ls[l] == 0 || l.Budget() {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", l, ls[l])
	}
	return b.String()
}

// Cost is what one call is charged: one request, its input tokens and the
// output tokens reserved for it (its max_tokens). Total tokens are input + output.
//
// Each part must be between 0 and MaxCost; Check, Reserve and Wait refuse
// any other cost with an error that names the part and the bound.
//
// A Cost also says what a finished call really used, as the provider
// reported it, to Settle and Fault: its Input and Output (Requests is not
// read there).
type Cost struct {
	Requests int64
	Input    int64
	Output   int64
	// Cached is how many of Input the provider read from its cache, which
	// some price lower (Price.CachedInput): 0 for a call not yet made.
	Cached int64
	// Money is the call's price in billionths of the prices' unit, the
	// charge on MPD and MPM. A governor with a Config.Price sets it from
	// the tokens; one without keeps what the caller gave.
	Money int64
}

// errInvalidCost is wrapped by the error Check, Reserve and Wait return for a
// cost with a negative part or a part over MaxCost. It is a caller's bug, on
// which no caller branches: the error names the part and the bound.
var errInvalidCost = errors.New("invalid cost")

// validate returns an error wrapping errInvalidCost that names the first part
// of c that is negative or over MaxCost, or nil.
func (c Cost) validate() error {
	for _, p := range [...]struct {
		name string
		v    int64
	}{{"Requests", c.Requests}, {"Input", c.Input}, {"Output", c.Output}, {"Cached", c.Cached}, {"Money", c.Money}} {
		switch {
		case p.v < 0:
			return fmt.Errorf("%w: %s %d is negative", errInvalidCost, p.name, p.v)
		case p.v > MaxCost:
			return fmt.Errorf("%w: %s %d is over the bound of %d (governor.MaxCost)", errInvalidCost, p.name, p.v, int64(MaxCost))
		}
	}
	return nil
}

// On returns the amount of c that counts against limit l. Input + output
// saturates at the int64 bounds instead of wrapping.
func (c Cost) On(l Limit) int64 {
	switch l {
	case RPM, RPD:
		return c.Requests
	case ITPM:
		return c.Input
	case OTPM:
		return c.Output
	case MPD, MPM:
		return c.Money
	default:
		return addSat(c.Input, c.Output)
	}
}

// Tokens returns input + output, saturating at the int64 bounds instead of wrapping.
func (c Cost) Tokens() int64 { return addSat(c.Input, c.Output) }
