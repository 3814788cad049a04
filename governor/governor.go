package governor

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/num"
)

// Window says how a provider counts a period.
type Window uint8

const (
	// Rolling counts, at every moment, what was charged during the last
	// period; each charge ages out exactly one period after it was made.
	Rolling Window = iota
	// Fixed counts per window starting at whole minutes or days (UTC); the
	// whole allowance comes back at the boundary.
	Fixed
)

func (w Window) String() string {
	if w == Fixed {
		return "fixed"
	}
	return "rolling"
}

// Accounting says what a provider keeps of a call's charge once it ends.
type Accounting uint8

const (
	// Reserve keeps the admission charge (input + max_tokens); only the
	// input estimate is corrected to the provider's count. Groq and OpenAI.
	Reserve Accounting = iota
	// Settle corrects the output part to the real output when the call ends,
	// as Anthropic documents for OTPM.
	Settle
)

func (a Accounting) String() string {
	if a == Settle {
		return "settle"
	}
	return "reserve"
}

// FlowConfig describes one flow: a job, a tenant, a function drawing on the key.
type FlowConfig struct {
	Name string
	// Weight is the flow's share among flows of equal priority. Default 1
	// (0 means the default). Must be between MinWeight and MaxWeight.
	Weight float64
	// Priority: higher is more urgent. Each step of priority multiplies the
	// flow's share by Config.PriorityFactor: a reserved, larger share, never
	// an absolute one, so a lower-priority flow is slowed but never stopped.
	// Must be between MinPriority and MaxPriority.
	Priority int
}

// The range of FlowConfig.Priority. Six steps apart, at the largest
// PriorityFactor (16), the most urgent flow's share is 16^6 ≈ 1.7e7 times the
// least urgent one's: a finite ratio, so the least urgent flow still gets its
// calls in. An unbounded priority (1000 steps of 4 is +Inf) would stop
// every other flow, which priority must never do.
const (
	MinPriority = -3
	MaxPriority = 3
)

// The range of FlowConfig.Weight. A weight expresses a relative share; a
// ratio beyond 10^12 between two flows says nothing a smaller one does not,
// and a weight near 0 or +Inf makes a flow's fair-queuing tags infinite, so
// that it is never admitted or holds every other flow back.
const (
	MinWeight = 1e-6
	MaxWeight = 1e6
)

// maxPriorityFactor bounds Config.PriorityFactor, so that the share ratio
// across the priority range stays finite (see MinPriority).
const maxPriorityFactor = 16

// maxLag bounds Config.Lag: transit takes seconds, and a lag of a period or
// more would count every charge in two windows.
const maxLag = time.Minute

