package governor

import (
	"slices"
	"time"
)

// leaseRetry is how soon a call held back for want of a lease looks again,
// if no grant wakes it first.
const leaseRetry = 50 * time.Millisecond

// leaseMost is the most of each part one lease may grant, and so the
// most Demand asks for: MaxCost.
var leaseMost = Cost{Requests: MaxCost, Input: MaxCost, Output: MaxCost, Money: MaxCost}

// demandPerFlow is how many of a flow's waiting calls Demand counts at most:
// a lease is sized for what can go soon, not for a backlog.
const demandPerFlow = 8

// leaseUse is what a lease was used for, as the governor knows it now.
type leaseUse struct {
	ID string
	// Used is the charges of the calls admitted on the lease, as they are
	// now — requests, tokens and, on a priced key, money: it goes down as
	// calls settle for less than they reserved.
	Used Cost
	// Last is when the last call on the lease was sent (the lease's grant
	// time when none was).
	Last time.Time
	// Closed reports that the lease ended (LeaseUses reports only those):
	// Used only goes down from now on, and the lease is reported again if
	// it does.
	Closed bool
	// Final reports that Used changes no more: the lease ended and every
	// call admitted on it settled or was cancelled. It is reported no more.
	Final bool
}

// lease is an open or closing lease of the governor.
type lease struct {
	id      string
	granted Cost
	used    Cost
	at      int64 // granted at
	until   int64
	last    int64 // when the last call on it was sent
	live    int   // calls admitted on it that may still change its use
	closed  bool
	dirty   bool // changed since LeaseUses last reported it
}

// fits reports whether c fits the room left on the lease: its requests,
// tokens and money (a priced call's worst case; a lease of a key without a
// price grants none, and its calls cost none).
func (ls *lease) fits(c Cost) bool {
	return roomFor(ls.granted.sub(ls.used), c)
}

// roomFor reports whether room, what is left of a lease, holds c.
func roomFor(room, c Cost) bool {
	return c.Requests <= room.Requests && c.Input <= room.Input && c.Output <= room.Output && c.Money <= room.Money
}

// Leased makes the governor admit a call only on room of a lease given to
// it with Grant, on top of every limit: for a key several processes share,
// whose leases someone else keeps within the limits in aggregate
// (internal/quota's Cluster does, from sluice's store). Calls wait with Blocker "lease" until a
// lease has room; LeaseWanted, Demand and LeaseUses tell the grantor what
// is needed and what was used. Call it before the first call is reserved.
func (in inside) Leased() {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leased = true
}

// Grant gives the governor a lease: capacity c on the key, granted to this
// process alone until until (on this process's clock: nothing is admitted
// on it from then on). c's Requests, Input, Output and Money are the room
// (its Cached is not read): the governor admits a call only when it fits
// every limit and the room left on one open lease — its money, the call's
// worst-case price, too — and charges the call to that lease; the grantor sees to it that the leases of all processes never sum
// to more than a limit, so neither do the calls admitted on them. Calls
// that wait for room on a lease are looked at again. A lease with an empty
// ID, a cost that is not valid, or one that ended by now is ignored, and so
// is a second grant of an ID.
func (in inside) Grant(now time.Time, id string, c Cost, until time.Time) {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	if id == "" || c.validate() != nil || until.UnixNano() <= n {
		return
	}
	for _, ls := range g.leases {
		if ls.id == id {
			return
		}
	}
	g.leases = append(g.leases, &lease{id: id, granted: c, at: n, until: until.UnixNano(), last: n})
	g.broadcast()
}

// leaseDemand is what the calls waiting on a leased governor need.
type leaseDemand struct {
	// Want is what the waiting calls that the room left on the open leases
	// lasting past within cannot take need, each call whole on one lease
	// (on a priced key, with their worst-case money), of as many as one
	// lease holds (each part at most MaxCost);
	// Min the first of those calls' cost, zero when none: the smallest
	// lease worth taking.
	Want, Min Cost
	// Weight is the sum of the weights of the flows with calls waiting,
	// Flows each of those flows' weight.
	Weight float64
	Flows  map[string]float64
	// DayPace and Burst are the governor's day pacing (Config.DayPace and
	// DayBurst; Burst 0 when no day limit is paced), and Ahead the part of
	// Want whose calls may run ahead of the pacers: a priority flow's first
	// call on its credit, a failed call's retry. A grantor that paces the
	// key's day limits for all its processes lets Ahead past its pacers.
	DayPace float64
	Burst   time.Duration
	Ahead   Cost
}

