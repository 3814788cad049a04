package governor

import (
	"math"
	"time"
)

// never is the time returned when something can not happen.
const never = math.MaxInt64

// charge is one admitted call as a window remembers it.
type charge struct {
	at   int64 // unix nanoseconds
	cost Cost
}

// ledger counts the charges of one period (a minute or a day) for every limit
// of that period at once: they all age out together.
//
// A rolling ledger keeps every charge of the last period; a charge ages out
// exactly one period after it was made. A fixed ledger keeps the charges of
// the current window, which starts at a whole multiple of the period.
type ledger struct {
	period int64
	lag    int64 // how much later the provider may count a charge
	fixed  bool
	start  int64 // fixed: start of the current window

	entries []charge
	head    int    // entries[head:] are live
	first   uint64 // sequence number of entries[head]
	sum     Cost
}

func newLedger(period, lag time.Duration, fixed bool) ledger {
	return ledger{period: int64(period), lag: int64(lag), fixed: fixed, start: math.MinInt64}
}

// expire drops what no longer counts at now.
func (lg *ledger) expire(now int64) {
	if lg.fixed {
		ws := now - mod(now, lg.period)
		if ws != lg.start {
			// A call made within lag of the boundary may reach the provider
			// after it: it still counts in the new window.
			for lg.head < len(lg.entries) && lg.entries[lg.head].at < ws-lg.lag {
				lg.sum = lg.sum.sub(lg.entries[lg.head].cost)
				lg.head++
				lg.first++
			}
			lg.start = ws
		}
		if lg.head > 64 && lg.head*2 >= len(lg.entries) {
			n := copy(lg.entries, lg.entries[lg.head:])
			lg.entries = lg.entries[:n]
			lg.head = 0
		}
		return
	}
	cut := now - lg.period - lg.lag
	for lg.head < len(lg.entries) && lg.entries[lg.head].at <= cut {
		lg.sum = lg.sum.sub(lg.entries[lg.head].cost)
		lg.head++
		lg.first++
	}
	if lg.head > 64 && lg.head*2 >= len(lg.entries) {
		n := copy(lg.entries, lg.entries[lg.head:])
		lg.entries = lg.entries[:n]
		lg.head = 0
	}
}

// add records a charge made at now (not before any earlier charge) and returns its sequence number.
func (lg *ledger) add(now int64, c Cost) uint64 {
	seq := lg.first + uint64(len(lg.entries)-lg.head)
	lg.entries = append(lg.entries, charge{at: now, cost: c})
	lg.sum = lg.sum.add(c)
	return seq
}

// amend replaces the cost of charge seq, if it still counts.
func (lg *ledger) amend(seq uint64, c Cost) {
	if seq < lg.first || seq >= lg.first+uint64(len(lg.entries)-lg.head) {
		return
	}
	e := &lg.entries[lg.head+int(seq-lg.first)]
	lg.sum = lg.sum.sub(e.cost).add(c)
	e.cost = c
}

// freeAt returns the earliest time not before now at which used+extra on
// limit l, after need is added, stays within lim. It assumes expire(now) ran.
func (lg *ledger) freeAt(now int64, l Limit, need, lim int64, ph []phantom) int64 {
	used := lg.sum.On(l)
	var phUsed int64
	for _, p := range ph {
		phUsed += p.amount
	}
	if used+phUsed+need <= lim {
		return now
	}
	if lg.fixed {
		// At the boundary the window's own charges are gone, but for those
		// made within lag of it; phantoms may still hold some room until
		// they end.
		t := lg.start + lg.period
		var carried int64
		for i := len(lg.entries) - 1; i >= lg.head && lg.entries[i].at >= t-lg.lag; i-- {
			carried += lg.entries[i].cost.On(l)
		}
		if carried+need > lim {
			t += lg.period
		}
		for _, p := range ph {
			if phUsed+need <= lim {
				break
			}
			t = max(t, p.until)
			phUsed -= p.amount
		}
		return t
	}
	excess := used + phUsed + need - lim
	i, j := lg.head, 0
	for i < len(lg.entries) || j < len(ph) {
		var t, freed int64
		if j >= len(ph) || (i < len(lg.entries) && lg.entries[i].at+lg.period+lg.lag <= ph[j].until) {
			t, freed = lg.entries[i].at+lg.period+lg.lag, lg.entries[i].cost.On(l)
			i++
		} else {
			t, freed = ph[j].until, ph[j].amount
			j++
		}
		excess -= freed
		if excess <= 0 {
			return t
		}
	}
	return never
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// phantom is room on one limit taken by someone the governor does not see
// (another client of the key, or a rejection that drains the limit), until a time.
type phantom struct {
	until  int64
	amount int64
}

// addPhantom inserts p keeping the slice ordered by until.
func addPhantom(ph []phantom, p phantom) []phantom {
	i := len(ph)
	for i > 0 && ph[i-1].until > p.until {
		i--
	}
	ph = append(ph, phantom{})
	copy(ph[i+1:], ph[i:])
	ph[i] = p
	return ph
}

// expirePhantoms drops phantoms that ended by now.
func expirePhantoms(ph []phantom, now int64) []phantom {
	n := 0
	for n < len(ph) && ph[n].until <= now {
		n++
	}
	if n == 0 {
		return ph
	}
	return append(ph[:0], ph[n:]...)
}

func (c Cost) add(d Cost) Cost {
	return Cost{c.Requests + d.Requests, c.Input + d.Input, c.Output + d.Output}
}

func (c Cost) sub(d Cost) Cost {
	return Cost{c.Requests - d.Requests, c.Input - d.Input, c.Output - d.Output}
}
