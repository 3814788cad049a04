// Package route chooses, for each call of a flow that may run on several
// targets — provider keys and models, each with a governor of its own —
// the one target the call is made on.
//
// The choice is made before admission, so a call waits in one target's
// line only and is never made on two: Pick names a target, the caller
// reserves on that target's governor and calls it, and Done tells the
// router how the call went. Targets are ranked by what the call would
// cost on each (Cheapest, the default) or in the order listed (Ordered);
// the first whose governor expects to admit the call within MaxWait is
// chosen, and when none does, the one that expects to admit it soonest. A
// target that refuses with a limit it cannot wait out shows it in its
// governor's estimate, which the provider's answer lengthened; a target
// whose calls fail (5xx, overload, timeouts, closed connections) Failures
// times in a row is out for Cooldown, then gets one call to show it is
// back, and is out twice as long each time that call fails, up to
// MaxCooldown.
//
// The router is driven by explicit times, as the governor is, so the
// virtual-time bench drives the same code as production.
package route

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Rule says how a route ranks its targets.
type Rule uint8

const (
	// Cheapest ranks targets by what the call would cost on each (at its
	// governor's price; an unpriced target costs nothing), ties in the
	// order listed.
	Cheapest Rule = iota
	// Ordered ranks targets in the order listed: a fixed primary and its
	// fallbacks.
	Ordered
)

// String is the rule's name in configuration: "cheapest" or "ordered".
func (r Rule) String() string {
	if r == Ordered {
		return "ordered"
	}
	return "cheapest"
}

// ParseRule reads a rule's name; "" is Cheapest.
func ParseRule(s string) (Rule, error) {
	switch strings.TrimSpace(s) {
	case "", "cheapest":
		return Cheapest, nil
	case "ordered":
		return Ordered, nil
	}
	return 0, fmt.Errorf("rule %q: want cheapest or ordered", s)
}

// Defaults of Config.
const (
	DefaultMaxWait     = 30 * time.Second
	DefaultFailures    = 3
	DefaultCooldown    = 30 * time.Second
	DefaultMaxCooldown = 5 * time.Minute
	// MaxTargets bounds a route's targets.
	MaxTargets = 32
	// MaxDuration bounds MaxWait, Cooldown and MaxCooldown.
	MaxDuration = 24 * time.Hour
)

// Target is one place a route's calls can run: a provider key and model,
// with the governor that owns its quota.
type Target struct {
	// Name names the target in errors, stats and records (a provider's
	// name, never its secret).
	Name     string
	Governor *governor.Governor
}

// Config configures a Router.
type Config struct {
	// Name names the route in errors.
	Name    string
	Targets []Target
	Rule    Rule
	// MaxWait is how long a call may wait for a better-ranked target
	// before a later one is used (default DefaultMaxWait; negative: a
	// later target is used as soon as a better one cannot admit at once).
	MaxWait time.Duration
	// Failures is how many failed calls in a row take a target out
	// (default DefaultFailures).
	Failures int
	// Cooldown is how long a target is out the first time (default
	// DefaultCooldown); each failed call after it doubles it, up to
	// MaxCooldown (default DefaultMaxCooldown).
	Cooldown, MaxCooldown time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if len(c.Targets) == 0 {
		return c, fmt.Errorf("route %q: no targets", c.Name)
	}
	if len(c.Targets) > MaxTargets {
		return c, fmt.Errorf("route %q: %d targets, at most %d", c.Name, len(c.Targets), MaxTargets)
	}
	seen := map[string]bool{}
	for i, t := range c.Targets {
		if t.Governor == nil {
			return c, fmt.Errorf("route %q: target %d (%q) has no governor", c.Name, i, t.Name)
		}
		if seen[t.Name] {
			return c, fmt.Errorf("route %q: target %q listed twice", c.Name, t.Name)
		}
		seen[t.Name] = true
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"max wait", &c.MaxWait, DefaultMaxWait}, {"cooldown", &c.Cooldown, DefaultCooldown}, {"max cooldown", &c.MaxCooldown, DefaultMaxCooldown}} {
		if *d.v > MaxDuration {
			return c, fmt.Errorf("route %q: %s %v is over %v", c.Name, d.name, *d.v, MaxDuration)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MaxWait < 0 {
		c.MaxWait = 0
	}
	if c.Cooldown < 0 || c.MaxCooldown < 0 {
		return c, fmt.Errorf("route %q: a negative cooldown", c.Name)
	}
	c.MaxCooldown = max(c.MaxCooldown, c.Cooldown)
	if c.Failures < 0 || c.Failures > 1000 {
		return c, fmt.Errorf("route %q: failures %d: want 1 to 1000", c.Name, c.Failures)
	}
	if c.Failures == 0 {
		c.Failures = DefaultFailures
	}
	return c, nil
}

// Router chooses targets for the calls of one route. It is safe for
// concurrent use.
type Router struct {
	cfg Config

	mu     sync.Mutex
	health []health
	stats  []TargetStats
}

// health is what the router knows of a target's answers.
type health struct {
	fails    int           // failed calls in a row
	outUntil time.Time     // out until then
	cooldown time.Duration // the last time out; 0 while the target is in
	probing  bool          // its call after a time out is in flight
	probeAt  time.Time     // when that call was picked
}

// TargetStats counts what a route did with one target.
type TargetStats struct {
	Name   string
	Picked int64 // calls the route made on it
	Failed int64 // of them, failed (5xx, overload, timeouts, closed connections)
	Outs   int64 // times it was taken out
	// Out says the target is out at the time Stats was asked, and Until
	// when it gets its next call.
	Out   bool
	Until time.Time
}

// New returns a router over cfg's targets.
func New(cfg Config) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, health: make([]health, len(cfg.Targets)), stats: make([]TargetStats, len(cfg.Targets))}
	for i, t := range cfg.Targets {
		r.stats[i].Name = t.Name
	}
	return r, nil
}

