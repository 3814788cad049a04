package governor

import (
	"sort"
	"time"
)

// Observe adjusts the governor to what the provider reported in the headers
// of a response that belongs to no reservation of this governor: the
// provider is the source of truth, within bounds. An allowance below the
// configured one lowers it (so Check and pacing follow it), to no less than
// its floor and for LearnFor after the provider last said it; one above it
// is ignored; one for a limit none configures is taken, at most MaxCost,
// until the provider says another or a call that can never fit it comes
// LearnFor after it was last said (see LearnFor). A remaining count below
// what the governor believes is left means someone else uses the key, and
// that much room is held until the provider's reset, at most the limit's
// period plus Lag. Every value not taken as said is logged (see
// Config.Logger). Prefer Reservation.Observe for the response to an
// admitted call: it compares with the state the provider saw, not the state
// now.
func (g *Governor) Observe(now time.Time, s Snapshot) {
	g.mustBeNew()
	g.mu.Lock()
	defer g.unlockAndLog()
	n := now.UnixNano()
	g.expire(n)
	used := g.usedNow()
	g.observe(n, n, used, used, s)
}

// usedNow is what the governor has charged on each limit in its current windows.
func (g *Governor) usedNow() [NumLimits]int64 {
	var used [NumLimits]int64
	for l := range NumLimits {
		used[l] = g.ledgerOf(l).sum.On(l)
	}
	return used
}

// Observe adjusts the governor to the headers of the response to r's call.
//
// The provider counted the call when it arrived, some time after it was
// admitted, and other calls in flight may have arrived before it or after
// it. A remaining count below what the governor expects is someone else's
// use of the key only if it is below both what the governor had charged
// when it admitted the call (calls admitted later, but arrived first, are
// not someone else's) and what it has charged now (charges that aged out or
// settled since are not either).
func (r *Reservation) Observe(now time.Time, s Snapshot) {
	g := r.g
	g.mu.Lock()
	defer g.unlockAndLog()
	if r.state != admitted && r.state != settled {
		return
	}
	n := now.UnixNano()
	g.expire(n)
	g.observe(n, r.at, r.usedAt, g.usedNow(), s)
}

// observe applies snapshot s, taken by the provider at about time at, when
// the governor had charged usedAt; it has charged usedNow at now.
func (g *Governor) observe(now, at int64, usedAt, usedNow [NumLimits]int64, s Snapshot) {
	announced := false
	for l := range NumLimits {
		if o := s[l]; o.Known && o.Limit > 0 {
			g.announce(now, l, o.Limit, o.Source)
			announced = true
		}
	}
	if announced {
		g.relimit(now)
	}
	for l := range NumLimits {
		o := s[l]
		lim := g.limits[l]
		if !o.Known || lim == 0 || o.Reset <= 0 {
			continue
		}
		reset := o.Reset
		if most := l.Period() + g.cfg.Lag; reset > most {
			g.notice(now, notice{Limit: l, LimitKnown: true, Kind: "reset", Source: o.Source, Said: int64(reset), Used: int64(most)})
			reset = most
		}
		until := addSat(at, int64(reset))
		if until <= now {
			continue
		}
		room := subSat(lim, max(usedAt[l], usedNow[l]))
		for _, p := range g.phantom[l] {
			if p.until > at {
				room = subSat(room, p.amount)
			}
		}
		// Remaining counts are often rounded (Anthropic: to thousands) and
		// may lag a little: only a gap beyond that noise is someone else's use.
		noise := lim / 50
		if o.Remaining%1000 == 0 {
			noise += 1000
		}
		if gap := subSat(room, max(o.Remaining, 0)); gap > noise {
			g.phantom[l] = addPhantom(g.phantom[l], phantom{until: until, amount: gap})
		}
	}
}

