package governor

import "time"

// pacer spreads a day limit over the day (GCRA): each unit charged moves the
// theoretical arrival time tat on by period/limit, and a call may start when
// tat is at most burst ahead of now. So a backlog spends the day's budget at
// an even pace instead of in the morning, and an urgent call arriving later
// still finds room within one call's worth of time. The budgets are paced
// the same way: MPD over its day, MPM over its 30 days with as large a part
// of the month as burst (30 × DayBurst), so a month's money lasts the month.
//
// Starting. An idle key answers at once: a pacer starts with credit, as
// much as the burst, and pays it back over its first day, running at day/(day+burst) of the even pace (24/25 with the
// default hour). Without the pay-back, a burst spent at the start and
// followed by a backlog at the even pace would still be in a rolling day
// window when the day's pace had filled the rest of it, a day later: the
// window itself would stop every flow, priority work too, until the burst
// aged out — the burn-then-stall pacing exists to prevent, a day late. The
// credit is the most that keeps the day window within the paced budget at
// every moment of that day, as what it holds already (restored after a
// restart) ages out: a fresh key gets the whole burst, a key restored after
// a day at the even pace none (and then runs at the even pace, as before
// the restart).
//
// The credit is put in hand as the provider accepts calls: each accepted
// call puts twice its own charge in hand, so, as in TCP's slow start, the
// calls that go at once double with each round of answers (1, 2, 4 …) and
// a key whose limits are not all known (Groq
// announces no OTPM) meets a limit it was not told of with one call or two
// in flight, not with the whole burst: the first refusal teaches the limit.
// Ten calls in a row, each sent when the last has answered, all go at once.
type pacer struct {
	on      bool
	perUnit float64 // nanoseconds per unit
	burst   int64   // nanoseconds
	// most is how far past now a charge may move tat, in nanoseconds: the
	// limit's period plus Config.Lag (see bounded).
	most int64
	tat  int64
	// payUntil is when the pacer ends paying back the credit it started
	// with; 0 when it is not paying back.
	payUntil int64
	// unreleased is the start credit not yet put in hand, in units of the
	// limit.
	unreleased float64
}

func (g *Governor) setPacers() {
	for _, l := range longLimits {
		p := &g.pace[l]
		lim := g.limits[l]
		p.on = lim > 0 && g.cfg.DayBurst > 0
		if !p.on {
			continue
		}
		p.perUnit = float64(l.Period()) / (float64(lim) * g.cfg.DayPace)
		p.burst = g.burstOf(l)
		p.most = g.paceMost(l)
		if p.payUntil != 0 {
			p.perUnit *= g.payBack(l)
		}
	}
}

// burstOf is how far ahead of its even pace limit l may be spent:
// DayBurst for a day, as large a part of a month for MPM (30 × DayBurst).
func (g *Governor) burstOf(l Limit) int64 {
	return int64(g.cfg.DayBurst) * int64(l.Period()/(24*time.Hour))
}

// paceMost is how far past now a charge may move the theoretical arrival
// time of limit l's pacer: l's period plus Config.Lag, the longest the
// governor holds a limit for anything a provider says (see pacer.bounded).
func (g *Governor) paceMost(l Limit) int64 {
	return addSat(int64(l.Period()), int64(g.cfg.Lag))
}

// payBack is how much slower than the even pace l's pacer runs while it
// pays back the credit it started with.
func (g *Governor) payBack(l Limit) float64 {
	period := float64(l.Period())
	return (period + float64(g.burstOf(l))) / period
}

// startPacers starts the pacers at now, with the day ledger holding what
// was charged before (restored, or nothing): each with the credit
// startCredit allows in hand, paying it back for a day, or, with none, with
// nothing in hand at the even pace.
func (g *Governor) startPacers(now int64) {
	for _, l := range longLimits {
		p := &g.pace[l]
		if !p.on {
			continue
		}
		slow := p.perUnit * g.payBack(l)
		credit := min(g.startCredit(now, l, slow), float64(p.burst)/slow)
		if credit < 1 {
			p.tat = addSat(now, p.burst)
			continue
		}
		p.payUntil = addSat(now, int64(l.Period()))
		p.perUnit = slow
		p.tat = addSat(now, p.burst)
		p.unreleased = credit
	}
}

// release puts more of the pacers' start credit in hand once the provider
// accepted a call costing c: twice the call's charge.
func (g *Governor) release(c Cost) {
	for _, l := range longLimits {
		p := &g.pace[l]
		if !p.on || p.unreleased <= 0 {
			continue
		}
		x := min(p.unreleased, 2*max(float64(c.On(l)), 1))
		p.tat = subSat(p.tat, nanos(x*p.perUnit))
		p.unreleased -= x
	}
}

// startCredit is how much of day limit l a pacer starting at now may hand
// out at once and pay back at perUnit for a day: the most that keeps the
// day window within the paced budget at every moment of that day, as the
// charges it holds age out and the pacer adds its own.
func (g *Governor) startCredit(now int64, l Limit, perUnit float64) float64 {
	budget := float64(g.limits[l]) * g.cfg.DayPace
	lg := g.ledgerOf(l)
	held := float64(lg.sum.On(l))
	credit := budget - held
	for _, e := range lg.entries[lg.head:] {
		// Just before e ages out the window holds it and all after it.
		credit = min(credit, budget-held-float64(lg.agesOut(e)-now)/perUnit)
		held -= float64(e.cost.On(l))
	}
	return max(min(credit, budget-float64(l.Period())/perUnit), 0)
}

// endPayBack ends a pacer's pay-back once its day is over. Its tat stays:
// a backlog at the slower pace goes on at the even one from the slot it
// had, with nothing more in hand.
func (g *Governor) endPayBack(now int64) {
	for _, l := range longLimits {
		if p := &g.pace[l]; p.payUntil != 0 && now >= p.payUntil {
			p.payUntil = 0
			g.setPacers()
		}
	}
}

func (p *pacer) readyAt() int64 { return subSat(p.tat, p.burst) }

// take and giveBack saturate: a charge made under a larger allowance and
// given back after the provider reported a smaller one is worth more time
// than an int64 holds. Both are bounded (see bounded).
func (p *pacer) take(now int64, n int64) {
	p.tat = p.bounded(now, addSat(max(p.tat, now), nanos(float64(n)*p.perUnit)))
}

// giveBack moves tat back for n units a call no longer takes; a negative n
// is a call settled above its admission charge, and moves it on.
func (p *pacer) giveBack(now int64, n int64) {
	p.tat = p.bounded(now, subSat(p.tat, nanos(float64(n)*p.perUnit)))
}

// bounded returns tat, at most the limit's period plus lag (most) past now.
// No charge, however large, can make the pacer hold calls back longer than
// that: a provider that reported a usage of a billion tokens for a 10-token
// prompt once moved a day pacer's tat on by 104 days and held every flow
// for them, where a window the same charge fills frees itself within its
// period. Only a charge of about the whole limit gets that far, and it
// could never have been paced within one period anyway: the pacer forgets
// the part of it past the bound, as the window forgets it a period on.
func (p *pacer) bounded(now, tat int64) int64 {
	return min(tat, addSat(now, p.most))
}
