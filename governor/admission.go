package governor

import (
	"container/heap"
	"context"
	"errors"
	"math"
	"time"
)

// Reserve queues a call of flow costing c at time now. It never blocks. A
// call that can never fit returns a *TooLargeError at once. The reservation
// is admitted by Advance (or Wait) when its turn comes and it fits.
func (g *Governor) Reserve(now time.Time, flow string, c Cost) (*Reservation, error) {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.relearn(now.UnixNano())
	c = g.priced(c)
	if err := g.check(now.UnixNano(), c); err != nil {
		var tl *TooLargeError
		if errors.As(err, &tl) {
			g.flow(flow).refusals[tl.Limit]++
		}
		return nil, err
	}
	g.start(now.UnixNano())
	f := g.flow(flow)
	if err := g.checkFlow(f, c); err != nil {
		f.refusals[err.Limit]++
		return nil, err
	}
	size := g.size(c)
	if f.prio != nil {
		g.refill(f, now.UnixNano()) // the credit it earned while it had nothing waiting
		g.learnCall(f, c, size)
		g.touch(f)
		if len(f.queue) == 0 {
			g.urge(f)
		}
	}
	g.seq++
	r := &Reservation{g: g, f: f, id: g.seq, cost: c, queued: now.UnixNano()}
	r.size = size
	size /= f.share
	r.start = g.startOf(f, now.UnixNano())
	r.finish = r.start + size
	f.finish = r.finish
	g.aheadAdd(r)
	if len(f.queue) == 0 {
		// Reuse the line's memory: a flow that makes one call at a time
		// allocates nothing for its line.
		f.queue = append(f.qbuf[:0], r)
		f.qbuf = f.queue[:0]
		heap.Push(&g.active, f)
		g.promoUpdate(f, now.UnixNano())
	} else {
		f.queue = append(f.queue, r)
	}
	g.creditChanged(f)
	g.busyChanged(f)
	return r, nil
}

// startOf is the start tag of a call of f reserved at now: behind the
// flow's last call in line, or, when it has none, at the virtual time.
func (g *Governor) startOf(f *flow, now int64) float64 {
	if len(f.queue) > 0 {
		return f.queue[len(f.queue)-1].finish
	}
	// A flow that comes back is not owed what it missed while it had
	// nothing waiting — except when it comes back at the very moment its
	// line emptied (its calls were all admitted at once and it queues the
	// next ones): it keeps its place.
	v := g.vtime
	if now == f.idleAt {
		v = f.idleV
	}
	return math.Max(v, f.finish)
}

// size is c's dominant share, in seconds: of every limit, the time the
// limit needs to replenish what c takes (amount × period ÷ allowance), and
// the largest of these. Minute and day limits so compare on one scale.
func (g *Governor) size(c Cost) float64 {
	var s float64
	for l := range NumLimits {
		if k := g.scale[l]; k > 0 {
			if v := float64(c.On(l)) * k; v > s {
				s = v
			}
		}
	}
	if s == 0 {
		s = 1e-9 // no limits: plain round robin
	}
	return s
}

// Wait reserves on the clock of Config.Now and blocks until the call is
// admitted or ctx is done. When ctx ends first the reservation is cancelled
// and the error is a *WaitError whose EstimatedWait says how much longer
// admission would likely have taken. A call that can never fit returns a
// *TooLargeError at once.
func (g *Governor) Wait(ctx context.Context, flow string, c Cost) (*Reservation, error) {
	g.mustBeNew()
	r, err := g.Reserve(g.cfg.Now(), flow, c)
	if err != nil {
		return nil, err
	}
	if err := g.Await(ctx, r, 0); err != nil {
		return nil, err
	}
	return r, nil
}

// Advance admits, in fair order, every waiting reservation that fits at now,
// and returns the earliest time at which calling it again may admit more
// (the zero Time when nothing waits). Times passed to the governor must not
// go backwards.
func (g *Governor) Advance(now time.Time) time.Time {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	next := g.advance(now.UnixNano())
	if next == never || next == 0 {
		return time.Time{}
	}
	return time.Unix(0, next)
}

