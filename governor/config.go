package governor

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sluice-dev/sluice/internal/clock"
)

// FlowConfig describes one flow: a job, a tenant, a function drawing on the key.
type FlowConfig struct {
	Name string
	// Weight is the flow's share among flows of equal priority. Default 1
	// (0 means the default). Must be between MinWeight and MaxWeight.
	Weight float64
	// Priority: higher is more urgent. Each step of priority multiplies the
	// flow's share by Config.PriorityFactor: a reserved, larger share, never
	// an absolute one, so a lower-priority flow is slowed but never stopped.
	// Must be between MinPriority and MaxPriority.
	Priority int
	// Budget is money the flow's calls may cost, per day and per month,
	// beside the key's own budget (it needs Config.Price). A flow whose
	// budget is spent waits for it while the other flows go on: its calls
	// never hold the key's line.
	Budget Budget
}

// maxPriorityFactor bounds Config.PriorityFactor, so that the share ratio
// across the priority range stays finite (see MinPriority).
const maxPriorityFactor = 16

// Config configures a Governor. The zero value of every field is a useful default.
type Config struct {
	// Key names the provider key (and model) in errors and stats. Never the secret itself.
	Key string
	// Limits is the allowance of each limit; 0 means the limit does not
	// apply (until a provider announces one). A configured allowance is a
	// ceiling: the provider can lower it, within a floor and for a while
	// (LearnFor, LearnFloor), never raise it. A governor told no limit at
	// all probes the key: its first call goes alone, and each call the
	// provider accepts lets one more be in flight, for its first minute at
	// most (Blocker "probe"), so it learns the limits from a call or two
	// instead of from a burst of refusals.
	Limits Limits
	// FixedWindows says the provider counts per window starting at whole
	// minutes or days (UTC), and the whole allowance comes back at the
	// boundary. Default false: rolling windows, in which each charge ages
	// out exactly one period after it was made.
	FixedWindows bool
	// SettleOutput says the provider keeps only a call's real output once
	// it ends, as Anthropic documents for OTPM: Settle corrects the output
	// part of the charge to it. Default false: the admission charge (input +
	// max_tokens) stands, and only the input estimate is corrected to the
	// provider's count (Groq, OpenAI).
	SettleOutput bool
	// Price is what a call on the key costs, in money per million tokens.
	// With a price, each call's Cost.Money is set from its tokens — on
	// admission the worst case, every input token at the input price and
	// max_tokens of output; settled with what the provider reports — and
	// the budgets MPD and MPM apply to it. A budget needs a price.
	Price Price
	// Flows lists known flows. A flow not listed is created on first use
	// with weight 1 and priority 0.
	Flows []FlowConfig
	// PriorityFactor multiplies a flow's share per step of priority. Default 4.
	// Must be between 1 and 16.
	PriorityFactor float64
	// DayBurst is how far ahead of an even pace a day limit (RPD, TPD) may be
	// spent: day budgets are paced at limit/24h so the budget lasts the day,
	// with this much burst. Default 1h. Negative disables pacing. At most 24h.
	DayBurst time.Duration
	// DayPace is the fraction of a day limit's even rate that pacing aims
	// at. Default 0.995: just under the even rate, so under a rolling day
	// window the window itself never fills, and admissions follow the
	// pacer's even, fair rhythm instead of echoing whatever the window held
	// a day before.
	DayPace float64
	// Lag is how much later than the governor's clock the provider may
	// count a call: the time a request takes to reach it. Under a rolling
	// window a charge ages out this much later than one period after it was
	// admitted; under a fixed window a call made this close before a
	// boundary also counts after it. So a call admitted the instant an old
	// charge ages out here does not reach the provider while that charge
	// still counts there. Default 0, right for an explicit clock shared
	// with the provider (the bench); on the wall clock use the request's
	// transit time with some margin (sluice's engine uses 2s, its gateway 1s).
	// At most MaxLag, a minute. A limit a provider's 429 names is held for
	// at most its period plus Lag, whatever retry-after came with it.
	Lag time.Duration
	// PromoteAfter bounds how long a flow can go without a call admitted
	// while it has one waiting: a flow whose first waiting call has waited
	// this long, and whose last admission is as old, goes to the front of
	// the line, oldest first, ahead of fair order, and priority flows' prompt
	// admissions may not delay it. A flow is promoted only once it has
	// waited at least as long as its share of the key takes to earn the
	// call, so promotion never gives a flow more than its share. Fair order
	// alone can hold a flow back for long after calls of it were admitted
	// ahead of their turn (backfilling), or while priority work takes most
	// of the key. Default 35m: a flow promoted then is admitted within the
	// hour sluice's monitoring calls a stall. Negative disables it.
	PromoteAfter time.Duration
	// Logger receives a line for each value a provider announced that the
	// governor did not take as said — an allowance above the configured
	// one, over MaxCost or below its floor (see LearnFloor), a reset or a
	// wait longer than its limit's period plus Lag, a call's usage beyond
	// what the call could have used (see InputFactor) — with what the provider
	// said, what was used instead and where the provider said it, at most
	// once per limit, kind and source every NoticeEvery (a value above its
	// bound and one below it count as two kinds). Default: slog.Default().
	Logger *slog.Logger
	// Journal, if set, is called with every charge and every correction of
	// one, so the day's usage can be persisted and given back to Restore
	// after a restart. It is called with the governor's lock held: it must
	// not block (buffer, and write elsewhere).
	Journal func(Charge)
	// Now is the clock Wait and Await read. Default time.Now. Every other
	// method takes the time as an argument.
	Now func() time.Time
	// Speed is how many times as fast as the wall clock Now runs, for
	// simulations in compressed time: the default After divides what Wait
	// and Await sleep by it. Default 1.
	Speed float64
	// After is the timer of the clock of Now: it returns a channel that
	// receives once d has passed on that clock. Wait and Await sleep on it
	// until the next time their call may be admitted (and wake sooner when
	// something in the governor changes, or their context ends). Default: a
	// wall-clock timer of d divided by Speed. Set together with Now, it
	// runs Wait on a clock of one's own, such as a test's fake clock that
	// is advanced by hand instead of waited for; Speed then plays no part.
	After func(d time.Duration) <-chan time.Time
}

