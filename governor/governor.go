package governor

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Governor admits calls on one provider key against every limit at once and
// shares the key fairly across flows.
//
// Admission is all-or-nothing: a call is admitted only when its cost fits
// every limit. Waiting calls are admitted in weighted fair order of their
// flows' dominant share (the largest fraction of any limit a call takes). The
// first in that order keeps its start: no stream of small calls can pass a
// large one forever. Calls of other flows that fit while it cannot are
// admitted only when they do not push its start later (backfilling), so
// room it cannot use yet is not left idle.
//
// A Governor is safe for simultaneous use by multiple goroutines. Make one
// with New: the zero Governor has no configuration and cannot be used, and
// its methods panic, saying so.
type Governor struct {
	mu  sync.Mutex
	cfg Config

	limits  Limits // in force: the configured ones, as the provider lowered them (announce.go)
	minute  ledger
	day     ledger
	month   ledger // kept only under a budget per month (MPM)
	phantom [NumLimits][]phantom
	pace    [NumLimits]pacer
	scale   [NumLimits]float64 // seconds of a limit's capacity per unit

	learned   [NumLimits]learned
	relearnAt int64               // when an allowance in force may next change by itself (never: none will)
	noticed   map[noticeKey]int64 // when each kind of notice was last logged
	notices   []notice            // made while g.mu is held, logged once it is released

	pauseUntil int64 // an unclassified rejection pauses the key until then
	pauseLevel int

	// inflight counts the calls admitted and not yet ended (settled,
	// faulted or cancelled). While probe > 0, before probeEnd, at most
	// probe of them may be in flight: see probe.go.
	inflight int
	probe    int
	probeEnd int64

	flows map[string]*flow
	// hot lists the priority flows (priority above 0) that reserved most
	// recently, latest first: room is held for their next calls.
	hot [hotFlows]*flow
	// heldMax is, per limit, the most room held can hold back: the room
	// for the hot flows' calls, whatever their credit.
	heldMax [NumLimits]int64
	// urgent lists the priority flows with calls waiting.
	urgent []*flow
	// credited holds the places in urgent of the flows whose credit covers
	// their first waiting call: only they may be admitted on credit
	// (prompt), and they are found without a look at the others.
	credited   bitIndex
	creditedN  int
	shares     float64 // the sum of every known flow's share
	busyShares float64 // the sum of the shares of the flows with calls waiting or parked
	busyN      int     // how many flows they are
	// rateSum is the sum of the flows' rates (flow.rate), as of rateRef:
	// see addRate.
	rateSum float64
	rateRef int64
	active  flowHeap
	promo   promoIndex // the flows of active, to find the one to promote (promote.go)
	// promoHeld is the least room held for priority flows on each long limit
	// since flow f was promoted, at version ver of its line (see held).
	promoHeld struct {
		f     *flow
		ver   uint32
		least [NumLimits]int64
	}
	// ahead orders every reservation waiting or parked by its tags, with
	// sums of their costs, for the wait estimate (ahead.go).
	ahead   *Reservation
	aheadOn bool // ahead is kept: an estimate was asked for
	scratch estimateScratch
	vtime   float64
	seq     uint64
	epoch   int64 // time of the first call, to start the pacers

	changed chan struct{} // closed and replaced when something may admit

	places placeHeap // the reservations parked, of every flow, by when their places lapse (place.go)

	leased      bool          // admit only on leases (inside's Leased)
	leases      []*lease      // open, and closed ones not yet reported (lease.go)
	leaseWanted chan struct{} // a call waits for a lease
}

