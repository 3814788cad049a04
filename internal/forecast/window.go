package forecast

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// entry is one admitted request as a window remembers it.
type entry struct {
	at      int64 // unix nanoseconds of admission
	cost    governor.Cost
	settled bool
}

// ledger counts the charges of one period (a minute or a day) for every limit
// of that period at once, since they all age out together. Charges sit in a
// deque with a running sum, so admission is O(1) amortised; only computing a
// retry time walks the deque.
type ledger struct {
	period int64
	fixed  bool
	start  int64 // fixed: start of the current window

	q     []entry
	head  int    // q[head:] still count
	first uint64 // sequence number of q[head]
	sum   governor.Cost
}

func newLedger(period time.Duration, fixed bool) ledger {
	return ledger{period: int64(period), fixed: fixed, start: math.MinInt64}
}

// expire drops what no longer counts at now. Rolling: a charge stops counting
// exactly one period after it was made. Fixed: every charge of a window stops
// counting at the window's end, a whole multiple of the period since the epoch.
func (lg *ledger) expire(now int64) {
	if lg.fixed {
		ws := now - floorMod(now, lg.period)
		if ws != lg.start {
			lg.first += uint64(len(lg.q) - lg.head)
			lg.q, lg.head, lg.sum, lg.start = lg.q[:0], 0, governor.Cost{}, ws
		}
		return
	}
	cut := now - lg.period
	for lg.head < len(lg.q) && lg.q[lg.head].at <= cut {
		lg.sum = sub(lg.sum, lg.q[lg.head].cost)
		lg.head++
		lg.first++
	}
	// Reuse the dead front once it is at least half of the slice.
	if lg.head > 32 && lg.head*2 >= len(lg.q) {
		n := copy(lg.q, lg.q[lg.head:])
		lg.q, lg.head = lg.q[:n], 0
	}
}

// add records a charge made at now and returns its sequence number.
func (lg *ledger) add(now int64, c governor.Cost) uint64 {
	seq := lg.first + uint64(len(lg.q)-lg.head)
	lg.q = append(lg.q, entry{at: now, cost: c})
	lg.sum = add(lg.sum, c)
	return seq
}

// settle replaces the cost of charge seq if it still counts. It reports
// whether that charge was already settled, so a second Finish changes nothing.
func (lg *ledger) settle(seq uint64, c governor.Cost) (again bool) {
	if seq < lg.first || seq >= lg.first+uint64(len(lg.q)-lg.head) {
		return false // aged out: nothing counts it any more
	}
	e := &lg.q[lg.head+int(seq-lg.first)]
	if e.settled {
		return true
	}
	lg.sum = add(sub(lg.sum, e.cost), c)
	e.cost, e.settled = c, true
	return false
}

// freeAt returns the earliest time not before now at which need more on
// limit l stays within max. expire(now) must have run.
func (lg *ledger) freeAt(now int64, l governor.Limit, need, max int64) int64 {
	used := lg.sum.On(l)
	if used+need <= max {
		return now
	}
	if lg.fixed {
		return lg.start + lg.period
	}
	excess := used + need - max
	for i := lg.head; i < len(lg.q); i++ {
		excess -= lg.q[i].cost.On(l)
		if excess <= 0 {
			return lg.q[i].at + lg.period
		}
	}
	return math.MaxInt64 // need alone exceeds max: never
}

// resetAt returns when everything that counts now will have stopped counting
// on limit l: the moment the limit is whole again.
func (lg *ledger) resetAt(now int64, l governor.Limit) int64 {
	if lg.sum.On(l) == 0 {
		return now
	}
	if lg.fixed {
		return lg.start + lg.period
	}
	for i := len(lg.q) - 1; i >= lg.head; i-- {
		if lg.q[i].cost.On(l) > 0 {
			return lg.q[i].at + lg.period
		}
	}
	return now
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func add(a, b governor.Cost) governor.Cost {
	return governor.Cost{Requests: a.Requests + b.Requests, Input: a.Input + b.Input, Output: a.Output + b.Output}
}

func sub(a, b governor.Cost) governor.Cost {
	return governor.Cost{Requests: a.Requests - b.Requests, Input: a.Input - b.Input, Output: a.Output - b.Output}
}
