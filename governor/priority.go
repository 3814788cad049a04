package governor

import "time"

// Priority work is prompt: a flow of priority above 0 is not made to wait
// for the day pacer nor for room that calls of lower priority took just
// before it came. Two things give it that, per limit:
//
//   - Credit. Each day limit's pacer spreads the budget over the day so
//     that a backfill does not burn it in the morning; a priority flow's
//     call may run ahead of the pacer on credit — a bucket that refills at
//     the flow's share of the paced rate (its weight × PriorityFactor^priority
//     among every known flow's) and holds an hour of it (Config.DayBurst),
//     at least room for the calls it holds back (below). A call on credit
//     still charges the pacer, so calls of lower priority are paced later by
//     as much: the day's budget lasts as long as before, and the credit
//     refills no faster than the flow's share, so a priority flow with a
//     backlog cannot take the day from the others.
//   - Held room. Calls of lower priority are admitted only while they leave,
//     in every window, room for the priority flow's next calls: priorityCalls
//     calls of the size it has made lately on day limits, one on minute
//     limits (a minute window frees itself within the minute), and on minute
//     limits only while the flow has been busy within the hour. Room is held
//     on a day limit only as far as the flow has credit to use it, and never
//     so much that a lower call could no longer fit an empty window.
//
// The held room is what priority costs: it is idle until a priority call
// takes it. It is bounded by a few calls' worth of each limit — on DevPick
// about 1 % of TPD — and nothing is held for a flow that has made no call.

// priorityCalls is how many calls of a priority flow the day windows keep
// room for.
const priorityCalls = 2

// hotFlows is how many priority flows room is held for: those that
// reserved most recently. It bounds the work of every admission decision
// however many priority flows a key has.
const hotFlows = 4

// creditSpan is how much of its share a priority flow may save up on a key
// with day pacing. A longer span lets a burst of priority calls run further
// ahead of the pacer, and the backfills behind it wait that much longer: on
// DevPick a quarter hour keeps the priority flow's waits within minutes and
// every backfill moving within the hour; an hour does not.
const creditSpan = 15 * time.Minute

// prio is a priority flow's credit and learned call size.
type prio struct {
	call     [NumLimits]int64 // size of its recent calls, per limit: rises at once, decays slowly
	size     float64          // the same, as a dominant share (seconds; see Governor.size)
	credit   float64          // dominant share it may take ahead of its turn and of the day pacers
	hot      bool             // among Governor.hot
	heldAs   [NumLimits]int64 // while hot: room for its next calls on each day limit, its part of Governor.heldMax
	creditAt int64
	urgentAt int // its place in Governor.urgent, -1 when it has no call waiting
}

// creditRate is the rate, in seconds of dominant share per nanosecond, at
// which f's credit refills: its share of the key.
func (g *Governor) creditRate(f *flow) float64 {
	if g.shares <= 0 {
		return 0
	}
	return f.share / g.shares / float64(time.Second)
}

// creditCap is the most credit f may hold: creditSpan of its share on a
// key with day pacing, a minute of it otherwise, and at least
// priorityCalls of its calls.
func (g *Governor) creditCap(f *flow) float64 {
	span := time.Minute
	if g.pace[RPD].on || g.pace[TPD].on {
		span = min(creditSpan, g.cfg.DayBurst)
	}
	return max(g.creditRate(f)*float64(span), priorityCalls*f.prio.size)
}

// refill brings f's credit up to now. A flow earns credit only while it
// has nothing waiting: a backlogged flow is served its share in fair order,
// and must not also be served ahead of it.
func (g *Governor) refill(f *flow, now int64) {
	p := f.prio
	if len(f.queue) > 0 {
		p.creditAt = max(p.creditAt, now)
		return
	}
	if now > p.creditAt {
		p.credit = min(g.creditCap(f), p.credit+g.creditRate(f)*float64(now-p.creditAt))
		p.creditAt = now
	}
}

// creditTime returns when f will have credit for a call of the given size
// (never if it cannot), assuming refill(f, now) ran. A flow with calls
// waiting earns none (see refill): without the credit now, it will not have
// it while they wait — counting on it anyway woke the governor again and
// again, a few nanoseconds apart, for a credit that never came.
func (g *Governor) creditTime(f *flow, now int64, size float64) int64 {
	p := f.prio
	if p.credit >= size {
		return now
	}
	rate := g.creditRate(f)
	if rate <= 0 || size > g.creditCap(f) || len(f.queue) > 0 {
		return never
	}
	return addSat(now, nanos((size-p.credit)/rate)+1)
}

// onCredit reports whether f may take a call of the given size ahead of its
// turn and of the day pacers at now.
func (g *Governor) onCredit(f *flow, now int64, size float64) bool {
	if f.prio == nil {
		return false
	}
	g.refill(f, now)
	return f.prio.credit >= size
}

// held is the room on day limit l that a call of f costing need must leave
// for flows of higher priority, at now: for each hot one, room for its next
// priorityCalls calls, as far as its credit goes — a flow that has used its
// share lately has no room held — and never so much that the call could not
// fit an empty window. Minute windows hold no room: they free themselves
// within the minute, and room held in them is lost whole when calls are
// large (four tenants with calls of a third of TPM lost a third of the key).
//
// For the flow promoted for having waited PromoteAfter (see promoted) the
// room held only shrinks: while it waits for a day window, the room held
// for priority flows grows as their credit refills, and would push its
// start later and later, as the prompt admissions it is shielded from would.
func (g *Governor) held(f *flow, l Limit, need, lim, now int64) int64 {
	if l.Period() == time.Minute {
		return 0
	}
	var h int64
	for _, o := range g.hot {
		if o == nil {
			break
		}
		if o.priority <= f.priority {
			continue
		}
		p := o.prio
		g.refill(o, now)
		h = addSat(h, max(min(p.heldAs[l], nanos(p.credit/g.scale[l])), 0))
	}
	h = min(h, max(subSat(lim, need), 0))
	if g.promotedNow(f) {
		h = g.heldSince(f, l, h)
	}
	return h
}

