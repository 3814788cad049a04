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
	const period, lag, grain = int64(time.Minute), int64(time.Second), int64(time.Second)
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

// A key that makes a thousand calls a second keeps its minute window in
// at most one entry per minuteGrain (100 ms) of the minute, not one per call:
// what the governor holds does not grow with the key's rate. Each call
// settled with its real usage is still counted exactly.
func TestMinuteWindowIsBoundedByItsGrain(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 1_000_000, TPM: 1_000_000_000}})
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var tokens int64
	for i := range 120_000 { // two minutes at 1,000 calls a second
		now := start.Add(time.Duration(i) * time.Millisecond)
		r := mustReserve(t, g, now, "batch", Cost{Requests: 1, Input: 100, Output: 50})
		g.Advance(now)
		if !r.Admitted() {
			t.Fatalf("call %d not admitted at once under limits far above the load", i)
		}
		r.Settle(now, Cost{Requests: 1, Input: 80, Output: 20})
		if i >= 60_000 {
			tokens += 80 + 50 // the provider's input count, and max_tokens: output is not settled by default
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if live, most := len(g.minute.entries)-g.minute.head, int(time.Minute/minuteGrain)+1+int(g.cfg.Lag/minuteGrain)+1; live > most {
		t.Errorf("the minute window holds %d entries after two minutes of 1,000 calls a second, want at most %d", live, most)
	}
	// The last minute's calls, and those of the lag before it, as settled;
	// a grain may hold up to 100 ms more.
	if got := g.minute.sum.On(TPM); got < tokens || got > tokens+130*int64((g.cfg.Lag+minuteGrain)/time.Millisecond) {
		t.Errorf("the minute window counts %d tokens, want the last minute's %d and at most the lag's and a grain's more", got, tokens)
	}
}