// New returns a Governor for cfg.
func New(cfg Config) (*Governor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Governor{
		cfg:    cfg,
		limits: cfg.Limits,
		minute: newLedger(time.Minute, cfg.Lag, minuteGrain, cfg.FixedWindows),
		day:    newLedger(24*time.Hour, cfg.Lag, dayGrain, cfg.FixedWindows),
		// A budget is sluice's own, not a provider's window: it rolls.
		month: newLedger(Month, cfg.Lag, time.Minute, false),
		flows: make(map[string]*flow, len(cfg.Flows)),
		epoch: math.MinInt64,

		relearnAt: never,
		noticed:   map[noticeKey]int64{},

		leaseWanted: make(chan struct{}, 1),
	}
	for _, fc := range cfg.Flows {
		g.addFlow(g.newFlow(fc))
	}
	if cfg.Limits == (Limits{}) {
		g.probe = 1
	}
	g.setPacers()
	g.setScales()
	return g, nil
}

// mustBeNew panics, with a message that says what to do, when g was not
// made by New: the zero Governor, or a nil one. Every exported method calls
// it first, so none fails with a nil map or a nil clock instead.
func (g *Governor) mustBeNew() {
	if g == nil || g.flows == nil {
		panic("governor: a Governor must be made with governor.New; the zero Governor cannot be used")
	}
}

// Limits returns the limits in force: the configured ones, as lowered, within
// bounds and for a while, by what the provider announced (see Config.Limits
// and LearnFor), and those the provider announced that none configures.
func (g *Governor) Limits() Limits {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limits
}

func (g *Governor) ledgerOf(l Limit) *ledger {
	switch l.Period() {
	case time.Minute:
		return &g.minute
	case Month:
		return &g.month
	}
	return &g.day
}

// monthly reports whether the month's ledger is kept: a budget per month
// is configured. No provider announces one, so it never changes.
func (g *Governor) monthly() bool { return g.cfg.Limits[MPM] > 0 }

// Check reports whether c could ever be admitted. If not, the error is a
// *TooLargeError naming the limit, the numbers, and the largest max_tokens
// that would fit with the same input — or, for a cost with a part negative
// or over MaxCost, an error wrapping errInvalidCost that names the part.
// It checks against the limits in force at Config.Now: an allowance the
// provider lowered for a while (LearnFor) may have come back meanwhile.
func (g *Governor) Check(c Cost) error {
	g.mustBeNew()
	now := g.cfg.Now().UnixNano()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.relearn(now)
	return g.check(now, g.priced(c))
}

func (g *Governor) check(now int64, c Cost) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%s%w", g.cfg.prefix(), err)
	}
	g.recheck(now, c)
	for l := range NumLimits {
		lim := g.limits[l]
		if lim > 0 && c.On(l) > lim {
			return &TooLargeError{Key: g.cfg.Key, Limit: l, Need: c.On(l), Max: lim, MaxOutput: g.maxOutput(c.Input)}
		}
	}
	return nil
}

// checkFlow returns a *TooLargeError when c can never fit flow f's own
// budget.
func (g *Governor) checkFlow(f *flow, c Cost) *TooLargeError {
	fb := f.budget
	if fb == nil {
		return nil
	}
	for _, l := range [...]Limit{MPD, MPM} {
		if lim := fb.limits[l]; lim > 0 && c.Money > lim {
			return &TooLargeError{Key: g.cfg.Key, Flow: f.name, Limit: l, Need: c.Money, Max: lim, MaxOutput: g.maxOutputUnder(c.Input, lim)}
		}
	}
	return nil
}

// maxOutput is the largest output reservation that fits every limit with
// this input: 0 when the input alone does not fit.
func (g *Governor) maxOutput(input int64) int64 {
	best := int64(math.MaxInt64)
	for l := range NumLimits {
		lim := g.limits[l]
		if lim == 0 {
			continue
		}
		switch l {
		case TPM, TPD:
			best = min(best, lim-input)
		case OTPM:
			best = min(best, lim)
		case ITPM:
			if input > lim {
				return 0
			}
		case MPD, MPM:
			best = min(best, g.maxOutputUnder(input, lim))
		}
	}
	return max(best, 0)
}

