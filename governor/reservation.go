package governor

import (
	"container/heap"
	"slices"
	"time"
)

// Reservation is a call's place in line and, once admitted, its charge.
// Reservations are made by a Governor's Reserve and Wait.
type Reservation struct {
	g    *Governor
	f    *flow
	id   uint64
	cost Cost

	start, finish float64 // fair-queuing tags
	size          float64 // dominant share of cost, in seconds
	state         resState
	placePos      int32 // parked: its place in Governor.places
	at            int64 // admitted at
	sent          int64 // its charge counts from then (admission, or Sent)
	minSeq        uint64
	daySeq        uint64
	monSeq        uint64
	fdaySeq       uint64 // on its flow's budget's ledgers
	fmonSeq       uint64
	usedAt        [NumLimits]int64 // what the governor had charged, this call included, when it was admitted
	credit        float64          // what of its flow's credit it took (see priority.go)
	queued        int64            // when it was reserved
	keptUntil     int64            // parked: when its place lapses
	ready         chan struct{}
	err           error      // why a waiting reservation was refused
	lease         *lease     // the lease it was admitted on (Leased), until its charge changes no more
	budgetLease   *lease     // the lease of its flow's budget it was admitted on, as lease
	node          *aheadNode // while waiting or parked: its place in Governor.ahead, once it is kept (ahead.go)
	pushed        bool       // a backfill moved its start later (see backfill): no other may
}

type resState uint8

const (
	waiting resState = iota
	admitted
	settled
	cancelled
	refused // a limit learned lower made it impossible; see Err
	parked  // out of line, its place kept (see place.go)
)

// ID identifies the reservation within its governor (and in Journal records).
func (r *Reservation) ID() uint64 { return r.id }

// Flow is the name of the flow the reservation was made for.
func (r *Reservation) Flow() string { return r.f.name }

// Ready is closed when the reservation is admitted, or refused (Err).
func (r *Reservation) Ready() <-chan struct{} {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if r.ready == nil {
		r.ready = make(chan struct{})
		if r.state != waiting {
			close(r.ready)
		}
	}
	return r.ready
}

// Err reports why a waiting reservation was ended by the governor: a
// *TooLargeError when a limit learned since it was queued (Observe, a
// provider's headers or error) is below what the call needs, so it can never
// be admitted. It is nil otherwise. Ready is closed when it is set.
func (r *Reservation) Err() error {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.err
}

// Admitted reports whether the call may be made (and has not been cancelled).
func (r *Reservation) Admitted() bool {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.state == admitted || r.state == settled
}

// AdmittedAt is when the reservation was admitted (zero if it was not).
func (r *Reservation) AdmittedAt() time.Time {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if r.state == waiting || r.at == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.at)
}

// Cost is what the reservation is charged now.
func (r *Reservation) Cost() Cost {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.cost
}

// Settle records what the call really used, as the provider reported it.
// The input part of the charge becomes the provider's count (at most
// MaxCost); the output part becomes the real output under
// Config.SettleOutput (never below 0 nor above what was reserved) and stays
// max_tokens otherwise. A used with no Input and no Output (the provider
// reported none) keeps the
// charge as reserved. Settling twice, or a reservation that was not
// admitted, does nothing. llm.Feedback holds a provider's usage to what the
// call could have used before settling (see InputFactor); a charge settled
// by hand above that still moves no day pacer more than its period and
// Config.Lag past now.
//
// Settle says the provider accepted the call: an allowance it announces
// for a limit is not taken below the call's charge on it for LearnFor.
func (r *Reservation) Settle(now time.Time, used Cost) { r.settle(now, used, true) }

