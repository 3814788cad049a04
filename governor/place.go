package governor

import (
	"container/heap"
	"context"
	"time"
)

// A waiting call whose caller stops waiting can keep its place in line: a
// batch client told to come back later (a gateway's 429) sends the same
// request again, and should not go to the back of the line for it. A kept
// reservation is parked: it leaves its flow's line, so nothing waits on it
// and nothing is admitted for it, but it keeps its fair-queuing tags, and
// Rejoin puts it back where it was. The calls of its flow queued after it
// keep their tags too, so while it is parked its flow is served as if it
// were still in line ahead of them; a place that lapses is given up, and
// they move up by its size as they would if it had left.

// maxKeep bounds how long a place can be kept.
const maxKeep = 24 * time.Hour

// Await blocks until waiting reservation r (from Reserve, or back in line
// by Rejoin) is admitted or ctx is done. When ctx ends first the error is a
// *WaitError whose EstimatedWait says how much longer admission would
// likely have taken; with keep > 0 r keeps its place in line until that
// estimate plus keep has passed (WaitError.KeptUntil; Rejoin takes it
// back), otherwise it leaves the line. A reservation refused while it
// waited returns its error.
func (g *Governor) Await(ctx context.Context, r *Reservation, keep time.Duration) error {
	g.mustBeNew()
	ready := r.Ready()
	for {
		g.mu.Lock()
		now := g.cfg.Now().UnixNano()
		next := g.advance(now)
		changed := g.changedChan()
		state, rerr := r.state, r.err
		g.mu.Unlock()
		switch state {
		case admitted, settled:
			return nil
		case refused:
			return rerr
		case cancelled, parked:
			return &WaitError{Key: g.cfg.Key, Err: context.Canceled}
		}
		var tick <-chan time.Time
		if next > 0 && next != never {
			tick = g.cfg.After(time.Duration(next - now))
		}
		select {
		case <-ready:
			return r.Err()
		case <-changed:
		case <-tick:
		case <-ctx.Done():
			now := g.cfg.Now()
			est := g.EstimateWait(now, r)
			on := g.Blocker(now, r)
			var until time.Time
			if keep > 0 {
				until = now.Add(min(est, maxKeep) + min(keep, maxKeep))
			}
			if !r.leave(now, until) { // admitted, or refused, by another waiter's Advance in the meantime
				return r.Err()
			}
			return &WaitError{Key: g.cfg.Key, Err: ctx.Err(), EstimatedWait: est, On: on, KeptUntil: until}
		}
	}
}

// leave takes a waiting reservation out of line: parked until until, or
// for good when until is zero. It reports false if the reservation was
// admitted or refused meanwhile.
func (r *Reservation) leave(now, until time.Time) bool {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.state != waiting {
		return r.state == cancelled || r.state == parked
	}
	if until.IsZero() {
		g.dequeue(now.UnixNano(), r)
		r.state = cancelled
	} else {
		g.park(now.UnixNano(), r, until.UnixNano())
	}
	g.broadcast()
	return true
}

// park moves waiting r from its flow's line to the parked list, keeping its
// tags and those of the calls behind it.
func (g *Governor) park(now int64, r *Reservation, until int64) {
	f := r.f
	i := f.unqueue(r)
	if i < 0 {
		return
	}
	g.lineChanged(now, f, i)
	r.state = parked
	r.keptUntil = until
	f.parked = append(f.parked, r)
	heap.Push(&g.places, r)
	g.busyChanged(f)
}

// Rejoin puts parked reservation r back in line at the place it kept, and
// reports whether it could: false when its place has lapsed, or r is not
// parked. Await then waits for it.
func (r *Reservation) Rejoin(now time.Time) bool {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	g.lapse(n)
	if r.state != parked {
		return false
	}
	f := r.f
	g.unpark(r)
	if f.prio != nil {
		g.refill(f, n)
		g.touch(f)
		if len(f.queue) == 0 {
			g.urge(f)
		}
	}
	i := len(f.queue)
	for i > 0 && f.queue[i-1].start > r.start {
		i--
	}
	f.queue = append(f.queue, nil)
	copy(f.queue[i+1:], f.queue[i:])
	f.queue[i] = r
	switch {
	case len(f.queue) == 1:
		heap.Push(&g.active, f)
		g.promoUpdate(f, n)
	case i == 0:
		heap.Fix(&g.active, f.index)
		g.promoUpdate(f, n)
	}
	g.creditChanged(f)
	g.busyChanged(f)
	r.state = waiting
	r.keptUntil = 0
	g.broadcast()
	return true
}