// Config configures a Governor. The zero value of every field is a useful default.
type Config struct {
	// Key names the provider key (and model) in errors and stats. Never the secret itself.
	Key string
	// Limits is the allowance of each limit; 0 means the limit does not apply.
	Limits Limits
	// Window is how the provider counts periods. Default Rolling.
	Window Window
	// Accounting is what the provider keeps of a charge. Default Reserve.
	Accounting Accounting
	// Flows lists known flows. A flow not listed is created on first use
	// with weight 1 and priority 0.
	Flows []FlowConfig
	// PriorityFactor multiplies a flow's share per step of priority. Default 4.
	// Must be between 1 and 16.
	PriorityFactor float64
	// DayBurst is how far ahead of an even pace a day limit (RPD, TPD) may be
	// spent: day budgets are paced at limit/24h so the budget lasts the day,
	// with this much burst. Default 1h. Negative disables pacing. At most 24h.
	DayBurst time.Duration
	// DayPace is the fraction of a day limit's even rate that pacing aims
	// at. Default 0.995: just under the even rate, so under a rolling day
	// window the window itself never fills, and admissions follow the
	// pacer's even, fair rhythm instead of echoing whatever the window held
	// a day before.
	DayPace float64
	// Lag is how much later than the governor's clock the provider may
	// count a call: the time a request takes to reach it. Under a rolling
	// window a charge ages out this much later than one period after it was
	// admitted; under a fixed window a call made this close before a
	// boundary also counts after it. So a call admitted the instant an old
	// charge ages out here does not reach the provider while that charge
	// still counts there. Default 0, right for an explicit clock shared
	// with the provider (the bench); on the wall clock use the request's
	// transit time with some margin (sluice's engine uses 2s, its gateway 1s).
	// At most a minute.
	Lag time.Duration
	// PromoteAfter bounds how long a flow can go without a call admitted
	// while it has one waiting: a flow whose first waiting call has waited
	// this long, and whose last admission is as old, goes to the front of
	// the line, oldest first, ahead of fair order, and priority flows' prompt
	// admissions may not delay it. A flow is promoted only once it has
	// waited at least as long as its share of the key takes to earn the
	// call, so promotion never gives a flow more than its share. Fair order
	// alone can hold a flow back for long after calls of it were admitted
	// ahead of their turn (backfilling), or while priority work takes most
	// of the key. Default 35m: a flow promoted then is admitted within the
	// hour sluice's monitoring calls a stall. Negative disables it.
	PromoteAfter time.Duration
	// Journal, if set, is told every charge and every correction of one, so
	// the day's usage can be persisted and given back to Restore after a restart.
	Journal Journal
	// Now is the clock Wait uses. Default time.Now. Every other method takes
	// the time as an argument.
	Now func() time.Time
	// Speed is how many times as fast as the wall clock Now runs, for
	// simulations in compressed time: Wait and Await divide what they sleep
	// by it. Default 1.
	Speed float64
}

// Journal receives charges as they are made and corrected. Record is called
// with the governor's lock held: it must not block (buffer and write elsewhere).
type Journal interface {
	Record(c Charge)
}