func (g *Governor) advance(now int64) int64 {
	g.expire(now)
	g.lapse(now)
	admitted := false
	promoted := g.promoted(now)
	if g.creditedN > 0 && g.prompt(now, promoted) {
		admitted = true
		promoted = g.promoted(now) // the promoted flow may have been a priority flow
	}
	next := int64(0)
	for g.active.Len() > 0 {
		f, how := g.active.flows[0], inTurn
		if promoted != nil && promoted != f {
			f, how = promoted, aheadOfTurn
		}
		r := f.queue[0]
		at, on := g.admitAt(now, r.f, r.cost)
		if at <= now {
			g.admit(now, r, how)
			admitted = true
			// Admitting the front call changes which flow is promoted;
			// backfilling does not (it never admits the promoted flow's).
			promoted = g.promoted(now)
			continue
		}
		if at == never {
			if g.recheck(now, r.cost) {
				continue // an allowance the provider announced was dropped: where does it fit now?
			}
			if err := g.check(now, r.cost); err != nil {
				// A limit learned lower than when the call was queued: it
				// can never fit now, so it fails at once instead of holding
				// the line.
				g.refuse(now, r, err)
				admitted = true // something changed: wake the waiters
				promoted = g.promoted(now)
				continue
			}
		}
		// A call that waits for its own flow's budget waits on nothing the
		// others' calls take: they go on, whatever room they leave it.
		n, wake := g.backfill(now, r, at, how == inTurn, on.Kind == "budget")
		if n > 0 {
			admitted = true
			continue // what was admitted may have made room for more, or changed the line
		}
		next = min(at, wake)
		break
	}
	if admitted {
		g.broadcast()
	}
	if next != 0 {
		// An allowance the provider lowered comes back by itself.
		next = min(next, g.relearnAt)
	}
	return next
}

// backfillScan bounds how many other flows one backfill pass looks at, so a
// blocked line costs a bounded amount of work however many flows wait.
const backfillScan = 32

// backfill admits, while the call at the front of the line (head) cannot
// start before at, the front calls of other flows that fit now and would
// not make head start later — the backfilling rule of batch schedulers
// (EASY): capacity the front call cannot use yet is not left idle. Candidates
// are taken in fair order. It returns how many calls it admitted (or
// refused, as advance does: see refuse) and the earliest time a candidate
// that did not fit may fit.
//
// With one exception, head's start is never delayed. With two token
// limits, the first call in line may wait for room on one (output) while
// the other (input) idles, and a call that would fill that room holds a
// charge there for a whole window, a little past head's start. So one call
// may move head's start later, through a minute limit that has room for
// head now, when:
//   - the delay is less than the time left until head's start: its charge
//     spends more of its window in room head could not use than in room
//     head would have used;
//   - its flow is due in fair order before head's call is done (its start
//     tag is below head's finish tag), so it is this round's call, not one
//     of a flow already ahead of its share — else a flow whose calls always
//     fit would take, a little at a time, the room the others wait for;
//   - head is in its turn (not promoted), and no call delayed it before:
//     head loses less than one window to it.
//
// The unfairness this allows is bounded: a call admitted ahead of its turn
// takes only room the front call could not use before its start (or, once,
// a little more), and its flow's fair-queuing tags advance as if it had
// waited, so its flow is admitted that much later once the front call has
// gone.
func (g *Governor) backfill(now int64, head *Reservation, at int64, inTurn, headOnItsBudget bool) (int, int64) {
	cand, n := g.backfillCandidates(head)
	wake, count := int64(never), 0
	for _, f := range cand[:n] {
		r := f.queue[0]
		t, _ := g.admitAt(now, f, r.cost)
		if t == never && g.recheck(now, r.cost) {
			t, _ = g.admitAt(now, f, r.cost)
		}
		if t == never {
			if err := g.check(now, r.cost); err != nil {
				g.refuse(now, r, err)
				count++ // a change: the caller looks at the line again
				continue
			}
		}
		if t > now {
			wake = min(wake, t)
			continue
		}
		if nt := g.pushedTo(now, head, at, f, r.cost); nt > at && !headOnItsBudget {
			if !inTurn || head.pushed || nt == never || nt-at >= at-now || r.start >= head.finish {
				continue
			}
			head.pushed = true
			at = nt
		}
		g.admit(now, r, aheadOfTurn)
		count++
	}
	return count, wake
}

// backfillCandidates returns up to backfillScan flows with calls waiting,
// other than head's, in fair order.
func (g *Governor) backfillCandidates(head *Reservation) ([backfillScan]*flow, int) {
	var cand [backfillScan]*flow
	n := 0
	for i := 0; i < len(g.active.flows) && n < backfillScan; i++ {
		if f := g.active.flows[i]; f != head.f {
			cand[n] = f
			n++
		}
	}
	// Insertion sort into fair order: n is small.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && g.active.less(cand[j], cand[j-1]); j-- {
			cand[j], cand[j-1] = cand[j-1], cand[j]
		}
	}
	return cand, n
}

