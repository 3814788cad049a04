package governor

import (
	"math"
	"time"
)

// aheadWhole is how many of the calls ahead of a call the estimate lays on
// the minute windows one by one, each whole: the nearest, whose sizes
// decide a short wait. The calls beyond them drain at the limits' rates.
const aheadWhole = 256

// estimate is the time until a call of f costing c with start tag start
// (r itself, when it is reserved) is admitted: every call ahead of it in
// fair order, those parked included, must be admitted first.
//
// On a minute window each call is admitted only when the window has room
// for it whole, as admission does, so the estimate lays the calls ahead on
// the window one by one: room frees when charges age out, in lumps, and a
// call that does not fit the room left waits for the next lump (a 990-token
// call waiting behind another on a TPM of 1,000 waits a whole minute for
// it, not the minute's last hundredth). The first aheadWhole calls ahead
// are laid so; the rest drain at the limit's rate over its period and lag
// (a rolling window's charge counts that long). A day limit admits at
// its allowance per period and no faster than its pacer. It assumes
// expire(now) ran.
func (g *Governor) estimate(n int64, f *flow, r *Reservation, start float64, c Cost) time.Duration {
	g.aheadStart()
	sum := g.aheadUpTo(start)
	if r != nil && (r.state == waiting || r.state == parked) && r.start <= start {
		sum = sum.sub(r.cost)
	}
	first := aheadFirst(g.ahead, start, r, g.scratch.first[:0])
	g.scratch.first = first
	var firstSum Cost
	for _, q := range first {
		firstSum = firstSum.add(q)
	}
	rest := sum.sub(firstSum)
	ahead := sum.add(c)
	at := g.fitAt(n, f, c)
	for l := range NumLimits {
		lim := g.limits[l]
		if lim == 0 {
			continue
		}
		lg := g.ledgerOf(l)
		if l.Period() == time.Minute && !ahead.saturated() {
			at = max(at, g.wholeAt(n, l, first, rest.On(l), c.On(l)))
		} else if need := subSat(addSat(lg.sum.On(l), ahead.On(l)), lim); need > 0 {
			// the backlog drains at the limit's rate
			rate := float64(lim) / float64(l.Period())
			t := addSat(n, nanos(float64(need)/rate))
			if lg.sum.On(l) > lim {
				// A window holding more than its limit (a charge settled
				// far above its admission, or made under a larger
				// allowance) is empty once its charges age out, however
				// large they are; drained at the limit's rate, a charge of
				// 2^40 tokens on a TPD of 10^7 took 300 years.
				t = min(t, addSat(lg.resetAt(n, l), nanos(float64(max(subSat(ahead.On(l), lim), 0))/rate)))
			}
			at = max(at, t)
		}
		if p := &g.pace[l]; p.on {
			// and a day limit's no faster than its pacer: the calls ahead
			// move its tat on, and the call may start once tat is within
			// the burst of now. The burst in hand goes first: counting the
			// calls ahead at the even pace from now made a key with credit
			// tell a call to wait the day's pace (0.43 s a token at TPD
			// 200,000) for calls the burst lets go at once.
			tat := addSat(max(p.tat, n), nanos(float64(subSat(ahead.On(l), c.On(l)))*p.perUnit))
			at = max(at, subSat(tat, p.burst))
		}
	}
	return time.Duration(subSat(at, n))
}

// estimateScratch is the memory estimates reuse: they run under the
// governor's lock, one at a time.
type estimateScratch struct {
	first []Cost
	laid  []laid
}

// laid is a charge of the estimate's: amount on one limit until it ages out.
type laid struct{ until, amount int64 }