// unpark takes r off its flow's parked list.
func (g *Governor) unpark(r *Reservation) {
	f := r.f
	for i, p := range f.parked {
		if p == r {
			last := len(f.parked) - 1
			f.parked[i] = f.parked[last]
			f.parked[last] = nil
			f.parked = f.parked[:last]
			heap.Remove(&g.places, int(r.placePos))
			g.busyChanged(f)
			return
		}
	}
}

// lapse gives up the places whose time has passed: the calls of their flow
// behind them move up by their size.
func (g *Governor) lapse(now int64) {
	for len(g.places.rs) > 0 && g.places.rs[0].keptUntil <= now {
		r := g.places.rs[0]
		g.unpark(r)
		g.giveUpPlace(r) // while it is still parked: see aheadRemove
		r.state = cancelled
	}
}

// placeHeap orders the parked reservations of every flow by when their
// places lapse, so that lapse looks at those that do and no others.
type placeHeap struct{ rs []*Reservation }

func (h *placeHeap) Len() int           { return len(h.rs) }
func (h *placeHeap) Less(i, j int) bool { return h.rs[i].keptUntil < h.rs[j].keptUntil }
func (h *placeHeap) Swap(i, j int) {
	h.rs[i], h.rs[j] = h.rs[j], h.rs[i]
	h.rs[i].placePos = int32(i)
	h.rs[j].placePos = int32(j)
}
func (h *placeHeap) Push(x any) {
	r := x.(*Reservation)
	r.placePos = int32(len(h.rs))
	h.rs = append(h.rs, r)
}
func (h *placeHeap) Pop() any {
	n := len(h.rs) - 1
	r := h.rs[n]
	h.rs[n] = nil
	h.rs = h.rs[:n]
	return r
}

// giveUpPlace moves the calls of r's flow queued or parked behind r up by
// r's size, as dequeue does for a call that leaves the line.
func (g *Governor) giveUpPlace(r *Reservation) {
	f := r.f
	g.aheadRemove(r)
	size := r.finish - r.start
	for _, list := range [2][]*Reservation{f.queue, f.parked} {
		for _, q := range list {
			if q.start > r.start {
				g.aheadRemove(q)
				q.start -= size
				q.finish -= size
				g.aheadAdd(q)
			}
		}
	}
	if f.finish >= r.finish {
		f.finish -= size
	}
	if len(f.queue) > 0 {
		heap.Fix(&g.active, f.index)
	}
}

// EstimateFor estimates how long a call of flow costing c, reserved at now,
// would wait for admission: the estimate Reserve and EstimateWait would
// give it, without reserving anything.
func (g *Governor) EstimateFor(now time.Time, flow string, c Cost) time.Duration {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	g.expire(n)
	g.lapse(n)
	f := g.known(flow)
	return g.estimate(n, f, nil, g.startOf(f, n), g.priced(c))
}

// outlook is what a flow can expect of the key now, for a caller deciding
// when to send: every limit's state, the flow's part of the key while the
// flows with calls waiting share it, its calls waiting, and how long a call
// of a given cost reserved now would wait.
type outlook struct {
	Limits   [NumLimits]LimitStats
	Share    float64 // 0 to 1: the flow's share over that of every flow with calls waiting or parked, itself included
	Waiting  int
	Estimate time.Duration // zero for a zero cost
}

// Outlook returns flow's outlook at now for a call costing c. It is Stats
// narrowed to one flow, for a caller that asks on every call (sluice's
// gateway, for the headers of every answer).
func (in inside) Outlook(now time.Time, flow string, c Cost) outlook {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	g.expire(n)
	g.lapse(n)
	var o outlook
	for l := range NumLimits {
		o.Limits[l] = g.limitStats(n, l)
	}
	f := g.known(flow)
	busy := g.busyShares
	if !f.busy {
		busy += f.share
	}
	o.Share = min(f.share/busy, 1)
	o.Waiting = len(f.queue)
	if c != (Cost{}) {
		o.Estimate = g.estimate(n, f, nil, g.startOf(f, n), c)
	}
	return o
}