// delays reports whether charging c now would make head, which fits at
// at, fit only later.
func (g *Governor) delays(now int64, head *Reservation, at int64, f *flow, c Cost) bool {
	return g.pushedTo(now, head, at, f, c) > at
}

// pushedTo returns when head, which fits at at, would fit if a call of f
// costing c were charged now: at when the charge is gone by then or leaves
// room for both, else when a minute window that has room for head now has
// room for both, or the charge ages out of it. Under a rolling window a
// charge made now is gone by now + period + lag; under a fixed one at the
// end of its window. It returns never when the charge would take room head
// waits for (a window without room for it now), or would hold it back on a
// day window or pacer: a charge there is gone only a day later, and on a
// pacer every charge moves head's start by its own amount.
func (g *Governor) pushedTo(now int64, head *Reservation, at int64, f *flow, c Cost) int64 {
	to := at
	for l := range NumLimits {
		lim, need, extra := g.limits[l], head.cost.On(l), c.On(l)
		if lim == 0 || need == 0 || extra == 0 {
			continue
		}
		if g.hot[0] != nil {
			h := g.held(head.f, l, need, lim, now)
			lim = subSat(lim, h)
			if f.priority > head.f.priority {
				// A call of higher priority takes the room held for it
				// first: head never counted on that room.
				extra = max(subSat(extra, h), 0)
				if extra == 0 {
					continue
				}
			}
		}
		lg := g.ledgerOf(l)
		gone := addSat(addSat(now, lg.period), lg.lag)
		if lg.fixed {
			gone = addSat(lg.start, lg.period)
			if now >= gone-lg.lag {
				gone = addSat(gone, lg.period)
			}
		}
		if at < gone {
			if t := lg.freeAt(now, l, addSat(need, extra), lim, g.phantom[l]); t > at {
				if l.Period() != time.Minute || lg.freeAt(now, l, need, lim, g.phantom[l]) > now {
					return never // a day window, or the room head waits for
				}
				to = max(to, min(t, gone))
			}
		}
		if p := &g.pace[l]; p.on && !g.onCredit(head.f, now, head.size) && head.f.retry < head.size {
			tat := addSat(max(p.tat, now), nanos(float64(extra)*p.perUnit))
			if subSat(tat, p.burst) > at {
				return never
			}
		}
	}
	return to
}

// blocker says what holds call c back at now: the limit (window or day
// pacer) or pause that fits it last, or its turn when it fits.
func (g *Governor) blocker(now int64, f *flow, c Cost) Blocker {
	at, b := g.fit(now, f, c)
	if b.Kind == "" {
		return Blocker{Kind: "turn"}
	}
	if at != never {
		b.Until = time.Unix(0, at)
	}
	return b
}

// fitAt returns the earliest time not before now at which c fits every limit.
func (g *Governor) fitAt(now int64, f *flow, c Cost) int64 {
	at, _ := g.fit(now, f, c)
	return at
}

// fit returns the earliest time not before now at which a call of f
// costing c fits every limit, and what holds it back until then (Kind ""
// when it fits now; Until unset). It assumes expire(now) ran.
//
// A call of f must leave the room held for flows of higher priority (see
// held), and a call of a priority flow may run ahead of a day pacer on its
// credit (see priority.go).
func (g *Governor) fit(now int64, f *flow, c Cost) (int64, Blocker) {
	var b Blocker
	at := now
	if g.pauseUntil > at {
		b, at = Blocker{Kind: "pause"}, g.pauseUntil
	}
	if held, until := g.probing(now); held && until > at {
		b, at = Blocker{Kind: "probe"}, until
	}
	for l := range NumLimits {
		lim, need := g.limits[l], c.On(l)
		if lim == 0 || need == 0 {
			continue
		}
		lg := g.ledgerOf(l)
		if len(g.phantom[l]) > 0 || addSat(addSat(lg.sum.On(l), need), g.heldMax[l]) > lim {
			// Not room for c and all the room that may be held: look closer.
			room := lim
			if g.hot[0] != nil {
				room = subSat(lim, g.held(f, l, need, lim, now))
			}
			if t := lg.freeAt(now, l, need, room, g.phantom[l]); t > at {
				b, at = Blocker{Kind: "limit", Limit: l}, t
			}
		}
		if p := &g.pace[l]; p.on {
			t := p.readyAt()
			if t > now && f.retry >= g.size(c) {
				t = now // the retry of a failed call: see Fault
			}
			if t > now && f.prio != nil {
				g.refill(f, now)
				t = min(t, g.creditTime(f, now, g.size(c)))
			}
			if t > at {
				b, at = Blocker{Kind: "pacing", Limit: l}, t
			}
		}
	}
	if fb := f.budget; fb != nil {
		fb.expire(now)
		// Named even when a limit of the key frees no earlier: the budget
		// then decides when the call goes, and a call that waits for its
		// flow's budget keeps no room on the key (see advance).
		if t, l := fb.fit(now, c); t > now && t >= at {
			b, at = Blocker{Kind: "budget", Limit: l}, t
		}
		if t, l := fb.paced(now, c); t > now && t >= at {
			b, at = Blocker{Kind: "budget", Limit: l}, t
		}
	}
	if g.leased && at == now && !g.leasesFor(now, f, c) {
		// It fits every limit as this process sees it, but the key is
		// shared: it needs room on a lease of this process's (and, for a
		// flow with a budget, on a lease of that budget).
		b, at = Blocker{Kind: "lease"}, now+int64(leaseRetry)
	}
	return at, b
}

