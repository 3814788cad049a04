package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// gate holds calls the governor has admitted until the provider's own window
// has room for them.
//
// The governor counts a call from the moment it admits it; the provider
// counts it from the moment it arrives, a little later, and the delay is not
// the same for every call. A call admitted the instant an older charge ages
// out of the governor's window can therefore reach the provider while that
// older charge still counts there, and be refused. The gate keeps every
// charge lag longer than its window, in the order calls pass, so the
// provider's view is never fuller than the gate's. Its price is lag of
// waiting at a full window's edge.
//
// A gate is safe for simultaneous use by multiple goroutines.
type gate struct {
	lag    int64
	fixed  bool
	limits func() governor.Limits
	now    func() time.Time

	mu      sync.Mutex
	minute  gateWindow
	day     gateWindow
	line    []*gateTicket // calls waiting to pass, in arrival order
	changed chan struct{}
}

// gateEntry is one call that passed the gate, as its windows remember it.
type gateEntry struct {
	at          int64
	cost        governor.Cost
	inMin, inDy bool // still counted by the minute / day window
}

// gateTicket is a call's place in the gate's line. It is not empty: pointers
// to distinct zero-size values may compare equal.
type gateTicket struct{ _ byte }

type gateWindow struct {
	period  int64
	entries []*gateEntry
	head    int
	sum     governor.Cost
}

// newGate returns a gate; a negative lag turns it off (pass never waits).
func newGate(lag time.Duration, fixed bool, limits func() governor.Limits, now func() time.Time) *gate {
	return &gate{
		lag: int64(lag), fixed: fixed, limits: limits, now: now,
		minute:  gateWindow{period: int64(time.Minute)},
		day:     gateWindow{period: int64(24 * time.Hour)},
		changed: make(chan struct{}),
	}
}

func (gt *gate) off() bool { return gt == nil || gt.lag < 0 }

// pass waits until c fits the provider's view of every limit and every call
// that came to the gate earlier has passed, then records c. It returns the
// entry to amend once the provider has reported the call's real usage.
//
// A call waits at most lag: the governor, which admitted it, counts it from
// its admission, and a call held longer would be held again a lag longer by
// the next call to reuse its room, and so on — under a key saturated for
// hours the waits would grow without end. Past that bound, the governor's
// feedback from a rare refusal takes over.
func (gt *gate) pass(ctx context.Context, c governor.Cost) (*gateEntry, error) {
	if gt.off() {
		return nil, nil
	}
	t := &gateTicket{}
	latest := gt.now().UnixNano() + gt.lag
	gt.mu.Lock()
	gt.line = append(gt.line, t)
	gt.mu.Unlock()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		gt.mu.Lock()
		now := gt.now().UnixNano()
		var at int64
		if gt.line[0] == t {
			lim := gt.limits()
			if at = min(gt.freeAt(now, c, lim), latest); at <= now {
				e := gt.record(now, c, lim)
				gt.line = gt.line[1:]
				gt.broadcast()
				gt.mu.Unlock()
				return e, nil
			}
		}
		changed := gt.changed
		gt.mu.Unlock()
		var tick <-chan time.Time
		if at > now {
			d := time.Duration(at - now)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tick = timer.C
		}
		select {
		case <-changed:
		case <-tick:
		case <-ctx.Done():
			gt.mu.Lock()
			for i, x := range gt.line {
				if x == t {
					gt.line = append(gt.line[:i:i], gt.line[i+1:]...)
					break
				}
			}
			gt.broadcast()
			gt.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// amend replaces the charge of e (the provider's real count, or zero for a
// call the provider refused and so never counted).
func (gt *gate) amend(e *gateEntry, c governor.Cost) {
	if e == nil {
		return
	}
	gt.mu.Lock()
	defer gt.mu.Unlock()
	if e.inMin {
		gt.minute.sum = addCost(sub(gt.minute.sum, e.cost), c)
	}
	if e.inDy {
		gt.day.sum = addCost(sub(gt.day.sum, e.cost), c)
	}
	e.cost = c
	gt.broadcast()
}

func (gt *gate) broadcast() {
	close(gt.changed)
	gt.changed = make(chan struct{})
}

// counts reports whether a call sent at "at" may still count at the
// provider at now, in a window of period.
func (gt *gate) counts(at, now, period int64) bool {
	if gt.fixed {
		// It may arrive up to lag later, in the next window.
		return windowStart(at+gt.lag, period) >= windowStart(now, period)
	}
	return at+period+gt.lag > now
}

func (gt *gate) expire(now int64) {
	for _, w := range []*gateWindow{&gt.minute, &gt.day} {
		for w.head < len(w.entries) && !gt.counts(w.entries[w.head].at, now, w.period) {
			e := w.entries[w.head]
			w.entries[w.head] = nil
			w.head++
			w.sum = sub(w.sum, e.cost)
			if w == &gt.minute {
				e.inMin = false
			} else {
				e.inDy = false
			}
		}
		if w.head > 64 && w.head*2 >= len(w.entries) {
			n := copy(w.entries, w.entries[w.head:])
			clear(w.entries[n:])
			w.entries, w.head = w.entries[:n], 0
		}
	}
}

// freeAt returns the earliest time not before now at which c fits every limit
// of lim, as the provider may see them.
func (gt *gate) freeAt(now int64, c governor.Cost, lim governor.Limits) int64 {
	gt.expire(now)
	at := now
	for _, l := range governor.AllLimits {
		if lim[l] == 0 || c.On(l) == 0 {
			continue
		}
		w := &gt.minute
		if l.Period() != time.Minute {
			w = &gt.day
		}
		excess := w.sum.On(l) + c.On(l) - lim[l]
		if excess <= 0 {
			continue
		}
		if gt.fixed {
			at = max(at, windowStart(now, w.period)+w.period)
			continue
		}
		t := int64(-1)
		for _, e := range w.entries[w.head:] {
			if excess -= e.cost.On(l); excess <= 0 {
				t = e.at + w.period + gt.lag
				break
			}
		}
		if t < 0 { // the limit shrank below what is charged: retry after a whole window
			t = now + w.period
		}
		at = max(at, t)
	}
	return at
}

// record counts c as sent at now in the windows of the limits that apply.
func (gt *gate) record(now int64, c governor.Cost, lim governor.Limits) *gateEntry {
	e := &gateEntry{at: now, cost: c}
	var minute, day bool
	for _, l := range governor.AllLimits {
		if lim[l] > 0 {
			if l.Period() == time.Minute {
				minute = true
			} else {
				day = true
			}
		}
	}
	if minute {
		e.inMin = true
		gt.minute.entries = append(gt.minute.entries, e)
		gt.minute.sum = addCost(gt.minute.sum, c)
	}
	if day {
		e.inDy = true
		gt.day.entries = append(gt.day.entries, e)
		gt.day.sum = addCost(gt.day.sum, c)
	}
	return e
}

func windowStart(t, period int64) int64 {
	m := t % period
	if m < 0 {
		m += period
	}
	return t - m
}

func sub(a, b governor.Cost) governor.Cost {
	return governor.Cost{Requests: a.Requests - b.Requests, Input: a.Input - b.Input, Output: a.Output - b.Output}
}

func addCost(a, b governor.Cost) governor.Cost {
	return governor.Cost{Requests: a.Requests + b.Requests, Input: a.Input + b.Input, Output: a.Output + b.Output}
}