// settle is Settle; accepted says the provider answered the call with a success.
func (r *Reservation) settle(now time.Time, used Cost, accepted bool) {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.state != admitted {
		return
	}
	n := now.UnixNano()
	g.expire(n)
	c := r.cost
	if used.Input > 0 {
		c.Input = min(used.Input, MaxCost)
		c.Cached = min(max(used.Cached, 0), c.Input)
	}
	if g.cfg.SettleOutput && (used.Input != 0 || used.Output != 0) {
		c.Output = min(max(used.Output, 0), r.cost.Output)
	}
	if !g.cfg.Price.IsZero() && (used.Input != 0 || used.Output != 0) {
		// Money is what the call cost: its real output, whatever the
		// provider's windows keep of it.
		real := c
		real.Output = min(max(used.Output, 0), r.cost.Output)
		c.Money = g.cfg.Price.Of(real)
	}
	g.amend(n, r, c)
	r.doneWithLease()
	r.state = settled
	g.ended(accepted)
	if accepted {
		// Only an answer the provider accepted ends a run of refusals that
		// named no limit: a 5xx or a timeout says nothing of the key's room.
		g.pauseLevel = 0
		g.accept(n, c)
	}
	g.broadcast()
}

// Fault records that the admitted call failed in a way the provider may
// have counted — a 5xx, an overload, a timeout, a reset, a body cut short:
// the charge is kept, as Settle with used (zero: as reserved) keeps it.
// And the flow's next call, its retry, may go ahead of the day pacers once,
// if it is no larger than this one: a failure does not cost the flow a
// pacing slot, and the budget runs ahead of the even pace by at most one
// call per flow, which the pacer then takes back from every flow.
func (r *Reservation) Fault(now time.Time, used Cost) {
	g := r.g
	g.mu.Lock()
	if r.state == admitted {
		r.f.retry = max(r.f.retry, r.size)
	}
	g.mu.Unlock()
	r.settle(now, used, false)
}

// Sent tells the governor when the admitted call actually left for the
// provider, if that is later than its admission (the caller was busy, or
// waited for a connection): its charge then counts from now, in the windows
// of now, so it never ages out here before it does at the provider. Lag
// only has to cover the transit after Sent. Calling Sent on a reservation
// that is not admitted, or with a time before its admission, does nothing.
func (r *Reservation) Sent(now time.Time) {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	if r.state != admitted || n <= r.sent {
		return
	}
	g.expire(n)
	g.minute.amend(r.minSeq, r.cost, Cost{})
	g.day.amend(r.daySeq, r.cost, Cost{})
	r.minSeq = g.minute.add(n, r.cost)
	r.daySeq = g.day.add(n, r.cost)
	if g.monthly() {
		g.month.amend(r.monSeq, r.cost, Cost{})
		r.monSeq = g.month.add(n, r.cost)
	}
	if fb := r.f.budget; fb != nil {
		fb.amend(r.fdaySeq, r.fmonSeq, r.cost, Cost{})
		r.fdaySeq, r.fmonSeq = fb.add(n, r.cost)
	}
	r.sent = n
	r.sentOnLease(n)
}

// Shrink lowers the charge of an admitted reservation before its call is
// made — for instance when fewer items were ready to go than were reserved
// for — and gives the difference back. c must not exceed the current charge
// in any part; otherwise, or if the reservation is not admitted, Shrink does
// nothing and reports false.
func (r *Reservation) Shrink(now time.Time, c Cost) bool {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	c = g.priced(c)
	if r.state != admitted || c.Requests > r.cost.Requests || c.Input > r.cost.Input || c.Output > r.cost.Output ||
		c.Money > r.cost.Money || c.Requests < 0 || c.Input < 0 || c.Output < 0 || c.Cached < 0 || c.Money < 0 {
		return false
	}
	n := now.UnixNano()
	g.expire(n)
	g.amend(n, r, c)
	g.broadcast()
	return true
}