// Rejected records that the provider refused a call naming limit l: that
// limit is taken as full until retryAfter has passed (or, with no retry time,
// until a whole period of it has). Other limits, and other keys, go on. A
// retryAfter longer than l's period plus Lag is cut to that, and logged: no
// provider's answer holds a limit longer than its window takes to empty.
func (in inside) Rejected(now time.Time, l Limit, retryAfter time.Duration) {
	g := in.g
	g.mu.Lock()
	defer g.unlockAndLog()
	if l >= NumLimits {
		return
	}
	n := now.UnixNano()
	g.expire(n)
	if retryAfter <= 0 {
		retryAfter = l.Period()
	}
	if most := l.Period() + g.cfg.Lag; retryAfter > most {
		g.notice(n, notice{Limit: l, LimitKnown: true, Kind: "retry-after", Source: "retry-after", Said: int64(retryAfter), Used: int64(most)})
		retryAfter = most
	}
	lim := g.limits[l]
	if lim == 0 {
		// The provider enforces a limit we were not told of; hold every call
		// for the retry time rather than guess its size.
		g.pauseUntil = max(g.pauseUntil, addSat(n, int64(retryAfter)))
		return
	}
	g.phantom[l] = addPhantom(g.phantom[l], phantom{until: addSat(n, int64(retryAfter)), amount: lim})
}

// RejectedUnclassified records a rate-limit rejection that named no limit:
// the key pauses briefly, longer each time in a row (1 s, 2 s, 4 s … 60 s),
// until a call succeeds (Settle; a Fault does not count).
func (in inside) RejectedUnclassified(now time.Time) {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	d := time.Second << min(g.pauseLevel, 6)
	d = min(d, time.Minute)
	g.pauseLevel++
	g.pauseUntil = max(g.pauseUntil, now.UnixNano()+int64(d))
}

// Restore loads charges recorded by a Journal before a restart, so the day's
// usage — the month's, under a budget per month — is not forgotten. Call it
// once, right after New and before any other call. Charges older than
// Kept, and charges whose Cost is not valid (a part negative or over
// MaxCost), are ignored. A charge keeps the money it was journaled with;
// one journaled with none is priced at Config.Price.
func (g *Governor) Restore(now time.Time, charges []Charge) {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	cs := append([]Charge(nil), charges...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].At.Before(cs[j].At) })
	for _, c := range cs {
		at := c.At.UnixNano()
		if at > n || at <= n-int64(g.kept()) || c.Cost.validate() != nil {
			continue
		}
		cost := c.Cost
		if cost.Money == 0 {
			cost = g.priced(cost) // journaled before money was
		}
		if g.monthly() {
			g.month.add(at, cost)
		}
		if at > n-int64(24*time.Hour) {
			g.day.add(at, cost)
		}
		if at > n-int64(time.Minute) {
			g.minute.add(at, cost)
		}
		if f := g.flows[c.Flow]; f != nil && f.budget != nil {
			if at > n-int64(24*time.Hour) {
				f.budget.day.add(at, cost)
			}
			if f.budget.limits[MPM] > 0 {
				f.budget.month.add(at, cost)
			}
		}
		if c.ID > g.seq {
			g.seq = c.ID
		}
	}
	g.expire(n)
	// The pacers start with what credit the restored day leaves (see
	// pacer): none after a day at the even pace, the whole burst after none.
	g.start(n)
}

// Kept is how far back Restore takes charges, and so how long a Journal's
// charges must be kept: a day, or a month (30 days) under a budget per
// month.
func (g *Governor) Kept() time.Duration {
	g.mustBeNew()
	return g.kept()
}

func (g *Governor) kept() time.Duration {
	if g.monthly() {
		return Month
	}
	for _, f := range g.cfg.Flows {
		if f.Budget.Month > 0 {
			return Month
		}
	}
	return 24 * time.Hour
}

// Stats is a view of a governor at one moment.
type Stats struct {
	Key    string
	Limits [NumLimits]LimitStats
	Flows  []FlowStats // sorted by name
	// Priced says the key has a Price: the flows' Tokens.Money is what
	// their calls cost.
	Priced bool
}