// heldSince returns h, or less if less room was held on day limit l for
// promoted flow f since it was promoted, and remembers the least. Only one
// flow is promoted at a time: the governor remembers it for that one.
func (g *Governor) heldSince(f *flow, l Limit, h int64) int64 {
	p := &g.promoHeld
	if p.f != f || p.ver != f.promoVer {
		// Promoted anew (its line changed since): what was held before
		// does not count.
		p.f, p.ver = f, f.promoVer
		for i := range p.least {
			p.least[i] = never
		}
	}
	h = min(h, p.least[l])
	p.least[l] = h
	return h
}

// learnCall records the size of a call of priority flow f costing c, whose
// dominant share is size.
func (g *Governor) learnCall(f *flow, c Cost, size float64) {
	p := f.prio
	for l := range NumLimits {
		v := c.On(l)
		if v >= p.call[l] {
			p.call[l] = v
		} else {
			p.call[l] -= (p.call[l] - v) / 8
		}
	}
	if size >= p.size {
		p.size = size
	} else {
		p.size -= (p.size - size) / 8
	}
	if p.hot {
		g.holdAs(f)
	}
}

// promptScan bounds how many flows with credit one prompt pass looks at,
// as backfillScan bounds backfill: the work of a decision stays bounded
// however many priority flows have credit and calls that do not fit yet.
const promptScan = 32

// prompt admits, ahead of their turn, the first calls of priority flows
// that fit now and that their flows have credit for — but for a call that
// would make a promoted flow's call (see Config.PromoteAfter) start later.
// It looks only at the flows whose credit covers their first call (at most
// promptScan of them), in the order of the urgent list. It reports whether
// it admitted any.
func (g *Governor) prompt(now int64, promoted *flow) bool {
	var head *Reservation
	var at int64
	if p := promoted; p != nil {
		head = p.queue[0]
		at = g.fitAt(now, p, head.cost)
	}
	any := false
	seen := 0
	for i := g.credited.next(0); i >= 0 && seen < promptScan; i = g.credited.next(i + 1) {
		f := g.urgent[i]
		seen++
		for len(f.queue) > 0 && (g.active.Len() == 0 || g.active.flows[0] != f) {
			r := f.queue[0]
			if !g.onCredit(f, now, r.size) {
				break
			}
			if t, _ := g.admitAt(now, f, r.cost); t > now {
				break
			}
			if head != nil && head.f != f && g.delays(now, head, at, f, r.cost) {
				break
			}
			g.admit(now, r, onItsCredit)
			any = true
		}
	}
	return any
}

// touch puts priority flow f first among the hot flows, and keeps heldMax
// the sum of what the hot flows may hold.
func (g *Governor) touch(f *flow) {
	p := f.prio
	i := 0
	for i < hotFlows-1 && g.hot[i] != nil && g.hot[i] != f {
		i++
	}
	if g.hot[i] != f {
		if o := g.hot[i]; o != nil {
			// Pushed out of the list.
			o.prio.hot = false
			for l := range NumLimits {
				g.heldMax[l] = subSat(g.heldMax[l], o.prio.heldAs[l])
				o.prio.heldAs[l] = 0
			}
		}
		p.hot = true
		g.holdAs(f)
	}
	copy(g.hot[1:i+1], g.hot[:i])
	g.hot[0] = f
}

// holdAs brings hot flow f's part of heldMax up to date with its call size.
func (g *Governor) holdAs(f *flow) {
	p := f.prio
	for _, l := range longLimits {
		h := mulSat(p.call[l], priorityCalls)
		g.heldMax[l] = addSat(subSat(g.heldMax[l], p.heldAs[l]), h)
		p.heldAs[l] = h
	}
}

// urge puts priority flow f, whose line was empty, on the urgent list.
func (g *Governor) urge(f *flow) {
	f.prio.urgentAt = len(g.urgent)
	g.urgent = append(g.urgent, f)
}

// creditChanged files f again in credited after its credit or its first
// waiting call changed: a flow of priority above 0 with calls waiting.
func (g *Governor) creditChanged(f *flow) {
	if p := f.prio; p != nil && p.urgentAt >= 0 {
		g.recredit(f, p)
	}
}

func (g *Governor) recredit(f *flow, p *prio) {
	g.setCredited(p.urgentAt, len(f.queue) > 0 && p.credit >= f.queue[0].size)
}

func (g *Governor) setCredited(i int, in bool) {
	if g.credited.has(i) != in {
		if in {
			g.creditedN++
		} else {
			g.creditedN--
		}
		g.credited.put(i, in)
	}
}

// calm takes priority flow f, whose line emptied, off the urgent list: the
// last one takes its place there.
func (g *Governor) calm(f *flow) {
	i := f.prio.urgentAt
	if i < 0 {
		return
	}
	last := len(g.urgent) - 1
	moved := g.urgent[last]
	g.urgent[i] = moved
	moved.prio.urgentAt = i
	g.setCredited(i, g.credited.has(last))
	g.setCredited(last, false)
	g.urgent[last] = nil
	g.urgent = g.urgent[:last]
	f.prio.urgentAt = -1
}