// Cancel gives the reservation up: a waiting one leaves the line; an admitted
// one whose call was not made gives its charge back. Cancelling a settled or
// cancelled reservation does nothing.
func (r *Reservation) Cancel(now time.Time) {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	switch r.state {
	case waiting:
		g.dequeue(now.UnixNano(), r)
	case admitted:
		n := now.UnixNano()
		g.expire(n)
		g.amend(n, r, Cost{})
		r.doneWithLease()
		g.ended(false)
		r.f.admitted--
	case parked:
		g.unpark(r)
		g.giveUpPlace(r)
	default:
		return
	}
	r.state = cancelled
	g.broadcast()
}

// amend replaces an admitted reservation's charge at now.
func (g *Governor) amend(now int64, r *Reservation, c Cost) {
	g.minute.amend(r.minSeq, r.cost, c)
	g.day.amend(r.daySeq, r.cost, c)
	if g.monthly() {
		g.month.amend(r.monSeq, r.cost, c)
	}
	if fb := r.f.budget; fb != nil {
		fb.amend(r.fdaySeq, r.fmonSeq, r.cost, c)
		fb.giveBack(now, subSat(r.cost.Money, c.Money))
	}
	for l := range NumLimits {
		if g.pace[l].on {
			// A charge settled above what was admitted moves the pacer
			// on, never more than a period past now (pacer.bounded).
			g.pace[l].giveBack(now, subSat(r.cost.On(l), c.On(l)))
		}
	}
	if r.credit > 0 {
		// What the call no longer takes goes back to the credit it was taken on.
		back := min(r.credit, max(r.credit-g.size(c), 0))
		r.credit -= back
		r.f.prio.credit = min(r.f.prio.credit+back, g.creditCap(r.f))
		g.creditChanged(r.f)
	}
	r.f.tokens = r.f.tokens.sub(r.cost).add(c)
	r.amendLease(r.cost, c)
	r.cost = c
	if g.cfg.Journal != nil {
		g.cfg.Journal(Charge{ID: r.id, Flow: r.f.name, At: time.Unix(0, r.at), Cost: c})
	}
}

// dequeue takes waiting r out of its flow's line; the calls behind it move
// up by its size.
func (g *Governor) dequeue(now int64, r *Reservation) {
	f := r.f
	i := f.unqueue(r)
	if i < 0 {
		return
	}
	g.aheadRemove(r)
	size := r.finish - r.start
	for _, q := range f.queue[i:] {
		g.aheadRemove(q)
		q.start -= size
		q.finish -= size
		g.aheadAdd(q)
	}
	f.finish -= size
	g.lineChanged(now, f, i)
}

// unqueue takes r out of f's line and returns where it stood, -1 when it
// was not in it. lineChanged must follow.
func (f *flow) unqueue(r *Reservation) int {
	i := slices.Index(f.queue, r)
	if i < 0 {
		return -1
	}
	copy(f.queue[i:], f.queue[i+1:])
	f.queue[len(f.queue)-1] = nil
	f.queue = f.queue[:len(f.queue)-1]
	return i
}

// lineChanged restores the order of the flows after f's line lost its call
// at position i at now: a line left empty leaves the heap (and a priority
// flow the urgent list, and starts earning credit again: none is earned
// while calls wait), a new first call moves the flow in it.
func (g *Governor) lineChanged(now int64, f *flow, i int) {
	if len(f.queue) == 0 {
		f.queue = f.qbuf[:0]
		heap.Remove(&g.active, f.index)
		if f.prio != nil {
			f.prio.creditAt = max(f.prio.creditAt, now)
			g.calm(f)
		}
		g.promoUpdate(f, now)
		g.busyChanged(f)
	} else if i == 0 {
		heap.Fix(&g.active, f.index)
		g.promoUpdate(f, now)
		g.creditChanged(f)
	}
}

// refuse ends waiting reservation r with err.
func (g *Governor) refuse(now int64, r *Reservation, err error) {
	g.dequeue(now, r)
	r.state = refused
	r.err = err
	if r.ready != nil {
		close(r.ready)
	}
}