// Targets returns the route's targets, in the order listed.
func (r *Router) Targets() []Target { return r.cfg.Targets }

// Name returns the route's name.
func (r *Router) Name() string { return r.cfg.Name }

// Choice is the target Pick chose for a call.
type Choice struct {
	// Index is the target's place in Config.Targets.
	Index int
	// Wait is how long its governor expects the call to wait.
	Wait time.Duration
	// Money is what the call would cost there at most, in billionths.
	Money int64
	// Probe says the target was out and this call shows whether it is back.
	Probe bool
}

// OutError says every target of a route is out (its calls failed), and
// when the first comes back.
type OutError struct {
	Route string
	Until time.Time
	Wait  time.Duration
}

func (e *OutError) Error() string {
	return fmt.Sprintf("route %s: every target is failing; the first gets a call again in %v", e.Route, e.Wait.Round(time.Millisecond))
}

// TooLargeError says a call can never fit any target of a route: each
// target's own refusal, one per target, in the order listed.
type TooLargeError struct {
	Route   string
	Targets []string
	Errs    []*governor.TooLargeError
}

func (e *TooLargeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "route %s: the call can never fit any target:", e.Route)
	for i, err := range e.Errs {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s: %v", e.Targets[i], err)
	}
	return b.String()
}

// Unwrap returns the first target's refusal, so errors.As finds a
// *governor.TooLargeError and callers that know one refusal know this.
func (e *TooLargeError) Unwrap() error { return e.Errs[0] }

