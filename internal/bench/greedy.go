package bench

import (
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// greedyPolicy is the reference for utilization, not a model of anyone's
// scheduler: it knows every announced limit and how the provider counts them
// (window and accounting), keeps an exact ledger of what it was charged, and
// at every instant sends, of every flow's next call, the one whose oldest item
// has waited longest among those that fit now — again and again, until none
// fits. No fairness, no pacing, no spreading of a day's budget: whatever fits
// goes. A call carries the flow's next items, up to the largest batch that
// fits every limit in one go (userBatch); items that fit no call are refused
// up front (never_fit). It never sends what its ledger says cannot fit, so it
// meets a refusal only from a limit it was not told of: then it waits the
// retry-after (all flows), or halves that flow's batch if the call was too
// large, refusing an item that is too large alone.
type greedyPolicy struct {
	known      governor.Limits
	settle     bool
	defaultMax int64
	minute     *greedyLedger // nil when no minute limit is known
	day        *greedyLedger // nil when no day limit is known
	batch      map[*forecast.FlowState]int
	paused     time.Time // after a refusal: no call before
	wakeAt     time.Time
}

func newGreedy(sc *forecast.Scenario) *greedyPolicy {
	p := &greedyPolicy{known: sc.Provider.Limits, settle: sc.Provider.SettleOutput,
		defaultMax: sc.Provider.DefaultMaxTokens, batch: map[*forecast.FlowState]int{}}
	fixed := sc.Provider.FixedWindows
	for l := range governor.NumLimits {
		if p.known[l] == 0 {
			continue
		}
		if l.Period() == time.Minute && p.minute == nil {
			p.minute = &greedyLedger{period: time.Minute, fixed: fixed}
		}
		if l.Period() == 24*time.Hour && p.day == nil {
			p.day = &greedyLedger{period: 24 * time.Hour, fixed: fixed}
		}
	}
	return p
}

func (p *greedyPolicy) Start(w *forecast.World) {
	for _, f := range w.Flows() {
		p.batch[f] = userBatch(w.Scenario(), p.known, f)
	}
}

func (p *greedyPolicy) ledger(l governor.Limit) *greedyLedger {
	if l.Period() == time.Minute {
		return p.minute
	}
	return p.day
}

// cost is what the provider charges a call of n items of f at admission.
func (p *greedyPolicy) cost(f *forecast.FlowState, n int) governor.Cost {
	out := int64(n) * f.Flow().ItemMaxTokens
	if out == 0 {
		out = p.defaultMax
	}
	return governor.Cost{Requests: 1, Input: f.Flow().PromptTokens + int64(n)*f.Flow().ItemInputTokens, Output: out}
}

// fitsAt returns the earliest time, not before now, at which c fits every
// known limit given what was charged so far (the zero time if never).
func (p *greedyPolicy) fitsAt(now time.Time, c governor.Cost) time.Time {
	at := now
	for l := range governor.NumLimits {
		if lim := p.known[l]; lim > 0 {
			t := p.ledger(l).freeAt(now, l, c.On(l), lim)
			if t.IsZero() {
				return time.Time{}
			}
			if t.After(at) {
				at = t
			}
		}
	}
	return at
}

func (p *greedyPolicy) Wake(w *forecast.World) {
	if w.Now().Before(p.paused) {
		p.wakeLater(w, p.paused)
		return
	}
	for {
		for _, lg := range []*greedyLedger{p.minute, p.day} {
			if lg != nil {
				lg.expire(w.Now())
			}
		}
		// The oldest next call that fits now; else when the first will fit.
		var pick *forecast.FlowState
		var next time.Time
		for _, f := range w.Flows() {
			if f.Queued() == 0 {
				continue
			}
			if p.batch[f] == 0 {
				w.Refuse(f, w.Take(f, f.Queued()))
				continue
			}
			at := p.fitsAt(w.Now(), p.cost(f, min(p.batch[f], f.Queued())))
			switch {
			case at.IsZero():
			case at.Equal(w.Now()):
				if pick == nil || f.Oldest().Before(pick.Oldest()) {
					pick = f
				}
			case next.IsZero() || at.Before(next):
				next = at
			}
		}
		if pick == nil {
			if !next.IsZero() {
				p.wakeLater(w, next)
			}
			return
		}
		p.send(w, pick)
		if w.Now().Before(p.paused) {
			p.wakeLater(w, p.paused)
			return
		}
	}
}

func (p *greedyPolicy) send(w *forecast.World, f *forecast.FlowState) {
	items := w.Take(f, p.batch[f])
	c := p.cost(f, len(items))
	// The call's charge in each ledger, minute then day.
	var charges [2]*greedyCharge
	ledgers := [2]*greedyLedger{p.minute, p.day}
	for i, lg := range ledgers {
		if lg != nil {
			charges[i] = lg.add(w.Now(), c)
		}
	}
	w.Send(f, items, int64(len(items))*f.Flow().ItemMaxTokens, func(o forecast.Outcome) {
		resp := o.Response
		switch {
		case resp.Rejected:
			// Not charged: the refusal came at once, so its charges are
			// the last ones made.
			for i, lg := range ledgers {
				if lg != nil {
					lg.undo(charges[i])
				}
			}
			switch {
			case resp.TooLarge && len(items) == 1:
				w.Refuse(f, items)
			case resp.TooLarge:
				p.batch[f] = len(items) / 2
				w.PutBack(f, items)
			default:
				w.PutBack(f, items)
				p.paused = w.Now().Add(max(resp.RetryAfter, time.Millisecond))
			}
		case resp.Fault != forecast.NoFault:
			// Charged, not done: the items go again when a call fits. The
			// provider may have charged less output; the ledger keeps the
			// reservation, which is safe.
			w.PutBack(f, items)
		case p.settle:
			for i, lg := range ledgers {
				if lg != nil {
					lg.settle(charges[i], resp.Output)
				}
			}
		}
		if resp.Rejected {
			w.At(w.Now(), func() { p.Wake(w) })
		}
	})
}

func (p *greedyPolicy) wakeLater(w *forecast.World, t time.Time) {
	if !p.wakeAt.After(w.Now()) || t.Before(p.wakeAt) {
		p.wakeAt = t
		w.At(t, func() { p.Wake(w) })
	}
}

// greedyLedger is greedy's account of what it was charged over one period
// (a minute or a day), counted as the provider counts it: rolling, each
// charge stops counting exactly one period after it was made; fixed, every
// charge stops counting at the end of its window, a whole period since the
// Unix epoch.
type greedyLedger struct {
	period time.Duration
	fixed  bool
	start  time.Time       // fixed: start of the current window
	q      []*greedyCharge // q[head:] still count, oldest first
	head   int
	sum    governor.Cost // of q[head:]
}

// greedyCharge is one call's charge; under settle accounting its output is
// corrected to the real output when the call ends, and the charge keeps its
// time.
type greedyCharge struct {
	at   time.Time
	cost governor.Cost
	gone bool // no longer counts
}

func (lg *greedyLedger) expire(now time.Time) {
	if lg.fixed {
		ns := now.UnixNano()
		if ws := time.Unix(0, ns-floorMod(ns, int64(lg.period))); !ws.Equal(lg.start) {
			for _, ch := range lg.q[lg.head:] {
				ch.gone = true
			}
			clear(lg.q)
			lg.q, lg.head, lg.sum, lg.start = lg.q[:0], 0, governor.Cost{}, ws
		}
		return
	}
	cut := now.Add(-lg.period)
	for lg.head < len(lg.q) && !lg.q[lg.head].at.After(cut) {
		ch := lg.q[lg.head]
		ch.gone = true
		lg.sum = costSub(lg.sum, ch.cost)
		lg.q[lg.head] = nil
		lg.head++
	}
	if lg.head > 32 && lg.head*2 >= len(lg.q) {
		n := copy(lg.q, lg.q[lg.head:])
		clear(lg.q[n:])
		lg.q, lg.head = lg.q[:n], 0
	}
}

func (lg *greedyLedger) add(now time.Time, c governor.Cost) *greedyCharge {
	ch := &greedyCharge{at: now, cost: c}
	lg.q = append(lg.q, ch)
	lg.sum = costAdd(lg.sum, c)
	return ch
}

// undo takes back ch, the last charge made (a call refused at once).
func (lg *greedyLedger) undo(ch *greedyCharge) {
	if n := len(lg.q); n > lg.head && lg.q[n-1] == ch {
		lg.sum = costSub(lg.sum, ch.cost)
		ch.gone = true
		lg.q[n-1] = nil
		lg.q = lg.q[:n-1]
	}
}

// settle corrects ch's output, if ch still counts.
func (lg *greedyLedger) settle(ch *greedyCharge, output int64) {
	if !ch.gone {
		lg.sum.Output += output - ch.cost.Output
	}
	ch.cost.Output = output
}

// freeAt returns the earliest time, not before now, at which need more on
// limit l stays within lim, or the zero time if need alone exceeds lim.
// expire(now) must have run.
func (lg *greedyLedger) freeAt(now time.Time, l governor.Limit, need, lim int64) time.Time {
	if need > lim {
		return time.Time{}
	}
	excess := lg.sum.On(l) + need - lim
	if excess <= 0 {
		return now
	}
	if lg.fixed {
		return lg.start.Add(lg.period)
	}
	for _, ch := range lg.q[lg.head:] {
		if excess -= ch.cost.On(l); excess <= 0 {
			return ch.at.Add(lg.period)
		}
	}
	return time.Time{} // not reached: need ≤ lim
}

func costAdd(a, b governor.Cost) governor.Cost {
	return governor.Cost{Requests: a.Requests + b.Requests, Input: a.Input + b.Input, Output: a.Output + b.Output}
}

func costSub(a, b governor.Cost) governor.Cost {
	return governor.Cost{Requests: a.Requests - b.Requests, Input: a.Input - b.Input, Output: a.Output - b.Output}
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