// Charge is one admitted call's charge, for persistence.
type Charge struct {
	ID   uint64
	Flow string
	At   time.Time
	Cost Cost // a cancelled call is recorded again with a zero Cost
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.PriorityFactor == 0 {
		out.PriorityFactor = 4
	}
	if out.DayBurst == 0 {
		out.DayBurst = time.Hour
	}
	if out.PromoteAfter == 0 {
		out.PromoteAfter = 35 * time.Minute
	}
	if out.DayPace == 0 {
		out.DayPace = 0.995
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

func (c *Config) prefix() string {
	if c.Key == "" {
		return "governor: "
	}
	return "governor " + c.Key + ": "
}

func (c *Config) validate() error {
	for _, l := range AllLimits {
		if c.Limits[l] < 0 {
			return fmt.Errorf("%slimit %s is negative (%d)", c.prefix(), l, c.Limits[l])
		}
	}
	if c.Speed < 0 || math.IsNaN(c.Speed) || math.IsInf(c.Speed, 0) {
		return fmt.Errorf("%sSpeed must be a finite number ≥ 0, got %v", c.prefix(), c.Speed)
	}
	if c.Lag < 0 || c.Lag > maxLag {
		return fmt.Errorf("%sLag must be between 0 and %v, got %v", c.prefix(), maxLag, c.Lag)
	}
	if c.DayBurst > 24*time.Hour {
		return fmt.Errorf("%sDayBurst must be at most 24h, got %v", c.prefix(), c.DayBurst)
	}
	if c.DayPace < 0 || c.DayPace > 1 || math.IsNaN(c.DayPace) {
		return fmt.Errorf("%sDayPace must be in (0, 1], got %v", c.prefix(), c.DayPace)
	}
	if !(c.PriorityFactor >= 1 && c.PriorityFactor <= maxPriorityFactor) {
		return fmt.Errorf("%sPriorityFactor must be at least 1 and at most %d, got %v", c.prefix(), maxPriorityFactor, c.PriorityFactor)
	}
	seen := map[string]bool{}
	for _, f := range c.Flows {
		if f.Name == "" {
			return fmt.Errorf("%sa flow has no name", c.prefix())
		}
		if seen[f.Name] {
			return fmt.Errorf("%sflow %q listed twice", c.prefix(), f.Name)
		}
		seen[f.Name] = true
		if f.Weight != 0 && !(f.Weight >= MinWeight && f.Weight <= MaxWeight) {
			return fmt.Errorf("%sflow %q: weight must be positive, between %g and %g, got %v", c.prefix(), f.Name, float64(MinWeight), float64(MaxWeight), f.Weight)
		}
		if f.Priority < MinPriority || f.Priority > MaxPriority {
			return fmt.Errorf("%sflow %q: priority must be between %d and %d, got %d", c.prefix(), f.Name, MinPriority, MaxPriority, f.Priority)
		}
	}
	return nil
}

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
// A Governor is safe for simultaneous use by multiple goroutines.
type Governor struct {
	mu  sync.Mutex
	cfg Config

	limits  Limits
	minute  ledger
	day     ledger
	phantom [NumLimits][]phantom
	pace    [NumLimits]pacer
	scale   [NumLimits]float64 // seconds of a limit's capacity per unit

	pauseUntil int64 // an unclassified rejection pauses the key until then
	pauseLevel int

	flows map[string]*flow
	// hot lists the priority flows (priority above 0) that reserved most
	// recently, latest first: room is held for their next calls.
	hot [hotFlows]*flow
	// heldMax is, per limit, the most room held can hold back: the room
	// for the hot flows' calls, whatever their credit.
	heldMax [NumLimits]int64
	// urgent lists the priority flows with calls waiting.
	urgent []*flow
	shares float64 // the sum of every known flow's share
	active flowHeap
	vtime  float64
	seq    uint64
	epoch  int64 // time of the first call, to start the pacers

	changed chan struct{} // closed and replaced when something may admit

	parkedN int   // reservations parked, of every flow (place.go)
	lapseAt int64 // when the first parked place lapses
}

// New returns a Governor for cfg.
func New(cfg Config) (*Governor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Governor{
		cfg:     cfg,
		limits:  cfg.Limits,
		minute:  newLedger(time.Minute, cfg.Lag, cfg.Window == Fixed),
		day:     newLedger(24*time.Hour, cfg.Lag, cfg.Window == Fixed),
		flows:   make(map[string]*flow, len(cfg.Flows)),
		epoch:   math.MinInt64,
		lapseAt: math.MaxInt64,
	}
	for _, fc := range cfg.Flows {
		g.addFlow(g.newFlow(fc))
	}
	g.setPacers()
	g.setScales()
	return g, nil
}

// Limits returns the limits in force: the configured ones, as corrected by what the provider reported.
func (g *Governor) Limits() Limits {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limits
}

func (g *Governor) ledgerOf(l Limit) *ledger {
	if l.Period() == time.Minute {
		return &g.minute
	}
	return &g.day
}

// Check reports whether c could ever be admitted. If not, the error is a
// *TooLargeError naming the limit, the numbers, and the largest max_tokens
// that would fit with the same input — or, for a cost with a part negative
// or over MaxCost, an error wrapping ErrInvalidCost that names the part.
func (g *Governor) Check(c Cost) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.check(c)
}

func (g *Governor) check(c Cost) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%s%w", g.cfg.prefix(), err)
	}
	for _, l := range AllLimits {
		lim := g.limits[l]
		if lim > 0 && c.On(l) > lim {
			return &TooLargeError{Key: g.cfg.Key, Limit: l, Need: c.On(l), Max: lim, MaxOutput: g.maxOutput(c.Input)}
		}
	}
	return nil
}

// maxOutput is the largest output reservation that fits every limit with this input (-1: none).
func (g *Governor) maxOutput(input int64) int64 {
	best := int64(math.MaxInt64)
	for _, l := range AllLimits {
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
				return -1
			}
		}
	}
	if best < 0 {
		return -1
	}
	return best
}

