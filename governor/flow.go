package governor

import (
	"math"
	"time"
)

// flow is one flow's line of waiting reservations and its totals.
type flow struct {
	name     string
	weight   float64
	priority int
	share    float64 // weight × PriorityFactor^priority

	queue  []*Reservation // waiting, in order
	parked []*Reservation // out of line with their places kept, in no order (place.go)
	qbuf   []*Reservation // the line's memory, reused when it empties
	finish float64        // finish tag of the last reservation queued
	index  int            // position in the active heap, -1 when idle
	// Its place in the promotion index (promote.go): which heap, where,
	// and the keys it is filed under.
	promoIn    uint8
	busy       bool // it has calls waiting or parked: its share is in Governor.busyShares
	promoVer   uint32
	promoPos   int32
	promoSince int64
	promoAt    int64
	idleAt     int64   // when its line last emptied
	idleV      float64 // the virtual time then

	// rate is an exponentially weighted average of the flow's admitted size
	// (seconds of a limit's capacity) per second, as of rateAt.
	rate    float64
	rateAt  int64
	rateRef float64 // its part of Governor.rateSum
	rateF   float64 // e^((rateAt − Governor.rateRef)/rateWindow); 0: not known

	admitted   int64
	lastAdmit  int64   // when a call of it was last admitted
	retry      float64 // how large a retry may go ahead of the day pacers (see Fault)
	tokens     Cost    // charged to admitted reservations, as corrected
	rejections [NumLimits]int64
	refusals   [NumLimits]int64

	prio *prio // for a flow of priority above 0: see priority.go

	budget *flowBudget // nil: the flow has no budget of its own
}

// flowBudget is a flow's own budget: its allowance of MPD and MPM and
// ledgers of what its calls cost.
type flowBudget struct {
	limits Limits // only MPD and MPM
	day    ledger
	month  ledger
	// pace spreads the budget of MPD over its day and MPM over its 30
	// days, as the key's pacers spread the key's (see pacer), so that a
	// flow with a backlog spends its day's money through the day rather
	// than in its first hour and then waits for a day: indexed 0 for MPD,
	// 1 for MPM; on only with Config.DayBurst above 0. An idle flow
	// starts with its burst in hand.
	pace [2]pacer
}

// take charges money admitted at now to the budget's pacers.
func (fb *flowBudget) take(now, money int64) {
	for i := range fb.pace {
		if p := &fb.pace[i]; p.on {
			p.take(now, money)
		}
	}
}

// giveBack gives the budget's pacers back, at now, money a call no longer
// costs (negative: money it costs beyond its admission charge).
func (fb *flowBudget) giveBack(now, money int64) {
	for i := range fb.pace {
		if p := &fb.pace[i]; p.on {
			p.giveBack(now, money)
		}
	}
}

// budgetPacers are the limits of a flow's budget's pacers, in their order.
var budgetPacers = [2]Limit{MPD, MPM}

// paced returns when a call costing c may go by the budget's pacers, and
// the budget whose pacer holds it longest (now and 0 when none does).
func (fb *flowBudget) paced(now int64, c Cost) (int64, Limit) {
	at, on := now, Limit(0)
	if c.Money == 0 {
		return at, on
	}
	for i, l := range budgetPacers {
		if p := &fb.pace[i]; p.on {
			if t := p.readyAt(); t > at {
				at, on = t, l
			}
		}
	}
	return at, on
}

// ledgerOf is the flow's ledger for budget l.
func (fb *flowBudget) ledgerOf(l Limit) *ledger {
	if l == MPM {
		return &fb.month
	}
	return &fb.day
}

func (fb *flowBudget) expire(now int64) {
	fb.day.expire(now)
	if fb.limits[MPM] > 0 {
		fb.month.expire(now)
	}
}

// fit returns when a call costing c fits the flow's budget, now or later,
// and the budget it waits for.
func (fb *flowBudget) fit(now int64, c Cost) (int64, Limit) {
	at, on := now, Limit(0)
	for _, l := range [...]Limit{MPD, MPM} {
		lim := fb.limits[l]
		if lim == 0 || c.Money == 0 {
			continue
		}
		lg := fb.ledgerOf(l)
		if addSat(lg.sum.Money, c.Money) > lim {
			if t := lg.freeAt(now, l, c.Money, lim, nil); t > at {
				at, on = t, l
			}
		}
	}
	return at, on
}

