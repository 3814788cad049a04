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
	// Flow is the flow whose own budget the lease is of (see GrantBudget),
	// empty for a lease of the key.
	Flow string
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
	flow    string // a lease of this flow's own budget, of money only (GrantBudget); empty: of the key
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

// GrantBudget gives the governor a lease of flow's own budget: money
// billionths of the unit of money that the flow's calls may cost, granted
// to this process alone until until. On a leased governor a call of a flow
// with a budget (FlowConfig.Budget) that costs money is admitted only when
// it also fits the room left on one open lease of its flow's budget, and
// is charged to it: the grantor sees to it that these leases of all
// processes never sum to more than the flow's budget, so neither do the
// flow's calls on all of them. A lease with an empty ID or flow, money not
// above 0 or above MaxCost, one that ended by now, or a second grant of an
// ID is ignored.
func (in inside) GrantBudget(now time.Time, flow, id string, money int64, until time.Time) {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	if id == "" || flow == "" || money <= 0 || money > MaxCost || until.UnixNano() <= n {
		return
	}
	for _, ls := range g.leases {
		if ls.id == id && ls.flow == flow {
			return
		}
	}
	g.leases = append(g.leases, &lease{id: id, flow: flow, granted: Cost{Money: money}, at: n, until: until.UnixNano(), last: n})
	g.broadcast()
}

// BudgetDemand is what a flow's waiting calls need of leases of its own
// budget.
type BudgetDemand struct {
	// Want is the worst-case money of the calls that the room left on the
	// flow's open budget leases cannot take, Min the first of those.
	Want, Min int64
	// Limits are the flow's budget: its MPD and MPM, in billionths.
	Limits Limits
}

// LeaseDemand is what the calls waiting on a leased governor need.
type LeaseDemand struct {
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
	// Budgets is, by flow, what the waiting calls of flows with a budget
	// of their own need of leases of it (see GrantBudget).
	Budgets map[string]BudgetDemand
}

// Demand says what the waiting calls need of new leases at now: of the
// first calls of each flow's line (up to 8) that fit every limit and wait
// only for room on a lease, those that the room left on the open leases
// lasting past within cannot take, each call whole on one lease; and of
// those calls of flows with a budget, the money that the room left on
// their flows' budget leases cannot take.
func (in inside) Demand(now time.Time, within time.Duration) LeaseDemand {
	g := in.g
	g.mu.Lock()
	defer g.mu.Unlock()
	n := now.UnixNano()
	// The room left on each open lease that lasts: the calls are laid on
	// it, each whole on one lease, as admission will.
	var rooms []Cost
	var budgetRooms map[string][]int64
	for _, ls := range g.leases {
		switch {
		case ls.closed || ls.until <= n+int64(within):
		case ls.flow != "":
			if budgetRooms == nil {
				budgetRooms = map[string][]int64{}
			}
			budgetRooms[ls.flow] = append(budgetRooms[ls.flow], ls.granted.Money-ls.used.Money)
		default:
			rooms = append(rooms, ls.granted.sub(ls.used))
		}
	}
	g.expire(n)
	var d LeaseDemand
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
			if g.onBudgetLease(f, r.cost) {
				d.budgetWant(f, r.cost.Money, budgetRooms[f.name])
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

// budgetWant lays a call of f costing money on rooms, the room left on
// f's budget leases, as admission would, or adds it to what f's budget
// wants.
func (d *LeaseDemand) budgetWant(f *flow, money int64, rooms []int64) {
	if i := slices.IndexFunc(rooms, func(room int64) bool { return money <= room }); i >= 0 {
		rooms[i] -= money
		return
	}
	if d.Budgets == nil {
		d.Budgets = map[string]BudgetDemand{}
	}
	b := d.Budgets[f.name]
	if money > MaxCost-b.Want {
		return // no lease holds more: the call waits for the next
	}
	b.Want += money
	if b.Min == 0 {
		b.Min = money
	}
	b.Limits = f.budget.limits
	d.Budgets[f.name] = b
}

// onBudgetLease reports whether a call of f costing c is admitted only on
// a lease of f's own budget: on a leased governor, when f has one and c
// costs money.
func (g *Governor) onBudgetLease(f *flow, c Cost) bool {
	return g.leased && f.budget != nil && c.Money > 0
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
			out = append(out, leaseUse{ID: ls.id, Flow: ls.flow, Used: ls.used, Last: time.Unix(0, ls.last), Closed: ls.closed, Final: ls.live == 0})
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

// leaseFor returns the first open lease of the key with room for c at
// now, or nil.
func (g *Governor) leaseFor(now int64, c Cost) *lease {
	for _, ls := range g.leases {
		if ls.flow == "" && !ls.closed && ls.until > now && ls.fits(c) {
			return ls
		}
	}
	return nil
}

// budgetLeaseFor returns the first open lease of flow's budget with room
// for money at now, or nil.
func (g *Governor) budgetLeaseFor(now int64, flow string, money int64) *lease {
	for _, ls := range g.leases {
		if ls.flow == flow && !ls.closed && ls.until > now && money <= ls.granted.Money-ls.used.Money {
			return ls
		}
	}
	return nil
}

// leasesFor reports whether a call of f costing c has the room it needs
// on this process's leases at now: on a lease of the key and, when its
// flow's budget is leased too, on a lease of that budget.
func (g *Governor) leasesFor(now int64, f *flow, c Cost) bool {
	if g.leaseFor(now, c) == nil {
		return false
	}
	return !g.onBudgetLease(f, c) || g.budgetLeaseFor(now, f.name, c.Money) != nil
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
	if !g.onBudgetLease(r.f, r.cost) {
		return
	}
	bl := g.budgetLeaseFor(now, r.f.name, r.cost.Money)
	if bl == nil {
		panic("governor: a call admitted without room on a lease of its flow's budget")
	}
	bl.used.Money += r.cost.Money
	bl.last = max(bl.last, now)
	bl.live++
	bl.dirty = true
	r.budgetLease = bl
}

// amendLease moves r's lease's use from r's charge was to c.
func (r *Reservation) amendLease(was, c Cost) {
	if ls := r.lease; ls != nil {
		ls.used = ls.used.sub(was).add(c)
		ls.dirty = true
	}
	if bl := r.budgetLease; bl != nil {
		bl.used.Money += c.Money - was.Money
		bl.dirty = true
	}
}

// sentOnLease records that r's call was sent at now.
func (r *Reservation) sentOnLease(now int64) {
	for _, ls := range [...]*lease{r.lease, r.budgetLease} {
		if ls != nil {
			ls.last = max(ls.last, now)
			ls.dirty = true
		}
	}
}

// doneWithLease records that r's charge changes no more: the lease is
// reported again, final once no call on it is live.
func (r *Reservation) doneWithLease() {
	for _, ls := range [...]*lease{r.lease, r.budgetLease} {
		if ls != nil {
			ls.live--
			ls.dirty = true
		}
	}
	r.lease, r.budgetLease = nil, nil
}