// LimitStats is one limit's state.
type LimitStats struct {
	Limit Limit
	Max   int64 // allowance in force (0: the limit does not apply)
	// Configured is the configured allowance (0: none). Max differs from
	// it while an allowance the provider announced is in force.
	Configured int64
	// LearnedUntil is when the allowance the provider announced lapses
	// unless it says it again, for a configured limit; for one nobody
	// configured, from when a call that can never fit it drops it (see
	// LearnFor). Zero when none is in force.
	LearnedUntil time.Time
	Used         int64 // charged in the current window, including others' use seen in headers
	Capacity     int64 // what is left now
	// ResetAt is when everything the window counts now will have aged out
	// of it (now when it counts nothing).
	ResetAt time.Time
	// PacedUntil is, for a limit paced over its period (RPD and TPD with a
	// DayBurst, and the budgets), when its pace lets the next call start:
	// now or earlier when one may start now, later while calls wait for the
	// even pace however much of the window is left. Zero for a limit not
	// paced. A flow's priority credit and the retry of a failed call may go
	// ahead of it.
	PacedUntil time.Time
}

// FlowStats is one flow's state and totals.
type FlowStats struct {
	Name     string
	Weight   float64
	Priority int
	// Share is its weight × PriorityFactor^priority: its part of the key
	// while flows with calls waiting share it is its Share over theirs.
	Share   float64
	Waiting int
	// Parked counts its calls out of line whose places are kept (see
	// Governor.Await).
	Parked     int
	Admitted   int64
	Tokens     Cost // charged to its admitted calls, as settled
	Rejections [NumLimits]int64
	// Refusals counts its calls refused up front, by the limit they could
	// never fit (see TooLargeError).
	Refusals [NumLimits]int64
	// WaitingOn says what holds the flow's first waiting call back (zero
	// when nothing waits).
	WaitingOn Blocker
	// Budget is the flow's own budget (FlowConfig.Budget), in billionths
	// as MPD and MPM; Spent what its calls cost in each one's period (0
	// without a budget).
	Budget, Spent Limits
}

// RejectedFlow counts a provider rejection of flow's call naming limit l in
// the flow's stats (FlowStats.Rejections). It changes no admission state;
// Rejected does that.
func (in inside) RejectedFlow(flow string, l Limit) {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.flow(flow).rejections[l]++
}

// RefusedFlow counts a call of flow refused up front because it can never
// fit limit l, when the caller found so with Check (Reserve counts its own
// refusals), in the flow's stats (FlowStats.Refusals). It changes no
// admission state.
func (in inside) RefusedFlow(flow string, l Limit) {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.flow(flow).refusals[l]++
}

// limitStats is l's state at now. It assumes expire(now) ran.
func (g *Governor) limitStats(now int64, l Limit) LimitStats {
	used := g.ledgerOf(l).sum.On(l)
	for _, p := range g.phantom[l] {
		used = addSat(used, p.amount)
	}
	st := LimitStats{Limit: l, Max: g.limits[l], Configured: g.cfg.Limits[l], Used: used, Capacity: max(subSat(g.limits[l], used), 0),
		ResetAt: time.Unix(0, g.ledgerOf(l).resetAt(now, l))}
	if lr := &g.learned[l]; lr.allowance > 0 {
		st.LearnedUntil = time.Unix(0, lr.until)
	}
	if p := &g.pace[l]; p.on {
		st.PacedUntil = time.Unix(0, p.readyAt())
	}
	return st
}

// Stats returns the governor's state at now.
func (g *Governor) Stats(now time.Time) Stats {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(now.UnixNano())
	st := Stats{Key: g.cfg.Key, Priced: !g.cfg.Price.IsZero()}
	n := now.UnixNano()
	for l := range NumLimits {
		st.Limits[l] = g.limitStats(n, l)
	}
	for _, f := range g.flows {
		fs := FlowStats{
			Name: f.name, Weight: f.weight, Priority: f.priority, Share: f.share, Waiting: len(f.queue), Parked: len(f.parked),
			Admitted: f.admitted, Tokens: f.tokens, Rejections: f.rejections, Refusals: f.refusals,
		}
		if len(f.queue) > 0 {
			fs.WaitingOn = g.blocker(n, f, f.queue[0].cost)
		}
		if fb := f.budget; fb != nil {
			fb.expire(n)
			fs.Budget = fb.limits
			for _, l := range [...]Limit{MPD, MPM} {
				if fb.limits[l] > 0 {
					fs.Spent[l] = fb.ledgerOf(l).sum.Money
				}
			}
		}
		st.Flows = append(st.Flows, fs)
	}
	sort.Slice(st.Flows, func(i, j int) bool { return st.Flows[i].Name < st.Flows[j].Name })
	return st
}