// add charges a call costing c admitted at now; it returns the sequence
// numbers of its charges on the day's and the month's ledgers.
func (fb *flowBudget) add(now int64, c Cost) (day, month uint64) {
	day = fb.day.add(now, c)
	if fb.limits[MPM] > 0 {
		month = fb.month.add(now, c)
	}
	return day, month
}

func (fb *flowBudget) amend(day, month uint64, was, c Cost) {
	fb.day.amend(day, was, c)
	if fb.limits[MPM] > 0 {
		fb.month.amend(month, was, c)
	}
}

// busyChanged keeps busyShares, the sum of the shares of the flows with
// calls waiting or parked, after f's line or its parked calls changed.
func (g *Governor) busyChanged(f *flow) {
	busy := len(f.queue) > 0 || len(f.parked) > 0
	if busy == f.busy {
		return
	}
	f.busy = busy
	if busy {
		g.busyN++
		g.busyShares += f.share
		return
	}
	g.busyN--
	g.busyShares -= f.share
	if g.busyN == 0 {
		g.busyShares = 0 // no rounding left over from what was added and taken
	}
}

func (g *Governor) newFlow(fc FlowConfig) *flow {
	w := fc.Weight
	if w == 0 {
		w = 1
	}
	f := &flow{
		name:     fc.Name,
		weight:   w,
		priority: fc.Priority,
		share:    w * math.Pow(g.cfg.PriorityFactor, float64(fc.Priority)),
		index:    -1,
	}
	if !fc.Budget.IsZero() {
		f.budget = &flowBudget{
			limits: fc.Budget.Limits(Limits{}),
			day:    newLedger(24*time.Hour, g.cfg.Lag, dayGrain, false),
			month:  newLedger(Month, g.cfg.Lag, time.Minute, false),
		}
		for i, l := range budgetPacers {
			if lim := f.budget.limits[l]; lim > 0 && g.cfg.DayBurst > 0 {
				f.budget.pace[i] = pacer{on: true, perUnit: float64(l.Period()) / (float64(lim) * g.cfg.DayPace), burst: g.burstOf(l),
					most: g.paceMost(l)}
			}
		}
	}
	return f
}

// known returns the flow of that name, or, for one the governor has not
// seen, a flow with the defaults that is not added: for questions that
// must not create flows.
func (g *Governor) known(name string) *flow {
	if f := g.flows[name]; f != nil {
		return f
	}
	return g.newFlow(FlowConfig{Name: name})
}

func (g *Governor) flow(name string) *flow {
	f := g.flows[name]
	if f == nil {
		f = g.newFlow(FlowConfig{Name: name})
		g.addFlow(f)
	}
	return f
}

// addFlow makes f known.
func (g *Governor) addFlow(f *flow) {
	g.flows[f.name] = f
	g.shares += f.share
	if f.priority > 0 {
		f.prio = &prio{urgentAt: -1}
	}
}

// flowHeap orders the flows that have waiting reservations by the start tag
// of their first one (start-time fair queuing), then by priority, then by arrival.
type flowHeap struct{ flows []*flow }

func (h *flowHeap) Len() int { return len(h.flows) }

func (h *flowHeap) Less(i, j int) bool { return h.less(h.flows[i], h.flows[j]) }

// less orders two flows by their first reservations.
func (h *flowHeap) less(f, g *flow) bool {
	a, b := f.queue[0], g.queue[0]
	if a.start != b.start {
		return a.start < b.start
	}
	if a.f.priority != b.f.priority {
		return a.f.priority > b.f.priority
	}
	return a.id < b.id
}

func (h *flowHeap) Swap(i, j int) {
	h.flows[i], h.flows[j] = h.flows[j], h.flows[i]
	h.flows[i].index = i
	h.flows[j].index = j
}

func (h *flowHeap) Push(x any) {
	f := x.(*flow)
	f.index = len(h.flows)
	h.flows = append(h.flows, f)
}

func (h *flowHeap) Pop() any {
	n := len(h.flows) - 1
	f := h.flows[n]
	h.flows[n] = nil
	h.flows = h.flows[:n]
	f.index = -1
	return f
}

