package governor

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// The grains of the key's windows (see ledger): a minute's charges made
// within 100 ms of each other are kept as one, a day's within a second. A
// charge ages out at most a grain late (less than the Lag sluice's engine
// and gateway already keep it), and a window holds at most one entry per
// grain of its period, however many calls a second the key makes.
const (
	minuteGrain = 100 * time.Millisecond
	dayGrain    = time.Second
)

// never is the time returned when something can not happen.
const never = math.MaxInt64

// charge is one admitted call as a window remembers it, or several made
// within a ledger's grain of the first of them: first and last are the
// sequence numbers of the calls it holds, since when the first was made
// and at when the last was.
type charge struct {
	at          int64 // unix nanoseconds
	since       int64
	cost        Cost
	first, last uint64
}

// ledger counts the charges of one period (a minute or a day) for every limit
// of that period at once: they all age out together.
//
// A rolling ledger keeps every charge of the last period; a charge ages out
// exactly one period after it was made. A fixed ledger keeps the charges of
// the current window, which starts at a whole multiple of the period.
//
// With a grain, charges made less than a grain after the first charge the
// newest entry holds are added to it and age out with the last of them: at
// most a grain late, never early. (Measured from the entry's last charge
// instead, a stream of calls less than a grain apart would make one entry
// that ages out only a period after the stream ends.) The day's ledger has a grain of a second, so what it keeps
// is bounded by the seconds of a day, however many calls a key makes.
type ledger struct {
	period int64
	lag    int64 // how much later the provider may count a charge
	grain  int64
	fixed  bool
	start  int64 // fixed: start of the current window

	entries []charge
	head    int    // entries[head:] are live
	next    uint64 // sequence number of the next charge
	sum     Cost
}

func newLedger(period, lag, grain time.Duration, fixed bool) ledger {
	return ledger{period: int64(period), lag: int64(lag), grain: int64(grain), fixed: fixed, start: math.MinInt64}
}