// LargestBatch returns the largest n ≤ maxItems such that a call costing
// base + n×item fits every limit and MaxCost (0 if even one item does not
// fit, or base or item is not a valid Cost). Use it to size batches before
// calling instead of learning from rejections.
func (g *Governor) LargestBatch(base, item Cost, maxItems int) int {
	if maxItems <= 0 || base.validate() != nil || item.validate() != nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := maxItems
	for _, part := range [...][2]int64{{base.Requests, item.Requests}, {base.Input, item.Input}, {base.Output, item.Output}} {
		if part[1] > 0 {
			if fit := (MaxCost - part[0]) / part[1]; fit < int64(n) {
				n = int(fit)
			}
		}
	}
	for _, l := range AllLimits {
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

// Reserve queues a call of flow costing c at time now. It never blocks. A
// call that can never fit returns a *TooLargeError at once. The reservation
// is admitted by Advance (or Wait) when its turn comes and it fits.
func (g *Governor) Reserve(now time.Time, flow string, c Cost) (*Reservation, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(c); err != nil {
		return nil, err
	}
	g.start(now.UnixNano())
	f := g.flow(flow)
	size := g.size(c)
	if f.prio != nil {
		g.refill(f, now.UnixNano()) // the credit it earned while it had nothing waiting
		g.learnCall(f, c, size)
		g.touch(f)
		if len(f.queue) == 0 {
			g.urgent = append(g.urgent, f)
		}
	}
	g.seq++
	r := &Reservation{g: g, f: f, id: g.seq, cost: c, queued: now.UnixNano()}
	r.size = size
	size /= f.share
	if len(f.queue) == 0 {
		// A flow that comes back is not owed what it missed while it had
		// nothing waiting — except when it comes back at the very moment
		// its line emptied (its calls were all admitted at once and it
		// queues the next ones): it keeps its place.
		v := g.vtime
		if now.UnixNano() == f.idleAt {
			v = f.idleV
		}
		r.start = math.Max(v, f.finish)
	} else {
		r.start = f.queue[len(f.queue)-1].finish
	}
	r.finish = r.start + size
	f.finish = r.finish
	if len(f.queue) == 0 {
		// Reuse the line's memory: a flow that makes one call at a time
		// allocates nothing for its line.
		f.queue = append(f.qbuf[:0], r)
		f.qbuf = f.queue[:0]
		heap.Push(&g.active, f)
	} else {
		f.queue = append(f.queue, r)
	}
	return r, nil
}

// size is c's dominant share, in seconds: of every limit, the time the
// limit needs to replenish what c takes (amount × period ÷ allowance), and
// the largest of these. Minute and day limits so compare on one scale.
func (g *Governor) size(c Cost) float64 {
	var s float64
	for _, l := range AllLimits {
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

// setScales computes, for each limit in force, the seconds of its capacity
// one unit takes.
func (g *Governor) setScales() {
	for _, l := range AllLimits {
		g.scale[l] = 0
		if lim := g.limits[l]; lim > 0 {
			g.scale[l] = l.Period().Seconds() / float64(lim)
		}
	}
}

// Advance admits, in fair order, every waiting reservation that fits at now,
// and returns the earliest time at which calling it again may admit more
// (the zero Time when nothing waits). Times passed to the governor must not
// go backwards.
func (g *Governor) Advance(now time.Time) time.Time {
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
	if len(g.urgent) > 0 && g.prompt(now, promoted) {
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
		at := g.fitAt(now, r.f, r.cost)
		if at <= now {
			g.admit(now, r, how)
			admitted = true
			// Admitting the front call changes which flow is promoted;
			// backfilling does not (it never admits the promoted flow's).
			promoted = g.promoted(now)
			continue
		}
		if at == never {
			if err := g.check(r.cost); err != nil {
				// A limit learned lower than when the call was queued: it
				// can never fit now, so it fails at once instead of holding
				// the line.
				g.refuse(r, err)
				admitted = true // something changed: wake the waiters
				promoted = g.promoted(now)
				continue
			}
		}
		n, wake := g.backfill(now, r, at)
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
	return next
}

// promoted returns the flow whose first waiting call has gone longest
// without the flow getting a call admitted, if that is at least
// PromoteAfter and at least the time its share of the key takes to earn
// the call (its size ÷ its fraction of all flows' shares): a flow is never
// promoted to more than its share. nil if there is none.
func (g *Governor) promoted(now int64) *flow {
	if g.cfg.PromoteAfter < 0 {
		return nil
	}
	limit := now - int64(g.cfg.PromoteAfter)
	var best *flow
	var bestSince int64
	for _, f := range g.active.flows {
		r := f.queue[0]
		since := max(r.queued, f.lastAdmit)
		if since > limit || (best != nil && since >= bestSince) {
			continue
		}
		if earn := r.size * g.shares / f.share * float64(time.Second); float64(now-since) < earn {
			continue
		}
		best, bestSince = f, since
	}
	return best
}

// backfillScan bounds how many other flows one backfill pass looks at, so a
// blocked line costs a bounded amount of work however many flows wait.
const backfillScan = 32

// backfill admits, while the call at the front of the line (head) cannot
// start before at, the front calls of other flows that fit now and would
// not make head start later — the backfilling rule of batch schedulers
// (EASY): capacity the front call cannot use yet is not left idle, and the
// front call's start is never delayed by it. Candidates are taken in fair
// order. It returns how many calls it admitted (or refused, as advance
// does: see refuse) and the earliest time a candidate that did not fit may
// fit.
//
// The unfairness this allows is bounded: a call admitted ahead of its turn
// takes only room the front call could not use before its start, and its
// flow's fair-queuing tags advance as if it had waited, so its flow is
// admitted that much later once the front call has gone.
func (g *Governor) backfill(now int64, head *Reservation, at int64) (int, int64) {
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
	wake, count := int64(never), 0
	for _, f := range cand[:n] {
		r := f.queue[0]
		t := g.fitAt(now, f, r.cost)
		if t == never {
			if err := g.check(r.cost); err != nil {
				g.refuse(r, err)
				count++ // a change: the caller looks at the line again
				continue
			}
		}
		if t > now {
			wake = min(wake, t)
			continue
		}
		if g.delays(now, head, at, f, r.cost) {
			continue
		}
		g.admit(now, r, aheadOfTurn)
		count++
	}
	return count, wake
}

// delays reports whether charging c now would make head, which fits at
// at, fit only later. Under a rolling window a charge made now is gone by
// now + period + lag; under a fixed one at the end of its window; on a day
// pacer it moves the time head may start by its own amount.
func (g *Governor) delays(now int64, head *Reservation, at int64, f *flow, c Cost) bool {
	for _, l := range AllLimits {
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
		if at < gone && lg.freeAt(now, l, addSat(need, extra), lim, g.phantom[l]) > at {
			return true
		}
		if p := &g.pace[l]; p.on && !g.onCredit(head.f, now, head.size) && head.f.retry < head.size {
			tat := addSat(max(p.tat, now), nanos(float64(extra)*p.perUnit))
			if subSat(tat, p.burst) > at {
				return true
			}
		}
	}
	return false
}

// expire drops what no longer counts at now.
func (g *Governor) expire(now int64) {
	g.minute.expire(now)
	g.day.expire(now)
	for l := range g.phantom {
		if len(g.phantom[l]) > 0 {
			g.phantom[l] = expirePhantoms(g.phantom[l], now)
		}
	}
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
	for _, l := range AllLimits {
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
	r.state = admitted
	r.at = now
	r.minSeq = g.minute.add(now, r.cost)
	r.daySeq = g.day.add(now, r.cost)
	r.sent = now
	for _, l := range AllLimits {
		r.usedAt[l] = g.ledgerOf(l).sum.On(l)
	}
	paced := false // a day pacer would have held it
	for _, l := range AllLimits {
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
	}
	for _, l := range AllLimits {
		if p := &g.pace[l]; p.on {
			p.take(now, r.cost.On(l))
		}
	}
	f.admitted++
	f.lastAdmit = now
	f.tokens = f.tokens.add(r.cost)
	f.addRate(now, r.size)
	if g.cfg.Journal != nil {
		g.cfg.Journal.Record(Charge{ID: r.id, Flow: f.name, At: time.Unix(0, now), Cost: r.cost})
	}
	if r.ready != nil {
		close(r.ready)
	}
}

// amend replaces an admitted reservation's charge.
func (g *Governor) amend(r *Reservation, c Cost) {
	g.minute.amend(r.minSeq, c)
	g.day.amend(r.daySeq, c)
	for _, l := range AllLimits {
		if g.pace[l].on {
			g.pace[l].giveBack(subSat(r.cost.On(l), c.On(l)))
		}
	}
	if r.credit > 0 {
		// What the call no longer takes goes back to the credit it was taken on.
		back := min(r.credit, max(r.credit-g.size(c), 0))
		r.credit -= back
		r.f.prio.credit = min(r.f.prio.credit+back, g.creditCap(r.f))
	}
	r.f.tokens = r.f.tokens.sub(r.cost).add(c)
	r.cost = c
	if g.cfg.Journal != nil {
		g.cfg.Journal.Record(Charge{ID: r.id, Flow: r.f.name, At: time.Unix(0, r.at), Cost: c})
	}
}

func (g *Governor) start(now int64) {
	if g.epoch == math.MinInt64 {
		g.epoch = now
		// The pacers start with no burst in hand: under a rolling window a
		// day paced from the first call never holds more than the limit, so
		// the window itself never stops everything a day later.
		for l := range g.pace {
			g.pace[l].tat = addSat(now, g.pace[l].burst)
		}
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

// Wait reserves on the clock of Config.Now and blocks until the call is
// admitted or ctx is done. When ctx ends first the reservation is cancelled
// and the error is a *WaitError whose EstimatedWait says how much longer
// admission would likely have taken. A call that can never fit returns a
// *TooLargeError at once.
func (g *Governor) Wait(ctx context.Context, flow string, c Cost) (*Reservation, error) {
	r, err := g.Reserve(g.cfg.Now(), flow, c)
	if err != nil {
		return nil, err
	}
	if err := g.Await(ctx, r, 0); err != nil {
		return nil, err
	}
	return r, nil
}

// Blocker says what holds waiting reservation r back at now; the zero
// Blocker for a reservation that is not waiting.
func (g *Governor) Blocker(now time.Time, r *Reservation) Blocker {
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
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.state != waiting && r.state != parked {
		return 0
	}
	n := now.UnixNano()
	g.expire(n)
	return g.estimate(n, r.f, r, r.start, r.cost)
}

// estimate is the time until a call of f costing c with start tag start
// (r itself, when it is reserved) is admitted: every call ahead of it in
// fair order, those parked included, must be admitted first, and each
// limit admits at its allowance per period, each day limit at its pacer's
// rate. It assumes expire(now) ran.
func (g *Governor) estimate(n int64, f *flow, r *Reservation, start float64, c Cost) time.Duration {
	ahead := c
	for _, o := range g.flows {
		for _, list := range [2][]*Reservation{o.queue, o.parked} {
			for _, q := range list {
				if q != r && q.start <= start {
					ahead = ahead.add(q.cost)
				}
			}
		}
	}
	at := g.fitAt(n, f, c)
	for _, l := range AllLimits {
		lim := g.limits[l]
		if lim == 0 {
			continue
		}
		lg := g.ledgerOf(l)
		need := subSat(addSat(lg.sum.On(l), ahead.On(l)), lim)
		if need > 0 {
			// the backlog drains at the limit's rate
			rate := float64(lim) / float64(l.Period())
			at = max(at, addSat(n, nanos(float64(need)/rate)))
		}
		if p := &g.pace[l]; p.on {
			// and a day limit's no faster than its pacer
			at = max(at, addSat(max(p.readyAt(), n), nanos(float64(subSat(ahead.On(l), c.On(l)))*p.perUnit)))
		}
	}
	return time.Duration(subSat(at, n))
}

// Reservation is a call's place in line and, once admitted, its charge.
type Reservation struct {
	g    *Governor
	f    *flow
	id   uint64
	cost Cost

	start, finish float64 // fair-queuing tags
	size          float64 // dominant share of cost, in seconds
	state         resState
	at            int64 // admitted at
	sent          int64 // its charge counts from then (admission, or Sent)
	minSeq        uint64
	daySeq        uint64
	usedAt        [NumLimits]int64 // what the governor had charged, this call included, when it was admitted
	credit        float64          // what of its flow's credit it took (see priority.go)
	queued        int64            // when it was reserved
	keptUntil     int64            // parked: when its place lapses
	ready         chan struct{}
	err           error // why a waiting reservation was refused
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
// MaxCost); the output part becomes the real output under Settle accounting
// (never below 0 nor above what was reserved) and stays max_tokens under
// Reserve accounting. A zero Usage (the provider reported none) keeps the
// charge as reserved. Settling twice, or a reservation that was not
// admitted, does nothing.
func (r *Reservation) Settle(now time.Time, used Usage) {
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.state != admitted {
		return
	}
	g.expire(now.UnixNano())
	c := r.cost
	if used.Input > 0 {
		c.Input = min(used.Input, MaxCost)
	}
	if g.cfg.Accounting == Settle && used != (Usage{}) {
		c.Output = min(max(used.Output, 0), r.cost.Output)
	}
	g.amend(r, c)
	r.state = settled
	g.pauseLevel = 0
	g.broadcast()
}

// Fault records that the admitted call failed in a way the provider may
// have counted — a 5xx, an overload, a timeout, a reset, a body cut short:
// the charge is kept, as Settle with used (zero: as reserved) keeps it.
// And the flow's next call, its retry, may go ahead of the day pacers once,
// if it is no larger than this one: a failure does not cost the flow a
// pacing slot, and the budget runs ahead of the even pace by at most one
// call per flow, which the pacer then takes back from every flow.
func (r *Reservation) Fault(now time.Time, used Usage) {
	g := r.g
	g.mu.Lock()
	if r.state == admitted {
		r.f.retry = max(r.f.retry, r.size)
	}
	g.mu.Unlock()
	r.Settle(now, used)
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
	g.minute.amend(r.minSeq, Cost{})
	g.day.amend(r.daySeq, Cost{})
	r.minSeq = g.minute.add(n, r.cost)
	r.daySeq = g.day.add(n, r.cost)
	r.sent = n
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
	if r.state != admitted || c.Requests > r.cost.Requests || c.Input > r.cost.Input || c.Output > r.cost.Output ||
		c.Requests < 0 || c.Input < 0 || c.Output < 0 {
		return false
	}
	g.expire(now.UnixNano())
	g.amend(r, c)
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
		g.dequeue(r)
	case admitted:
		g.expire(now.UnixNano())
		g.amend(r, Cost{})
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

func (g *Governor) dequeue(r *Reservation) {
	f := r.f
	i := 0
	for i < len(f.queue) && f.queue[i] != r {
		i++
	}
	if i == len(f.queue) {
		return
	}
	size := r.finish - r.start
	copy(f.queue[i:], f.queue[i+1:])
	f.queue[len(f.queue)-1] = nil
	f.queue = f.queue[:len(f.queue)-1]
	for _, q := range f.queue[i:] {
		q.start -= size
		q.finish -= size
	}
	f.finish -= size
	if len(f.queue) == 0 {
		f.queue = f.qbuf[:0]
		heap.Remove(&g.active, f.index)
		if f.prio != nil {
			g.calm(f)
		}
	} else if i == 0 {
		heap.Fix(&g.active, f.index)
	}
}

// refuse ends waiting reservation r with err.
func (g *Governor) refuse(r *Reservation, err error) {
	g.dequeue(r)
	r.state = refused
	r.err = err
	if r.ready != nil {
		close(r.ready)
	}
}

// TooLargeError reports a call that can never be admitted: it needs more of
// a limit than the limit's whole allowance.
type TooLargeError struct {
	Key   string
	Limit Limit
	Need  int64
	Max   int64
	// MaxOutput is the largest max_tokens that would fit with the same
	// input, or -1 if the input alone does not fit.
	MaxOutput int64
}

func (e *TooLargeError) Error() string {
	hint := "lower max_tokens or the batch"
	switch e.Limit {
	case RPM, RPD:
		hint = "this key allows no request at all"
	case ITPM:
		hint = "shorten the prompt or the batch"
	}
	if e.MaxOutput >= 0 && e.Limit != ITPM && e.Limit != RPM && e.Limit != RPD {
		hint += fmt.Sprintf(" (max_tokens ≤ %s fits)", num.Group(e.MaxOutput))
	}
	return fmt.Sprintf("request can never fit: needs %s %s, %s limit is %s: %s",
		num.Group(e.Need), e.Limit.Unit(), upper(e.Limit), num.Group(e.Max), hint)
}

// WaitError reports a wait for admission that ended before the call was admitted.
type WaitError struct {
	Key           string
	Err           error         // why the wait ended, e.g. context.DeadlineExceeded
	EstimatedWait time.Duration // how much longer admission would likely have taken
	// On says what the call waited on when the wait ended (see Blocker).
	On Blocker
	// KeptUntil is when the call's kept place in line lapses (Await with a
	// keep; Reservation.Rejoin takes it back), zero when it left the line.
	KeptUntil time.Time
}

// Blocker says what holds a waiting call back.
type Blocker struct {
	// Kind is one of "limit" (a window of Limit has no room yet), "pacing"
	// (the day pacer of Limit spreads the day's budget: "tpd pacing"),
	// "pause" (the provider refused a call without naming a limit, or named
	// one this governor was not told of), "turn" (it fits, but calls of
	// other flows are ahead of it in fair order) or "" (nothing: it is
	// about to be admitted).
	Kind  string
	Limit Limit // for "limit" and "pacing"
	// Until is when that stops holding it back, as far as the governor
	// knows now (zero for "turn").
	Until time.Time
}

// String names the blocker as logs and errors do: "tpm", "tpd pacing",
// "a provider pause", "its turn".
func (b Blocker) String() string {
	switch b.Kind {
	case "limit":
		return b.Limit.String()
	case "pacing":
		return b.Limit.String() + " pacing"
	case "pause":
		return "a provider pause"
	case "turn":
		return "its turn"
	}
	return "nothing"
}

func (e *WaitError) Error() string {
	on := ""
	if e.On.Kind != "" {
		on = "; waiting on " + e.On.String()
		if !e.On.Until.IsZero() {
			on += " until " + e.On.Until.UTC().Format(time.RFC3339)
		}
	}
	return fmt.Sprintf("not admitted (%v)%s; estimated further wait %s", e.Err, on, e.EstimatedWait.Round(time.Millisecond))
}

func (e *WaitError) Unwrap() error { return e.Err }

func upper(l Limit) string {
	b := []byte(l.String())
	for i := range b {
		b[i] -= 'a' - 'A'
	}
	return string(b)
}