// wholeAt is when a call needing need on minute limit l can be admitted
// once the calls first, then rest more of the limit, were: each call of
// first when the window has room for it whole, rest at the limit's rate.
// Its work is O(len(first)) and the window's charges it ages out.
// It assumes expire(now) ran.
func (g *Governor) wholeAt(n int64, l Limit, first []Cost, rest, need int64) int64 {
	lg, lim := &g.minute, g.limits[l]
	used := lg.sum.On(l)
	for _, p := range g.phantom[l] {
		used = addSat(used, p.amount)
	}
	if used == math.MaxInt64 {
		// A saturated sum is no sum to take charges from: the call waits
		// at least until every charge is gone (see freeAt).
		return lg.freeAt(n, l, need, lim, g.phantom[l])
	}
	w := window{g: g, lg: lg, l: l, lim: lim, used: used, t: n, i: lg.head, fixedEnd: addSat(lg.start, lg.period)}
	w.laid = g.scratch.laid[:0]
	defer func() { g.scratch.laid = w.laid }()
	for _, c := range first {
		if !w.lay(c.On(l)) {
			return never
		}
	}
	if rest > 0 {
		w.t = addSat(w.t, nanos(float64(rest)*float64(lg.period+lg.lag)/float64(lim)))
	}
	if !w.lay(need) {
		return never
	}
	return w.t
}

// window is a minute window as the estimate plays it forward.
type window struct {
	g        *Governor
	lg       *ledger
	l        Limit
	lim      int64
	used     int64
	t        int64  // when the last call was laid
	i, j, k  int    // the next of the ledger's entries, the phantoms and laid to age out
	laid     []laid // the calls laid, in order
	fixedEnd int64  // fixed windows: the end of the window of t
}

// lay admits a call of amount at the earliest time not before the last
// one at which the window has room for it whole, and charges it.
func (w *window) lay(amount int64) bool {
	if amount == 0 {
		return true
	}
	if amount > w.lim {
		return false
	}
	if w.lg.fixed {
		w.layFixed(amount)
		return true
	}
	for addSat(w.used, amount) > w.lim {
		until, freed, ok := w.ageOut()
		if !ok {
			return false
		}
		w.t = max(w.t, until)
		w.used = subSat(w.used, freed)
	}
	w.used = addSat(w.used, amount)
	w.laid = append(w.laid, laid{until: addSat(addSat(w.t, w.lg.period), w.lg.lag), amount: amount})
	return true
}

// ageOut takes the next charge to age out of a rolling window: the
// ledger's, the phantoms' and the laid calls', whichever ends first.
func (w *window) ageOut() (until, freed int64, ok bool) {
	lg, ph := w.lg, w.g.phantom[w.l]
	best := int64(never)
	which := -1
	if w.i < len(lg.entries) {
		best, which = addSat(addSat(lg.entries[w.i].at, lg.period), lg.lag), 0
	}
	if w.j < len(ph) && ph[w.j].until < best {
		best, which = ph[w.j].until, 1
	}
	if w.k < len(w.laid) && w.laid[w.k].until < best {
		best, which = w.laid[w.k].until, 2
	}
	switch which {
	case 0:
		w.i++
		return best, lg.entries[w.i-1].cost.On(w.l), true
	case 1:
		w.j++
		return best, ph[w.j-1].amount, true
	case 2:
		w.k++
		return best, w.laid[w.k-1].amount, true
	}
	return 0, 0, false
}

// layFixed lays a call on fixed windows: in the window of t if it has room,
// else at the start of the next that has, where only the charges made
// within lag of its start, and the phantoms that outlast it, still count.
func (w *window) layFixed(amount int64) {
	lg := w.lg
	for addSat(w.used, amount) > w.lim {
		start := w.fixedEnd
		w.t = max(w.t, start)
		w.fixedEnd = addSat(start, lg.period)
		// Charges are in time order: those within lag of the start are last.
		var used int64
		for i := len(lg.entries) - 1; i >= lg.head && lg.entries[i].at >= start-lg.lag; i-- {
			used = addSat(used, lg.entries[i].cost.On(w.l))
		}
		for i := len(w.laid) - 1; i >= 0 && w.laid[i].until >= start-lg.lag; i-- {
			used = addSat(used, w.laid[i].amount) // until holds when the call was laid
		}
		for _, p := range w.g.phantom[w.l] {
			if p.until > start {
				used = addSat(used, p.amount)
			}
		}
		w.used = used
	}
	w.used = addSat(w.used, amount)
	w.laid = append(w.laid, laid{until: w.t, amount: amount})
}