// maxOutputUnder is the largest output reservation whose price, with this
// input, is within the budget lim.
func (g *Governor) maxOutputUnder(input, lim int64) int64 {
	in := g.cfg.Price.Of(Cost{Input: input})
	if in > lim {
		return 0
	}
	if perToken := g.cfg.Price.Output * 1e3; perToken > 0 {
		return int64(float64(lim-in) / perToken)
	}
	return math.MaxInt64
}

// LargestBatch returns the largest n ≤ maxItems such that a call costing
// base + n×item fits every limit and MaxCost (0 if even one item does not
// fit, or base or item is not a valid Cost). Use it to size batches before
// calling instead of learning from rejections. Like Check, it reads the
// limits in force at Config.Now.
func (g *Governor) LargestBatch(base, item Cost, maxItems int) int {
	g.mustBeNew()
	return g.largestBatch(g.cfg.Now(), base, item, maxItems)
}

// largestBatch is LargestBatch with the limits in force at now.
func (g *Governor) largestBatch(now time.Time, base, item Cost, maxItems int) int {
	if maxItems <= 0 || base.validate() != nil || item.validate() != nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.relearn(now.UnixNano())
	base, item = g.priced(base), g.priced(item)
	n := maxItems
	for _, part := range [...][2]int64{{base.Requests, item.Requests}, {base.Input, item.Input}, {base.Output, item.Output}} {
		if part[1] > 0 {
			if fit := (MaxCost - part[0]) / part[1]; fit < int64(n) {
				n = int(fit)
			}
		}
	}
	for l := range NumLimits {
		lim := g.limits[l]
		per := item.On(l)
		if lim == 0 || per == 0 {
			if lim > 0 && base.On(l) > lim {
				return 0
			}
			continue
		}
		fit := (lim - base.On(l)) / per
		if fit < int64(n) {
			n = int(max(fit, 0))
		}
	}
	return n
}

// setScales computes, for each limit in force, the seconds of its capacity
// one unit takes.
func (g *Governor) setScales() {
	for l := range NumLimits {
		g.scale[l] = 0
		if lim := g.limits[l]; lim > 0 {
			g.scale[l] = l.Period().Seconds() / float64(lim)
		}
	}
}

// expire drops what no longer counts at now.
func (g *Governor) expire(now int64) {
	g.endPayBack(now)
	g.relearn(now)
	g.minute.expire(now)
	g.day.expire(now)
	if g.monthly() {
		g.month.expire(now)
	}
	for l := range g.phantom {
		if len(g.phantom[l]) > 0 {
			g.phantom[l] = expirePhantoms(g.phantom[l], now)
		}
	}
}

// start starts the governor's clock, and its pacers, at its first call (or
// Restore).
func (g *Governor) start(now int64) {
	if g.epoch == math.MinInt64 {
		g.epoch = now
		g.startPacers(now)
		g.probeEnd = addSat(now, int64(probeFor))
	}
}

// broadcast wakes every Wait: something changed that may admit. The
// channel is made only when a Wait asks for it.
func (g *Governor) broadcast() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// changedChan returns the channel the next broadcast closes. g.mu is held.
func (g *Governor) changedChan() chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// Blocker says what holds waiting reservation r back at now; the zero
// Blocker for a reservation that is not waiting.
func (g *Governor) Blocker(now time.Time, r *Reservation) Blocker {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.state != waiting {
		return Blocker{}
	}
	n := now.UnixNano()
	g.expire(n)
	return g.blocker(n, r.f, r.cost)
}

// EstimateWait estimates how long until waiting reservation r is admitted:
// the time for the limits to free room for r and every reservation ahead of
// it in fair order. It is 0 for an admitted reservation.
func (g *Governor) EstimateWait(now time.Time, r *Reservation) time.Duration {
	g.mustBeNew()
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.state != waiting && r.state != parked {
		return 0
	}
	n := now.UnixNano()
	g.expire(n)
	return g.estimate(n, r.f, r, r.start, r.cost)
}