// expire drops what no longer counts at now.
func (lg *ledger) expire(now int64) {
	if lg.sum.saturated() {
		// A saturated sum minus what ages out is no longer the sum of what is left.
		defer lg.recount()
	}
	if lg.fixed {
		ws := now - mod(now, lg.period)
		if ws != lg.start {
			// A call made within lag of the boundary may reach the provider
			// after it: it still counts in the new window.
			for lg.head < len(lg.entries) && lg.entries[lg.head].at < ws-lg.lag {
				lg.sum = lg.sum.sub(lg.entries[lg.head].cost)
				lg.head++
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
	}
	if lg.head > 64 && lg.head*2 >= len(lg.entries) {
		n := copy(lg.entries, lg.entries[lg.head:])
		lg.entries = lg.entries[:n]
		lg.head = 0
	}
}

// resetAt returns when everything l counts now will have aged out of the
// window, now when it counts nothing. It assumes expire(now) ran.
func (lg *ledger) resetAt(now int64, l Limit) int64 {
	if lg.sum.On(l) <= 0 {
		return now
	}
	if lg.fixed {
		return max(addSat(lg.start, lg.period), now)
	}
	for i := len(lg.entries) - 1; i >= lg.head; i-- {
		if lg.entries[i].cost.On(l) > 0 {
			return max(addSat(addSat(lg.entries[i].at, lg.period), lg.lag), now)
		}
	}
	return now
}

// agesOut is when charge e stops counting: a period (and lag) after it was
// made under a rolling window, at the current window's end (one more for a
// charge made within lag of it) under a fixed one.
func (lg *ledger) agesOut(e charge) int64 {
	if lg.fixed {
		end := addSat(lg.start, lg.period)
		if e.at >= end-lg.lag {
			end = addSat(end, lg.period)
		}
		return end
	}
	return addSat(addSat(e.at, lg.period), lg.lag)
}

// add records a charge made at now (not before any earlier charge) and returns its sequence number.
func (lg *ledger) add(now int64, c Cost) uint64 {
	seq := lg.next
	lg.next++
	lg.sum = lg.sum.add(c)
	if n := len(lg.entries); n > lg.head && lg.joins(&lg.entries[n-1], now) {
		e := &lg.entries[n-1]
		e.at, e.cost, e.last = now, e.cost.add(c), seq
		return seq
	}
	lg.entries = append(lg.entries, charge{at: now, since: now, cost: c, first: seq, last: seq})
	return seq
}

// joins reports whether a charge made at now may be added to e, the newest:
// within the grain of e's first charge, and on the same side of every
// moment a fixed window tells its charges apart at (its start, and lag
// before its end).
func (lg *ledger) joins(e *charge, now int64) bool {
	if lg.grain <= 0 || now-e.since >= lg.grain {
		return false
	}
	if !lg.fixed {
		return true
	}
	ws := now - mod(now, lg.period)
	carry := ws + lg.period - lg.lag
	return e.at >= ws && (e.at >= carry) == (now >= carry)
}

// amend replaces the cost of charge seq, which was was, if it still counts.
// A charge that holds several calls can not saturate: each call's cost is at
// most MaxCost, and a grain holds far fewer than 2^23 calls.
func (lg *ledger) amend(seq uint64, was, c Cost) {
	live := lg.entries[lg.head:]
	i, found := slices.BinarySearchFunc(live, seq, func(e charge, seq uint64) int { return cmp.Compare(e.last, seq) })
	if i == len(live) || (!found && live[i].first > seq) {
		return
	}
	e := &live[i]
	if e.first == e.last {
		was = e.cost
	}
	sat := lg.sum.saturated()
	lg.sum = lg.sum.sub(was).add(c)
	e.cost = e.cost.sub(was).add(c)
	if sat {
		lg.recount()
	}
}

// recount sums the live charges again. It is needed only after a saturated
// sum lost a charge, which takes millions of calls of MaxCost in one window.
func (lg *ledger) recount() {
	lg.sum = Cost{}
	for _, e := range lg.entries[lg.head:] {
		lg.sum = lg.sum.add(e.cost)
	}
}

// freeAt returns the earliest time not before now at which used+extra on
// limit l, after need is added, stays within lim. It assumes expire(now) ran.
// Sums saturate and only ever grow; a saturated total is more than any
// limit, so a sum too large for an int64 holds the call back instead of
// letting it through.
func (lg *ledger) freeAt(now int64, l Limit, need, lim int64, ph []phantom) int64 {
	used := lg.sum.On(l)
	var phUsed int64
	for _, p := range ph {
		phUsed = addSat(phUsed, p.amount)
	}
	total := addSat(addSat(used, phUsed), need)
	exact := total < math.MaxInt64
	if exact && total <= lim {
		return now
	}
	if lg.fixed {
		// At the boundary the window's own charges are gone, but for those
		// made within lag of it; phantoms may still hold some room until
		// they end.
		t := lg.start + lg.period
		var carried int64
		for i := len(lg.entries) - 1; i >= lg.head && lg.entries[i].at >= t-lg.lag; i-- {
			carried = addSat(carried, lg.entries[i].cost.On(l))
		}
		if addSat(carried, need) > lim {
			t += lg.period
		}
		// Phantoms end in order: wait for every one up to the last whose
		// end leaves too little room.
		var left int64
		for j := len(ph) - 1; j >= 0; j-- {
			left = addSat(left, ph[j].amount)
			if addSat(left, need) > lim {
				t = max(t, ph[j].until)
				break
			}
		}
		return t
	}
	var freed int64
	t := now
	i, j := lg.head, 0
	for i < len(lg.entries) || j < len(ph) {
		var f int64
		if j >= len(ph) || (i < len(lg.entries) && lg.entries[i].at+lg.period+lg.lag <= ph[j].until) {
			t, f = lg.entries[i].at+lg.period+lg.lag, lg.entries[i].cost.On(l)
			i++
		} else {
			t, f = ph[j].until, ph[j].amount
			j++
		}
		freed = addSat(freed, f)
		if exact && total <= addSat(lim, freed) {
			return t
		}
	}
	if !exact && need <= lim {
		return t // everything charged is gone by then
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

// add returns c + d, part by part, saturating instead of wrapping.
func (c Cost) add(d Cost) Cost {
	return Cost{addSat(c.Requests, d.Requests), addSat(c.Input, d.Input), addSat(c.Output, d.Output), addSat(c.Cached, d.Cached), addSat(c.Money, d.Money)}
}

// sub returns c − d, part by part, saturating instead of wrapping.
func (c Cost) sub(d Cost) Cost {
	return Cost{subSat(c.Requests, d.Requests), subSat(c.Input, d.Input), subSat(c.Output, d.Output), subSat(c.Cached, d.Cached), subSat(c.Money, d.Money)}
}

// times returns c × n, part by part, saturating instead of wrapping.
func (c Cost) times(n int64) Cost {
	return Cost{mulSat(c.Requests, n), mulSat(c.Input, n), mulSat(c.Output, n), mulSat(c.Cached, n), mulSat(c.Money, n)}
}

// saturated reports whether a part of c is held at an int64 bound, so that
// subtracting from it would no longer give the true difference.
func (c Cost) saturated() bool {
	for _, v := range [...]int64{c.Requests, c.Input, c.Output, c.Cached, c.Money} {
		if v == math.MaxInt64 || v == math.MinInt64 {
			return true
		}
	}
	return false
}

// addSat returns a + b, held at the int64 bounds instead of wrapping: the
// governor's sums include numbers that came from outside (costs, usage,
// provider headers), and a wrapped sum would turn a full limit into an empty one.
func addSat(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// subSat returns a − b, held at the int64 bounds instead of wrapping.
func subSat(a, b int64) int64 {
	s := a - b
	if (s < a) != (b > 0) {
		if b > 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return s
}

// mulSat returns a × b, held at the int64 bounds instead of wrapping.
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		if (a > 0) == (b > 0) {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return p
}

// nanos converts a float64 count of nanoseconds to int64, held at the int64
// bounds (a conversion out of range is undefined in Go); NaN is 0.
func nanos(f float64) int64 {
	switch {
	case f != f:
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}
