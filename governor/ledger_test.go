package governor

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A ledger with a grain counts, at any moment, at least what the exact
// ledger counts and at most what the exact ledger counted a grain earlier:
// charges age out at most a grain late, never early, and amending a charge
// held with others changes the sum by exactly the difference.
func TestLedgerGrainAgesOutLateNeverEarly(t *testing.T) {
	t.Parallel()
	const period, lag, grain = int64(time.Hour), int64(time.Second), int64(time.Second)
	type made struct {
		at   int64
		cost Cost
		seq  uint64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lg := newLedger(time.Duration(period), time.Duration(lag), time.Duration(grain), false)
	var all []made
	// counted is what the exact window holds at t of the charges made up to now.
	counted := func(t int64) (c Cost) {
		for _, m := range all {
			if m.at > t-period-lag {
				c = c.add(m.cost)
			}
		}
		return c
	}
	now := int64(0)
	for step := range 20000 {
		now += rng.Int64N(int64(300 * time.Millisecond))
		lg.expire(now)
		if len(all) > 0 && rng.IntN(3) == 0 {
			m := &all[rng.IntN(len(all))]
			c := Cost{Requests: 1, Input: rng.Int64N(100), Output: rng.Int64N(100)}
			if m.at > now-period-lag { // a charge still counted may be amended
				lg.amend(m.seq, m.cost, c)
				m.cost = c
			}
		} else {
			c := Cost{Requests: 1, Input: rng.Int64N(1000), Output: rng.Int64N(1000)}
			all = append(all, made{at: now, cost: c, seq: lg.add(now, c)})
		}
		lo, hi := counted(now), counted(now-grain)
		for _, l := range []Limit{RPM, ITPM, OTPM} {
			if got := lg.sum.On(l); got < lo.On(l) || got > hi.On(l) {
				t.Fatalf("step %d at %s: %s counts %d, want between %d (exact now) and %d (exact a grain before)",
					step, time.Duration(now), l, got, lo.On(l), hi.On(l))
			}
		}
	}
	// Far fewer entries than charges: about one a grain.
	if live := len(lg.entries) - lg.head; live > int(period/grain)+1 {
		t.Errorf("%d entries live for a period of %d grains", live, period/grain)
	}
}

// In a fixed window, charges are not held together across the window's
// start, nor across the moment lag before its end after which a charge is
// carried into the next window.
func TestLedgerGrainKeepsFixedWindowsApart(t *testing.T) {
	t.Parallel()
	min, lag := int64(time.Minute), int64(2*time.Second)
	lg := newLedger(time.Minute, time.Duration(lag), time.Second, true)
	one := Cost{Requests: 1}
	for _, at := range []int64{min - lag - 200e6, min - lag + 200e6, min + 100e6, min + 300e6} {
		lg.expire(at)
		lg.add(at, one)
	}
	if n := len(lg.entries) - lg.head; n != 2 {
		t.Fatalf("%d entries live after the boundary, want 2: the carried one and the new window's", n)
	}
	if got := lg.sum.Requests; got != 3 {
		t.Errorf("new window counts %d requests, want 3: the one carried across the boundary and its own two", got)
	}
}
