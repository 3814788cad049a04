package governor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The indexes that keep the decisions O(log flows) — the promotion heaps,
// the treap of the calls ahead, the flows with credit, the sums of rates
// and of busy shares, the heap of kept places — answer as a plain scan of
// every flow would, through a random run of reservations, admissions,
// cancellations, kept places, settlements and new flows.
func TestIndexesMatchAPlainScan(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			rnd := rand.New(rand.NewPCG(seed, 7))
			now := t0
			g := mustNew(t, Config{
				Limits:       Limits{RPM: 40, TPM: 20000, TPD: 5000000},
				PromoteAfter: 3 * time.Minute,
				Flows: []FlowConfig{
					{Name: "f00", Priority: 1}, {Name: "f01", Priority: 2, Weight: 3}, {Name: "f02", Priority: 1, Weight: 0.5},
					{Name: "f03", Priority: -1}, {Name: "f04", Weight: 4},
				},
				Now:    func() time.Time { return now },
				Logger: quiet,
			})
			var live []*Reservation
			for step := range 4000 {
				now = now.Add(time.Duration(rnd.IntN(4000)) * time.Millisecond)
				name := fmt.Sprintf("f%02d", rnd.IntN(12+step/200)) // new flows keep coming
				switch op := rnd.IntN(10); {
				case op < 4:
					if r, err := g.Reserve(now, name, Cost{Requests: 1, Input: int64(50 + rnd.IntN(3000)), Output: int64(rnd.IntN(1000))}); err == nil {
						live = append(live, r)
					}
				case op < 6 || len(live) == 0:
					g.Advance(now)
				default:
					r := live[rnd.IntN(len(live))]
					switch r.state {
					case waiting:
						if rnd.IntN(2) == 0 {
							r.Cancel(now)
						} else {
							g.Await(doneCtx(), r, time.Duration(rnd.IntN(300))*time.Second)
						}
					case parked:
						if !r.Rejoin(now) {
							r.Cancel(now)
						}
					case admitted:
						r.Settle(now, Cost{Input: r.cost.Input, Output: int64(rnd.IntN(int(r.cost.Output + 1)))})
					}
				}
				if step%7 == 0 {
					checkIndexes(t, g, now.UnixNano())
				}
			}
		})
	}
}

// checkIndexes compares every index of g with a scan at now.
func checkIndexes(t *testing.T, g *Governor, now int64) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(now)
	g.lapse(now)
	if got, want := g.promoted(now), scanPromoted(g, now); got != want {
		t.Fatalf("promoted: %v, a scan finds %v", flowName(got), flowName(want))
	}
	var all []*Reservation
	busy := 0.0
	credited := 0
	for _, f := range g.flows {
		all = append(all, f.queue...)
		all = append(all, f.parked...)
		if len(f.queue) > 0 || len(f.parked) > 0 {
			busy += f.share
		}
		if f.prio != nil && f.prio.urgentAt >= 0 {
			if g.urgent[f.prio.urgentAt] != f {
				t.Fatalf("flow %s is not where it says in the urgent list", f.name)
			}
			want := len(f.queue) > 0 && f.prio.credit >= f.queue[0].size
			if g.credited.has(f.prio.urgentAt) != want {
				t.Fatalf("flow %s: in credited %v, its credit %g covers its first call %v", f.name, !want, f.prio.credit, want)
			}
			if want {
				credited++
			}
		}
	}
	if credited != g.creditedN {
		t.Fatalf("%d flows with credit for their first call, creditedN %d", credited, g.creditedN)
	}
	if math.Abs(busy-g.busyShares) > 1e-9*max(busy, 1) {
		t.Fatalf("busy shares %g, a scan sums %g", g.busyShares, busy)
	}
	var rates float64
	for _, f := range g.flows {
		rates += f.rateNow(now)
	}
	if got := g.ratesNow(now); math.Abs(got-rates) > 1e-9*max(rates, 1e-12) {
		t.Fatalf("sum of rates %g, a scan sums %g", got, rates)
	}
	if got, want := len(g.places.rs), countParked(all); got != want {
		t.Fatalf("%d places in the heap, %d reservations parked", got, want)
	}
	g.aheadStart() // built from the lines at the first check, kept from then on
	slices.SortFunc(all, func(a, b *Reservation) int {
		if aheadLess(a, b) {
			return -1
		}
		return 1
	})
	var sum Cost
	for i, r := range all {
		sum = sum.add(r.cost)
		if i+1 < len(all) && all[i+1].start == r.start {
			continue // the sum up to a tag counts every call at it
		}
		if got := g.aheadUpTo(r.start); got != sum {
			t.Fatalf("sum of the calls up to start %g: %+v, a scan sums %+v", r.start, got, sum)
		}
	}
	if len(all) > 0 {
		last := all[len(all)-1]
		got := aheadFirst(g.ahead, last.start, nil, nil)
		want := make([]Cost, 0, min(len(all), aheadWhole))
		for _, r := range all[:min(len(all), aheadWhole)] {
			want = append(want, r.cost)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("the first calls ahead: %d of them, not those of a scan (%d)", len(got), len(want))
		}
	}
}

// scanPromoted is promoted as a look at every waiting flow: the one whose
// first call has waited longest, if it may be promoted; of flows that have
// waited as long, the first in fair order.
func scanPromoted(g *Governor, now int64) *flow {
	var best *flow
	for _, f := range g.active.flows {
		if !g.mayPromote(now, f) {
			continue
		}
		if best == nil || promoSince(f) < promoSince(best) || promoSince(f) == promoSince(best) && g.active.less(f, best) {
			best = f
		}
	}
	return best
}

func flowName(f *flow) string {
	if f == nil {
		return "none"
	}
	return f.name
}

func countParked(rs []*Reservation) int {
	n := 0
	for _, r := range rs {
		if r.state == parked {
			n++
		}
	}
	return n
}

// bitIndex finds the next member as a scan of a set does.
func TestBitIndexMatchesASet(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	var b bitIndex
	set := map[int]bool{}
	for range 20000 {
		i := rnd.IntN(300000)
		if rnd.IntN(3) == 0 {
			i = rnd.IntN(200)
		}
		in := rnd.IntN(2) == 0
		b.put(i, in)
		if in {
			set[i] = true
		} else {
			delete(set, i)
		}
		from := rnd.IntN(300100)
		want := -1
		for m := range set {
			if m >= from && (want < 0 || m < want) {
				want = m
			}
		}
		if got := b.next(from); got != want {
			t.Fatalf("next(%d) = %d, want %d", from, got, want)
		}
		if b.has(i) != in {
			t.Fatalf("has(%d) = %v after put(%d, %v)", i, !in, i, in)
		}
	}
}