// admitAt is fit for an attempt to admit the call: a call that waits
// only for room on a lease tells the grant loop (see LeaseWanted). fit
// itself tells no one, as what only looks calls it too — Demand, which
// the grant loop calls when told, and Stats, Blocker, EstimateWait: told
// by Demand, the grant loop would wake itself and take lease after lease
// while nothing waits for the store's room any more than it did.
func (g *Governor) admitAt(now int64, f *flow, c Cost) (int64, Blocker) {
	at, b := g.fit(now, f, c)
	if b.Kind == "lease" {
		g.wantLease()
	}
	return at, b
}

// admission says how a call is admitted.
type admission uint8

const (
	// inTurn: the front of the whole line, whose start tag the virtual
	// time moves to.
	inTurn admission = iota
	// aheadOfTurn: backfilled or promoted; the virtual time stays.
	aheadOfTurn
	// onItsCredit: ahead of its turn on its priority flow's credit (prompt).
	onItsCredit
)

// admit admits r, the first call in its flow's line.
func (g *Governor) admit(now int64, r *Reservation, how admission) {
	f := r.f
	f.queue[0] = nil
	f.queue = f.queue[1:]
	g.aheadRemove(r)
	g.busyChanged(f)
	if how == inTurn {
		g.vtime = r.start
	}
	if len(f.queue) == 0 {
		f.queue = f.qbuf[:0]
		heap.Remove(&g.active, f.index)
		f.idleAt, f.idleV = now, g.vtime
		if f.prio != nil {
			f.prio.creditAt = now
			g.calm(f)
		}
	} else {
		heap.Fix(&g.active, f.index)
	}
	if g.leased {
		g.chargeLease(now, r)
	}
	r.state = admitted
	g.inflight++
	r.at = now
	r.minSeq = g.minute.add(now, r.cost)
	r.daySeq = g.day.add(now, r.cost)
	if g.monthly() {
		r.monSeq = g.month.add(now, r.cost)
	}
	if fb := f.budget; fb != nil {
		r.fdaySeq, r.fmonSeq = fb.add(now, r.cost)
		fb.take(now, r.cost.Money)
	}
	r.sent = now
	for l := range NumLimits {
		r.usedAt[l] = g.ledgerOf(l).sum.On(l)
	}
	paced := false // a day pacer would have held it
	for l := range NumLimits {
		if p := &g.pace[l]; p.on && p.readyAt() > now && r.cost.On(l) > 0 {
			paced = true
		}
	}
	if paced && f.retry >= r.size {
		f.retry = 0 // the retry of a failed call goes ahead of the pacer once
		paced = false
	}
	if f.prio != nil {
		if paced || how == onItsCredit {
			// Ahead of its turn or of a day pacer, on the flow's credit.
			g.refill(f, now)
			r.credit = min(r.size, max(f.prio.credit, 0))
			f.prio.credit -= r.credit
		}
		g.creditChanged(f)
	}
	for l := range NumLimits {
		if p := &g.pace[l]; p.on {
			p.take(now, r.cost.On(l))
		}
	}
	f.admitted++
	f.lastAdmit = now
	g.promoUpdate(f, now)
	f.tokens = f.tokens.add(r.cost)
	g.addRate(f, now, r.size)
	if g.cfg.Journal != nil {
		g.cfg.Journal(Charge{ID: r.id, Flow: f.name, At: time.Unix(0, now), Cost: r.cost})
	}
	if r.ready != nil {
		close(r.ready)
	}
}