// Charge is one admitted call's charge, for persistence.
type Charge struct {
	ID   uint64
	Flow string
	At   time.Time
	Cost Cost // a cancelled call is recorded again with a zero Cost
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.PriorityFactor == 0 {
		out.PriorityFactor = 4
	}
	if out.DayBurst == 0 {
		out.DayBurst = time.Hour
	}
	if out.PromoteAfter == 0 {
		out.PromoteAfter = 35 * time.Minute
	}
	if out.DayPace == 0 {
		out.DayPace = 0.995
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.After == nil {
		speed := out.Speed
		out.After = func(d time.Duration) <-chan time.Time {
			// The governor's clock may run faster than the wall clock.
			return wallAfter(clock.Real(speed, d))
		}
	}
	return out
}

// wallAfter is the wall clock's timer the default After sleeps on; a test
// replaces it to see what it is asked for.
var wallAfter = time.After

func (c *Config) prefix() string {
	if c.Key == "" {
		return "governor: "
	}
	return "governor " + c.Key + ": "
}

func (c *Config) validate() error {
	for l := range NumLimits {
		if c.Limits[l] < 0 {
			return fmt.Errorf("%slimit %s is negative (%d)", c.prefix(), l, c.Limits[l])
		}
	}
	if err := c.Price.validate(); err != nil {
		return fmt.Errorf("%s%w", c.prefix(), err)
	}
	if (c.Limits[MPD] > 0 || c.Limits[MPM] > 0) && c.Price.IsZero() {
		return fmt.Errorf("%sa budget (%s) needs a Price to charge calls by", c.prefix(), c.Limits.budgets())
	}
	if c.Speed < 0 || math.IsNaN(c.Speed) || math.IsInf(c.Speed, 0) {
		return fmt.Errorf("%sSpeed must be a finite number ≥ 0, got %v", c.prefix(), c.Speed)
	}
	if c.Lag < 0 || c.Lag > MaxLag {
		return fmt.Errorf("%sLag must be between 0 and %v, got %v", c.prefix(), MaxLag, c.Lag)
	}
	if c.DayBurst > 24*time.Hour {
		return fmt.Errorf("%sDayBurst must be at most 24h, got %v", c.prefix(), c.DayBurst)
	}
	if c.DayPace < 0 || c.DayPace > 1 || math.IsNaN(c.DayPace) {
		return fmt.Errorf("%sDayPace must be in (0, 1], got %v", c.prefix(), c.DayPace)
	}
	if !(c.PriorityFactor >= 1 && c.PriorityFactor <= maxPriorityFactor) {
		return fmt.Errorf("%sPriorityFactor must be at least 1 and at most %d, got %v", c.prefix(), maxPriorityFactor, c.PriorityFactor)
	}
	seen := map[string]bool{}
	for _, f := range c.Flows {
		if f.Name == "" {
			return fmt.Errorf("%sa flow has no name", c.prefix())
		}
		if seen[f.Name] {
			return fmt.Errorf("%sflow %q listed twice", c.prefix(), f.Name)
		}
		seen[f.Name] = true
		if err := f.Budget.Validate(c.Price); err != nil {
			return fmt.Errorf("%sflow %q: %w", c.prefix(), f.Name, err)
		}
		if f.Weight != 0 && !(f.Weight >= MinWeight && f.Weight <= MaxWeight) {
			return fmt.Errorf("%sflow %q: weight must be positive, between %g and %g, got %v", c.prefix(), f.Name, float64(MinWeight), float64(MaxWeight), f.Weight)
		}
		if f.Priority < MinPriority || f.Priority > MaxPriority {
			return fmt.Errorf("%sflow %q: priority must be between %d and %d, got %d", c.prefix(), f.Name, MinPriority, MaxPriority, f.Priority)
		}
	}
	return nil
}