// Pick chooses the target for a call of flow at now; cost(i) is the call's
// cost on target i (its estimate for that target's model). A target that
// can never fit the call, or is out, is passed over; when every target
// can never fit it the error is a *TooLargeError, and when every target
// that could is out, an *OutError.
func (r *Router) Pick(now time.Time, flow string, cost func(i int) governor.Cost) (Choice, error) {
	n := len(r.cfg.Targets)
	type cand struct {
		i     int
		money int64
		wait  time.Duration
		probe bool
	}
	var (
		buf      [8]cand
		cands    = buf[:0]
		tooLarge *TooLargeError
		out      time.Time
	)
	r.mu.Lock()
	up := make([]bool, n)
	probe := make([]bool, n)
	for i := range n {
		h := &r.health[i]
		switch {
		case h.cooldown == 0:
			up[i] = true
		case !now.Before(h.outUntil) && (!h.probing || !now.Before(h.probeAt.Add(r.cfg.MaxCooldown))):
			// out no more; one call at a time shows whether it is back (a
			// call never reported frees the turn after MaxCooldown)
			up[i], probe[i] = true, true
		default:
			until := h.outUntil
			if !now.Before(until) {
				// out no more, but its trial call is still out: its answer
				// decides; look again no later than a cooldown from now
				until = now.Add(h.cooldown)
			}
			if out.IsZero() || until.Before(out) {
				out = until
			}
		}
	}
	r.mu.Unlock()
	for i, t := range r.cfg.Targets {
		c := cost(i)
		if err := t.Governor.Check(c); err != nil {
			var tl *governor.TooLargeError
			if !errors.As(err, &tl) {
				return Choice{}, err
			}
			if tooLarge == nil {
				tooLarge = &TooLargeError{Route: r.cfg.Name}
			}
			tooLarge.Targets = append(tooLarge.Targets, t.Name)
			tooLarge.Errs = append(tooLarge.Errs, tl)
			continue
		}
		if !up[i] {
			continue
		}
		cands = append(cands, cand{i: i, money: t.Governor.Price().Of(c), wait: t.Governor.EstimateFor(now, flow, c), probe: probe[i]})
	}
	if len(cands) == 0 {
		if tooLarge != nil && len(tooLarge.Errs) == n {
			return Choice{}, tooLarge
		}
		return Choice{}, &OutError{Route: r.cfg.Name, Until: out, Wait: out.Sub(now)}
	}
	// better reports whether a ranks ahead of b.
	better := func(a, b cand) bool {
		if r.cfg.Rule == Cheapest && a.money != b.money {
			return a.money < b.money
		}
		if r.cfg.Rule == Cheapest && a.wait != b.wait && (a.wait == 0 || b.wait == 0) {
			return a.wait == 0 // of equal price, one that admits now
		}
		return a.i < b.i
	}
	best, soonest := -1, 0
	for k, c := range cands {
		if c.wait <= r.cfg.MaxWait && (best < 0 || better(c, cands[best])) {
			best = k
		}
		if c.wait < cands[soonest].wait || (c.wait == cands[soonest].wait && better(c, cands[soonest])) {
			soonest = k
		}
	}
	if best < 0 {
		best = soonest
	}
	c := cands[best]
	r.mu.Lock()
	if c.probe {
		r.health[c.i].probing, r.health[c.i].probeAt = true, now
	}
	r.stats[c.i].Picked++
	r.mu.Unlock()
	return Choice{Index: c.i, Wait: c.wait, Money: c.money, Probe: c.probe}, nil
}

// Outcome is how a call on a target went, as far as the route cares.
type Outcome uint8

const (
	// OK: the target answered (even with an error that was the request's
	// own fault, such as a 400).
	OK Outcome = iota
	// Failed: the target failed the call — a 5xx, an overload, a timeout, a
	// closed connection: a sign it may be down.
	Failed
	// Refused: the target refused the call for its quota (a 429). Its
	// governor learned what it said; the route's ranking sees it through
	// the governor's estimate.
	Refused
	// Exhausted: the target said its quota is gone for good (a 429
	// insufficient_quota): it is out for MaxCooldown at once.
	Exhausted
	// Abandoned: the call was never made or was cut by the caller; it
	// says nothing of the target.
	Abandoned
)

// Done tells the router how a call Pick chose target i for went, at now.
func (r *Router) Done(now time.Time, i int, o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := &r.health[i]
	wasProbe := h.probing
	h.probing = false
	switch o {
	case OK:
		h.fails, h.cooldown, h.outUntil = 0, 0, time.Time{}
	case Failed:
		r.stats[i].Failed++
		h.fails++
		switch {
		case wasProbe || h.cooldown > 0:
			h.cooldown = min(2*h.cooldown, r.cfg.MaxCooldown)
			h.outUntil = now.Add(h.cooldown)
			r.stats[i].Outs++
		case h.fails >= r.cfg.Failures:
			h.cooldown = r.cfg.Cooldown
			h.outUntil = now.Add(h.cooldown)
			r.stats[i].Outs++
		}
	case Exhausted:
		h.cooldown = r.cfg.MaxCooldown
		h.outUntil = now.Add(h.cooldown)
		r.stats[i].Outs++
	}
}

// Stats returns what the route did with each target, at now.
func (r *Router) Stats(now time.Time) []TargetStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]TargetStats, len(r.stats))
	for i, s := range r.stats {
		h := r.health[i]
		s.Out = h.cooldown > 0 && now.Before(h.outUntil)
		if h.cooldown > 0 {
			s.Until = h.outUntil
		}
		out[i] = s
	}
	return out
}