// rateWindow is the time constant of a flow's measured rate.
const rateWindow = float64(time.Hour)

func (f *flow) rateNow(now int64) float64 {
	if f.rate == 0 || now <= f.rateAt {
		return f.rate
	}
	return f.rate * math.Exp(-float64(now-f.rateAt)/rateWindow)
}

// The rates of all flows decay at one time constant, so their sum is kept
// as one number instead of summed over the flows at every question: each
// flow's rate as of a common reference time (rateRef), rate × e^((rateAt −
// rateRef)/rateWindow), is its part of rateSum, and the sum at t is rateSum
// × e^(−(t − rateRef)/rateWindow). The reference moves forward when the
// factors grow large, long before they could overflow.

// rateRebase is how far, in rateWindows, the reference may fall behind.
const rateRebase = 200

// addRate adds an admitted call of the given size to f's rate, and to the
// sum of the rates.
func (g *Governor) addRate(f *flow, now int64, size float64) {
	// f.addRate, with the decay kept: it gives the flow's factor e^((now −
	// rateRef)/rateWindow) from the last one without another exponential.
	decay := 1.0
	if f.rate != 0 && now > f.rateAt {
		decay = math.Exp(-float64(now-f.rateAt) / rateWindow)
	}
	f.rate = f.rate*decay + size*float64(time.Second)/rateWindow
	f.rateAt = now
	if g.rateRef == 0 || float64(now-g.rateRef) > rateRebase*rateWindow {
		g.rateRef = now
		g.rateSum = 0
		for _, o := range g.flows {
			o.rateF = math.Exp(float64(o.rateAt-now) / rateWindow)
			o.rateRef = o.rate * o.rateF
			g.rateSum += o.rateRef
		}
		return
	}
	if f.rateF == 0 || decay != 1 && decay < 1e-100 || decay == 1 && f.rateRef == 0 {
		f.rateF = math.Exp(float64(now-g.rateRef) / rateWindow)
	} else {
		f.rateF /= decay
	}
	part := f.rate * f.rateF
	g.rateSum += part - f.rateRef
	f.rateRef = part
}

// ratesNow is the sum of every flow's rate at now.
func (g *Governor) ratesNow(now int64) float64 {
	if g.rateRef == 0 {
		return 0
	}
	return g.rateSum * math.Exp(-float64(now-g.rateRef)/rateWindow)
}

// DefaultWithin is the time a batch should take at the flow's share that
// sluice's backfills ask BatchSize for by default (run.Backfill.Within),
// and that the planner and the bench model them with: 15 minutes. A flow
// at its share then finishes a call several times within the default
// stall threshold (2 h), so a burst of priority work or room freed in
// lumps does not stretch the gap between two of its calls past it; and on
// a key whose day limit binds, a batch still carries more than one item
// (a minute of TPD 200,000 at its even pace is 139 tokens, 15 minutes
// 2,083), so the day's tokens are not spent on one prompt per item.
const DefaultWithin = 15 * time.Minute

// BatchSize returns how many items the next call of flow should carry so
// that, at the share of the key the flow can expect now, the call is
// admitted and done within about the given time — so a flow keeps making
// visible progress instead of saving up for one large call — and never more
// than LargestBatch allows. The expected share is what the other flows have
// recently used left over, and at least the flow's weighted fair share
// among all the flows the governor knows.
// A zero or negative within returns LargestBatch.
func (g *Governor) BatchSize(now time.Time, flow string, base, item Cost, maxItems int, within time.Duration) int {
	g.mustBeNew()
	n := g.largestBatch(now, base, item, maxItems)
	if within <= 0 || n <= 1 {
		return n
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t := now.UnixNano()
	f := g.flow(flow)
	others := max(g.ratesNow(t)-f.rateNow(t), 0)
	// Until there is some history, expect the weighted fair share; the
	// measured rates are corrected for the average's warm-up.
	free := f.share / g.shares
	if elapsed := float64(t - g.epoch); g.epoch != math.MinInt64 && elapsed > rateWindow/4 {
		free = math.Max(free, 1-others/(1-math.Exp(-elapsed/rateWindow)))
	}
	for n > 1 {
		c := base.add(item.times(int64(n)))
		if g.size(c)/free <= within.Seconds() {
			break
		}
		n--
	}
	return n
}