// Demand says what the waiting calls need of new leases at now: of the
// first calls of each flow's line (up to 8) that fit every limit and wait
// only for room on a lease, those that the room left on the open leases
// lasting past within cannot take, each call whole on one lease.
func (in inside) Demand(now time.Time, within time.Duration) leaseDemand {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	// The room left on each open lease that lasts: the calls are laid on
	// it, each whole on one lease, as admission will.
	var rooms []Cost
	for _, ls := range g.leases {
		if !ls.closed && ls.until > n+int64(within) {
			rooms = append(rooms, ls.granted.sub(ls.used))
		}
	}
	g.expire(n)
	var d leaseDemand
	if g.pace[RPD].on || g.pace[TPD].on {
		d.DayPace, d.Burst = g.cfg.DayPace, g.cfg.DayBurst
	}
	for _, f := range g.active.flows {
		if len(f.queue) == 0 {
			continue
		}
		d.Weight += f.share
		if d.Flows == nil {
			d.Flows = map[string]float64{}
		}
		d.Flows[f.name] = f.share
		// The first calls of each line that fit every limit now and
		// wait only for a lease: not calls a limit or a pacer holds back,
		// whose lease would lie idle while other processes wait.
		for k, r := range f.queue[:min(len(f.queue), demandPerFlow)] {
			if _, b := g.fit(n, f, r.cost); b.Kind != "lease" && b.Kind != "" {
				break
			}
			i := slices.IndexFunc(rooms, func(room Cost) bool { return roomFor(room, r.cost) })
			if i >= 0 {
				rooms[i] = rooms[i].sub(r.cost)
				continue
			}
			if !roomFor(leaseMost.sub(d.Want), r.cost) {
				// No lease holds more: calls of great cost (in money,
				// mostly) wait for the next.
				continue
			}
			d.Want = d.Want.add(r.cost)
			if k == 0 && d.Burst > 0 && (f.retry >= r.size || g.onCredit(f, n, r.size)) {
				d.Ahead = d.Ahead.add(r.cost)
			}
			if d.Min == (Cost{}) {
				d.Min = r.cost
			}
		}
	}
	return d
}

// LeaseWanted receives when an attempt to admit calls (Advance, or a look
// of Wait or Await at its call) found one waiting only for room on a lease
// since it last received: a grant loop selects on it to take a lease at
// once rather than at its next tick. What only looks at the calls —
// Demand, Stats, Blocker, EstimateWait — never makes it receive, so a
// grant loop that calls Demand does not wake itself. The governor never
// blocks on it.
func (in inside) LeaseWanted() <-chan struct{} {
	return in.g.leaseWanted
}

// LeaseUses reports the closed leases whose use changed, or whose calls
// all ended, since the last report, and forgets those that can change no
// more once reported (Final). An open lease is not reported: what its
// grantor holds for it must stay what was granted while calls may still be
// admitted on it, or the calls admitted after a report would be missing
// from the sums of every other process.
func (in inside) LeaseUses(now time.Time) []leaseUse {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closeLeases(now.UnixNano())
	var out []leaseUse
	keep := g.leases[:0]
	for _, ls := range g.leases {
		if ls.dirty && ls.closed {
			out = append(out, leaseUse{ID: ls.id, Used: ls.used, Last: time.Unix(0, ls.last), Closed: ls.closed, Final: ls.live == 0})
			ls.dirty = false
		}
		if !ls.closed || ls.live > 0 {
			keep = append(keep, ls)
		}
	}
	clear(g.leases[len(keep):])
	g.leases = keep
	return out
}

// CloseLeases ends every open lease at now: nothing more is admitted on
// them, and LeaseUses reports them, so a process that stops hands the room
// it holds back at once instead of when its leases would have ended (for a
// day limit, a day after that).
func (in inside) CloseLeases(now time.Time) {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	for _, ls := range g.leases {
		if !ls.closed {
			ls.until = min(ls.until, n)
			ls.closed, ls.dirty = true, true
		}
	}
}

// closeLeases closes the leases that ended by now.
func (g *Governor) closeLeases(now int64) {
	for _, ls := range g.leases {
		if !ls.closed && ls.until <= now {
			ls.closed, ls.dirty = true, true
		}
	}
}

// leaseFor returns the first open lease with room for c at now, or nil.
func (g *Governor) leaseFor(now int64, c Cost) *lease {
	for _, ls := range g.leases {
		if !ls.closed && ls.until > now && ls.fits(c) {
			return ls
		}
	}
	return nil
}

// wantLease tells the grant loop, without blocking, that a call waits for
// a lease.
func (g *Governor) wantLease() {
	select {
	case g.leaseWanted <- struct{}{}:
	default:
	}
}

// chargeLease charges admitted r to the lease fit found for it.
func (g *Governor) chargeLease(now int64, r *Reservation) {
	ls := g.leaseFor(now, r.cost)
	if ls == nil {
		// fit checked the lease under the same lock; this cannot happen.
		panic("governor: a call admitted without room on a lease")
	}
	ls.used = ls.used.add(r.cost)
	ls.last = max(ls.last, now)
	ls.live++
	ls.dirty = true
	r.lease = ls
}

// amendLease moves r's lease's use from r's charge was to c.
func (r *Reservation) amendLease(was, c Cost) {
	if ls := r.lease; ls != nil {
		ls.used = ls.used.sub(was).add(c)
		ls.dirty = true
	}
}

// sentOnLease records that r's call was sent at now.
func (r *Reservation) sentOnLease(now int64) {
	if ls := r.lease; ls != nil {
		ls.last = max(ls.last, now)
		ls.dirty = true
	}
}

// doneWithLease records that r's charge changes no more: the lease is
// reported again, final once no call on it is live.
func (r *Reservation) doneWithLease() {
	if ls := r.lease; ls != nil {
		ls.live--
		ls.dirty = true
		r.lease = nil
	}
}
