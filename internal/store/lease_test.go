package store_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/store"
)

func cost(requests, input, output int64) governor.Cost {
	return governor.Cost{Requests: requests, Input: input, Output: output}
}

func add(a, b governor.Cost) governor.Cost {
	return cost(a.Requests+b.Requests, a.Input+b.Input, a.Output+b.Output)
}

func limitsOf(t *testing.T, s string) [governor.NumLimits]int64 {
	t.Helper()
	ls, err := govtext.Limits(s)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// busy is what other nodes of weight w claim when they ask for at least
// their share of every limit: Grant then shares by weight alone.
func busy(w float64) []store.Claim {
	all := cost(governor.MaxCost, governor.MaxCost, governor.MaxCost)
	return []store.Claim{{Weight: w, Want: all}}
}

func TestGrant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		want, min         governor.Cost
		weight            float64
		limits            string
		minute, day       governor.Cost
		ownMinute, ownDay governor.Cost
		others            float64
		grant             governor.Cost
	}{
		{name: "fits", want: cost(2, 300, 200), weight: 1, limits: "rpm=10,tpm=1000", grant: cost(2, 300, 200)},
		{name: "no limits", want: cost(9, 1e6, 1e6), weight: 1, others: 5, grant: cost(9, 1e6, 1e6)},
		{name: "zero want", min: cost(0, 0, 0), weight: 1, limits: "rpm=10", grant: cost(0, 0, 0)},
		{name: "rpm room", want: cost(5, 10, 10), weight: 1, limits: "rpm=10", minute: cost(8, 0, 0), grant: cost(2, 10, 10)},
		// A daily limit counts the day's sums, a limit per minute the minute's.
		{name: "rpd counts the day", want: cost(5, 10, 10), weight: 1, limits: "rpd=100", minute: cost(0, 0, 0), day: cost(99, 0, 0), grant: cost(1, 10, 10)},
		{name: "rpm counts the minute", want: cost(5, 10, 10), weight: 1, limits: "rpm=10", minute: cost(1, 0, 0), day: cost(500, 0, 0), grant: cost(5, 10, 10)},
		{name: "tpd counts the day", want: cost(1, 800, 800), weight: 1, limits: "tpd=10000", day: cost(0, 6000, 3000), grant: cost(1, 500, 500)},
		{name: "over the limit leaves no room", want: cost(2, 5, 5), weight: 1, limits: "rpm=10", minute: cost(12, 0, 0), grant: cost(0, 5, 5)},
		// Min all or nothing.
		{name: "min requests do not fit", want: cost(3, 0, 0), min: cost(2, 0, 0), weight: 1, limits: "rpm=10", minute: cost(9, 0, 0), grant: cost(0, 0, 0)},
		{name: "min tokens do not fit", want: cost(1, 800, 300), min: cost(1, 80, 30), weight: 1, limits: "tpm=1000", minute: cost(0, 600, 300), grant: cost(0, 0, 0)},
		{name: "min output does not fit", want: cost(1, 80, 300), min: cost(1, 0, 30), weight: 1, limits: "otpm=100", minute: cost(0, 0, 71), grant: cost(0, 0, 0)},
		{name: "min fits exactly", want: cost(3, 200, 100), min: cost(1, 60, 40), weight: 1, limits: "rpm=10,tpm=1000", minute: cost(9, 600, 300), grant: cost(1, 60, 40)},
		// Fair shares: of the window, s × the limit, less what the node's
		// own leases take of it; never more than the room.
		{name: "share of 1 in 4", want: cost(100, 0, 0), weight: 1, limits: "rpm=100", others: 3, grant: cost(25, 0, 0)},
		{name: "share of 3 in 4", want: cost(100, 1e6, 1e6), weight: 3, limits: "rpm=100,tpm=100000", others: 1, grant: cost(75, 37500, 37500)},
		{name: "share of the window, not of the room", want: cost(100, 0, 0), weight: 1, limits: "rpm=100", minute: cost(60, 0, 0), others: 1, grant: cost(40, 0, 0)},
		{name: "share of the window within the room", want: cost(100, 0, 0), weight: 1, limits: "rpm=100", minute: cost(80, 0, 0), others: 1, grant: cost(20, 0, 0)},
		{name: "share less its own", want: cost(100, 0, 0), weight: 1, limits: "rpm=100", minute: cost(60, 0, 0), ownMinute: cost(30, 0, 0), others: 1, grant: cost(20, 0, 0)},
		{name: "at its share, nothing though room is left", want: cost(10, 0, 0), min: cost(1, 0, 0), weight: 1, limits: "rpm=100",
			minute: cost(60, 0, 0), ownMinute: cost(50, 0, 0), others: 1, grant: cost(0, 0, 0)},
		{name: "over its share, nothing though room is left", want: cost(10, 0, 0), min: cost(1, 0, 0), weight: 1, limits: "rpm=100",
			minute: cost(70, 0, 0), ownMinute: cost(70, 0, 0), others: 1, grant: cost(0, 0, 0)},
		{name: "at its share without a Min, none of that limit", want: cost(10, 7, 7), weight: 1, limits: "rpm=100",
			minute: cost(60, 0, 0), ownMinute: cost(50, 0, 0), others: 1, grant: cost(0, 7, 7)},
		{name: "share of the tokens less its own", want: cost(1, 400, 400), weight: 1, limits: "tpm=1000",
			minute: cost(1, 200, 100), ownMinute: cost(1, 200, 100), others: 1, grant: cost(1, 100, 100)},
		{name: "each period less its own", want: cost(100, 0, 0), weight: 1, limits: "rpm=100,rpd=1000",
			minute: cost(10, 0, 0), day: cost(400, 0, 0), ownMinute: cost(10, 0, 0), ownDay: cost(400, 0, 0), others: 1, grant: cost(40, 0, 0)},
		{name: "the day's share less its own", want: cost(100, 0, 0), min: cost(1, 0, 0), weight: 1, limits: "rpm=100,rpd=1000",
			day: cost(700, 0, 0), ownDay: cost(500, 0, 0), others: 1, grant: cost(0, 0, 0)},
		{name: "share cut to a whole number", want: cost(100, 0, 0), weight: 1, limits: "rpm=10", others: 2, grant: cost(3, 0, 0)},
		// A node with nothing of its own on a limit may take Min there,
		// over its share, when Min fits the room.
		{name: "no weight gets min", want: cost(10, 100, 100), min: cost(1, 10, 10), weight: 0, limits: "rpm=100,tpm=10000", others: 2, grant: cost(1, 10, 10)},
		{name: "no weight and no others", want: cost(10, 100, 100), weight: 0, limits: "rpm=100,tpm=10000", grant: cost(10, 100, 100)},
		{name: "min over the share", want: cost(5, 2000, 1000), min: cost(1, 500, 100), weight: 1, limits: "rpm=100,tpm=1000", others: 99, grant: cost(1, 500, 100)},
		{name: "own 0 takes min beyond its share", want: cost(10, 0, 0), min: cost(5, 0, 0), weight: 1, limits: "rpm=100",
			minute: cost(50, 0, 0), others: 99, grant: cost(5, 0, 0)},
		{name: "own 0 takes min, not beyond the room", want: cost(10, 0, 0), min: cost(5, 0, 0), weight: 1, limits: "rpm=100",
			minute: cost(96, 0, 0), others: 99, grant: cost(0, 0, 0)},
		{name: "own takes away the min over the share", want: cost(10, 0, 0), min: cost(5, 0, 0), weight: 1, limits: "rpm=100",
			minute: cost(50, 0, 0), ownMinute: cost(1, 0, 0), others: 99, grant: cost(0, 0, 0)},
		{name: "own on one limit keeps min on another", want: cost(1, 200, 200), min: cost(1, 50, 50), weight: 1, limits: "tpm=1000",
			minute: cost(3, 0, 0), ownMinute: cost(3, 0, 0), others: 99, grant: cost(1, 50, 50)},
		{name: "negative own counts as none", want: cost(10, 0, 0), min: cost(5, 0, 0), weight: 1, limits: "rpm=100",
			minute: cost(50, 0, 0), ownMinute: cost(-3, 0, 0), others: 99, grant: cost(5, 0, 0)},
		// Alone, the node's share is the whole limit: all the room,
		// whatever its own leases take.
		{name: "alone takes all the room whatever its own", want: cost(20, 0, 0), min: cost(1, 0, 0), weight: 1, limits: "rpm=100",
			minute: cost(90, 0, 0), ownMinute: cost(90, 0, 0), grant: cost(10, 0, 0)},
		{name: "alone with own over any share", want: cost(1, 900, 900), weight: 1, limits: "rpd=100,tpd=10000",
			day: cost(99, 8000, 0), ownDay: cost(99, 8000, 0), grant: cost(1, 900, 900)},
		{name: "no share on a limit that does not apply", want: cost(100, 1e6, 0), weight: 1, limits: "rpm=100", others: 1, grant: cost(50, 1e6, 0)},
		{name: "others NaN count as none", want: cost(100, 0, 0), weight: 1, limits: "rpm=100", minute: cost(50, 0, 0), ownMinute: cost(50, 0, 0),
			others: math.NaN(), grant: cost(50, 0, 0)},
		{name: "others negative count as none", want: cost(100, 0, 0), weight: 1, limits: "rpm=100", minute: cost(50, 0, 0), ownMinute: cost(50, 0, 0),
			others: -4, grant: cost(50, 0, 0)},
		{name: "huge weights", want: cost(100, 0, 0), weight: math.MaxFloat64, limits: "rpm=100", others: math.MaxFloat64, grant: cost(50, 0, 0)},
		// Input and output under TPM and TPD.
		{name: "tokens in proportion", want: cost(1, 4000, 2000), weight: 1, limits: "tpm=3000", grant: cost(1, 2000, 1000)},
		{name: "itpm and tpm", want: cost(1, 3000, 3000), weight: 1, limits: "itpm=1000,tpm=2500", grant: cost(1, 1000, 1500)},
		{name: "otpm", want: cost(1, 50, 500), weight: 1, limits: "otpm=100", grant: cost(1, 50, 100)},
		{name: "otpm and tpm", want: cost(1, 3000, 3000), weight: 1, limits: "otpm=500,tpm=2000", grant: cost(1, 1500, 500)},
		{name: "tokens never below min", want: cost(1, 1000, 10), min: cost(1, 0, 10), weight: 1, limits: "tpm=100", grant: cost(1, 90, 10)},
		{name: "tokens never below min input", want: cost(1, 10, 1000), min: cost(1, 10, 0), weight: 1, limits: "tpm=100", grant: cost(1, 10, 90)},
		{name: "tpd binds below tpm", want: cost(1, 1000, 1000), weight: 1, limits: "tpm=1500,tpd=1000", grant: cost(1, 500, 500)},
		{name: "output only", want: cost(1, 0, 1000), weight: 1, limits: "tpm=100", grant: cost(1, 0, 100)},
		// Out-of-range parts are read as the nearest in range.
		{name: "negative want", want: cost(-1, 5, 5), weight: 1, limits: "rpm=10", grant: cost(0, 5, 5)},
		{name: "min above want", want: cost(1, 5, 5), min: cost(3, 9, 9), weight: 1, limits: "rpm=10", grant: cost(1, 5, 5)},
		{name: "saturated sums", want: cost(1, 5, 5), weight: 1, limits: "tpm=100", minute: cost(0, math.MaxInt64, math.MaxInt64), grant: cost(1, 0, 0)},
		{name: "saturated own", want: cost(1, 5, 5), min: cost(1, 0, 0), weight: 1, limits: "rpm=10,tpm=100",
			ownMinute: cost(0, math.MaxInt64, math.MaxInt64), others: 1, grant: cost(1, 0, 0)},
	} {
		req := store.LeaseRequest{Want: tc.want, Min: tc.min, Weight: tc.weight, Limits: limitsOf(t, tc.limits)}
		if got := store.Grant(req, tc.minute, tc.day, tc.ownMinute, tc.ownDay, busy(tc.others)); got != tc.grant {
			t.Errorf("%s: Grant(want %+v, min %+v, weight %v, %s, minute %+v, day %+v, own %+v, %+v, others %v) = %+v, want %+v",
				tc.name, tc.want, tc.min, tc.weight, tc.limits, tc.minute, tc.day, tc.ownMinute, tc.ownDay, tc.others, got, tc.grant)
		}
	}
}

// TestGrantAtMaxCost grants parts of 2^40 against limits of 2^40: the
// products of the share of tokens are near 2^80, and must not wrap.
func TestGrantAtMaxCost(t *testing.T) {
	t.Parallel()
	const m = governor.MaxCost
	var all [governor.NumLimits]int64
	for l := range governor.NumLimits {
		all[l] = m
	}
	var none governor.Cost
	req := store.LeaseRequest{Want: cost(m, m, m), Min: cost(1, 1, 1), Weight: 1, Limits: all}
	if got, want := store.Grant(req, none, none, none, none, busy(0)), cost(m, m/2, m/2); got != want {
		t.Fatalf("Grant of MaxCost against limits of MaxCost = %+v, want %+v", got, want)
	}
	// Uneven: the input's share is ⌊2^40 × 2^40 / (2^41 − 1)⌋.
	req.Want = cost(m, m, m-1)
	share := new(big.Int).Mul(big.NewInt(m), big.NewInt(m))
	share.Quo(share, big.NewInt(2*m-1))
	if got, want := store.Grant(req, none, none, none, none, busy(0)), cost(m, share.Int64(), m-share.Int64()); got != want {
		t.Fatalf("Grant of an uneven MaxCost = %+v, want %+v", got, want)
	}
	// Used up to the bound: nothing left, not a wrapped room; alone or
	// not, by the node itself or not.
	full := cost(m, m, m)
	for _, own := range []governor.Cost{none, full} {
		for _, others := range []float64{0, 1} {
			if got := store.Grant(req, full, full, own, own, busy(others)); got != none {
				t.Fatalf("Grant with every limit used (own %+v, others %v) = %+v, want zero", own, others, got)
			}
		}
	}
	// A third of every limit.
	req.Min = none
	if got := store.Grant(req, none, none, none, none, busy(2)); got.Requests != m/3 || got.Input+got.Output != m/3 {
		t.Fatalf("Grant of a third of MaxCost = %+v, want %d requests and %d tokens", got, int64(m/3), int64(m/3))
	}
	// Half of every limit, less what the node's own leases take of it:
	// 2^39 − 2^38 requests and tokens, these shared as wanted, input
	// ⌊2^38 × 2^40 / (2^41 − 1)⌋.
	own := cost(m/4, m/8, m/8)
	share.Mul(big.NewInt(m/4), big.NewInt(m))
	share.Quo(share, big.NewInt(2*m-1))
	if got, want := store.Grant(req, own, own, own, own, busy(1)), cost(m/4, share.Int64(), m/4-share.Int64()); got != want {
		t.Fatalf("Grant of half of MaxCost less its own %+v = %+v, want %+v", own, got, want)
	}
	// Its share used up by its own leases: nothing, though most of every
	// limit is left; alone, all of that.
	own = cost(m/2, m/4, m/4)
	if got := store.Grant(req, own, own, own, own, busy(1)); got != none {
		t.Fatalf("Grant with half of MaxCost its own = %+v, want zero", got)
	}
	share.Mul(big.NewInt(m/2), big.NewInt(m))
	share.Quo(share, big.NewInt(2*m-1))
	if got, want := store.Grant(req, own, own, own, own, busy(0)), cost(m/2, share.Int64(), m/2-share.Int64()); got != want {
		t.Fatalf("Grant alone with half of MaxCost its own = %+v, want %+v", got, want)
	}
}

// randomPart returns a cost part or limit as a test would pick one: often
// 0, small or near the bound.
func randomPart(r *rand.Rand) int64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return governor.MaxCost - r.Int64N(3)
	case 2:
		return r.Int64N(governor.MaxCost + 1)
	default:
		return r.Int64N(2000)
	}
}

func randomCost(r *rand.Rand) governor.Cost {
	return cost(randomPart(r), randomPart(r), randomPart(r))
}

// randomRequest returns a request TakeLease would accept.
func randomRequest(r *rand.Rand) store.LeaseRequest {
	want := randomCost(r)
	least := governor.Cost{}
	if r.IntN(3) > 0 {
		least = cost(r.Int64N(want.Requests+1), r.Int64N(want.Input+1), r.Int64N(want.Output+1))
	}
	var limits [governor.NumLimits]int64
	for l := range governor.NumLimits {
		if r.IntN(2) == 0 {
			limits[l] = randomPart(r)
		}
	}
	weights := []float64{0, 1, 3, 0.25, r.Float64() * 100}
	return store.LeaseRequest{Want: want, Min: least, Weight: weights[r.IntN(len(weights))], Limits: limits}
}

// randomOwn returns the node's own part of used, of which extra (of the
// day) is not in the minute's: none, all, or a random part of each.
func randomOwn(r *rand.Rand, used governor.Cost) governor.Cost {
	switch r.IntN(4) {
	case 0:
		return governor.Cost{}
	case 1:
		return used
	default:
		return cost(r.Int64N(used.Requests+1), r.Int64N(used.Input+1), r.Int64N(used.Output+1))
	}
}

func TestGrantProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	const cases = 200_000
	granted := 0    // cases whose Min fits: the others grant zero
	minOver := 0    // cases granted Min over the share, having nothing of their own there
	shareTaken := 0 // cases refused on a share their own leases take, though Min fits the room
	for i := range cases {
		req := randomRequest(r)
		minute := randomCost(r)
		extra := randomCost(r)
		day := add(minute, extra)
		ownMinute := randomOwn(r, minute)
		ownDay := add(ownMinute, randomOwn(r, extra))
		if r.IntN(4) == 0 {
			minute, day, ownMinute, ownDay = governor.Cost{}, governor.Cost{}, governor.Cost{}, governor.Cost{}
		}
		others := []float64{0, 1, 3, r.Float64() * 1000}[r.IntN(4)]
		g := store.Grant(req, minute, day, ownMinute, ownDay, busy(others))
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: Grant(%+v, minute %+v, day %+v, own %+v, %+v, others %v) = %+v: "+format,
				append([]any{i, req, minute, day, ownMinute, ownDay, others, g}, args...)...)
		}
		if g.Requests < 0 || g.Input < 0 || g.Output < 0 {
			fail("a part is negative")
		}
		if g.Requests > req.Want.Requests || g.Input > req.Want.Input || g.Output > req.Want.Output {
			fail("more than Want")
		}
		// The node's share s, and on each limit the room, what is left of
		// its share of the window (s × the limit less its own), and the
		// bound on the grant: the room and what is left of the share, or
		// Min where it has nothing of its own.
		alone := !(others > 0)
		s := 1.0
		if !alone {
			s = req.Weight / (req.Weight + others)
			alone = s >= 1
		}
		minFits, refusedOnShare := true, false
		var room, left, bound [governor.NumLimits]int64
		for l := range governor.NumLimits {
			if req.Limits[l] == 0 {
				room[l], left[l], bound[l] = math.MaxInt64, math.MaxInt64, math.MaxInt64
				continue
			}
			used, own := minute.On(l), ownMinute.On(l)
			if l.Period() > time.Minute {
				used, own = day.On(l), ownDay.On(l)
			}
			need := req.Min.On(l)
			room[l] = max(req.Limits[l]-used, 0)
			left[l], bound[l] = math.MaxInt64, room[l]
			if !alone {
				left[l] = max(int64(s*float64(req.Limits[l]))-own, 0)
				bound[l] = min(room[l], left[l])
				if own == 0 && need <= room[l] {
					bound[l] = max(bound[l], need)
				}
			}
			if need > room[l] {
				minFits = false
			} else if need > bound[l] {
				minFits, refusedOnShare = false, true
			}
			if g.On(l) > room[l] {
				fail("%s uses %d, over its room of %d", l, g.On(l), room[l])
			}
		}
		if !minFits || req.Want == (governor.Cost{}) {
			if g != (governor.Cost{}) {
				fail("Min does not fit (or no Want), yet something is granted")
			}
			if refusedOnShare && req.Want != (governor.Cost{}) {
				shareTaken++
			}
			continue
		}
		granted++
		if g.Requests < req.Min.Requests || g.Input < req.Min.Input || g.Output < req.Min.Output {
			fail("less than Min %+v, which fits", req.Min)
		}
		over := false
		for l := range governor.NumLimits {
			if g.On(l) > bound[l] {
				fail("%s uses %d, over its bound of %d", l, g.On(l), bound[l])
			}
			// Within the node's share of the window, but for a grant of
			// exactly Min where it had nothing of its own.
			if g.On(l) > left[l] {
				own := ownMinute.On(l)
				if l.Period() > time.Minute {
					own = ownDay.On(l)
				}
				if own != 0 || g.On(l) != req.Min.On(l) {
					fail("%s uses %d, over what is left of its share of the window, %d, and not Min's %d with nothing of its own",
						l, g.On(l), left[l], req.Min.On(l))
				}
				over = true
			}
		}
		if over {
			minOver++
		}
		// As much as fits: no part can grow by one and stay within every
		// bound.
		for _, more := range []governor.Cost{add(g, cost(1, 0, 0)), add(g, cost(0, 1, 0)), add(g, cost(0, 0, 1))} {
			if more.Requests > req.Want.Requests || more.Input > req.Want.Input || more.Output > req.Want.Output {
				continue
			}
			within := true
			for l := range governor.NumLimits {
				within = within && more.On(l) <= bound[l]
			}
			if within {
				fail("%+v fits too", more)
			}
		}
	}
	if granted < cases/10 || minOver < cases/1000 || shareTaken < cases/1000 {
		t.Fatalf("of %d cases, %d had a Min that fits, %d were granted Min over their share, %d were refused on their share: the cases test too little",
			cases, granted, minOver, shareTaken)
	}
	t.Logf("of %d cases, %d had a Min that fits, %d were granted Min over their share, %d were refused on their share", cases, granted, minOver, shareTaken)
}

// TestGrantSumsStayWithinLimits grants leases one after another, each
// against the sums of those before, the asking node's own among them, as
// TakeLease does: the sums never go over a limit, and a node's own never
// over the larger of its share of the window and the largest Min it was
// granted.
func TestGrantSumsStayWithinLimits(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 2000 {
		var limits [governor.NumLimits]int64
		for l := range governor.NumLimits {
			if r.IntN(2) == 0 {
				limits[l] = 1 + r.Int64N(5000)
			}
		}
		nodes := 1 + r.IntN(5)
		weights := make([]float64, nodes)
		var total float64
		for n := range weights {
			weights[n] = float64(r.IntN(4))
			total += weights[n]
		}
		var sum governor.Cost
		own := make([]governor.Cost, nodes)
		mins := make([]governor.Cost, nodes) // the largest Min of each part granted
		for range 50 {
			n := r.IntN(nodes)
			want := cost(r.Int64N(10), r.Int64N(3000), r.Int64N(3000))
			least := cost(min(want.Requests, 1), want.Input/4, want.Output/4)
			req := store.LeaseRequest{Want: want, Min: least, Weight: weights[n], Limits: limits}
			others := total - weights[n]
			g := store.Grant(req, sum, sum, own[n], own[n], busy(others))
			sum, own[n] = add(sum, g), add(own[n], g)
			if g != (governor.Cost{}) {
				mins[n] = cost(max(mins[n].Requests, least.Requests), max(mins[n].Input, least.Input), max(mins[n].Output, least.Output))
			}
			s := 1.0
			if others > 0 {
				s = weights[n] / total
			}
			for l := range governor.NumLimits {
				if limits[l] == 0 {
					continue
				}
				if sum.On(l) > limits[l] {
					t.Fatalf("round %d: the grants sum to %+v, over %s=%d", round, sum, l, limits[l])
				}
				if share := int64(s * float64(limits[l])); own[n].On(l) > max(share, mins[n].On(l)) {
					t.Fatalf("round %d: node %d of weight %v in %v owns %+v, over %s=%d's share of %d and its largest Min %+v",
						round, n, weights[n], total, own[n], l, limits[l], share, mins[n])
				}
			}
		}
	}
}

// TestGrantWindowSharesFollowWeights slides a minute over a node of
// weight 1 that asks every second and one of weight 3 that asks every
// five: shares are of the window, so whoever asks first or most often,
// each holds its share of the limit, and together they use all of it.
func TestGrantWindowSharesFollowWeights(t *testing.T) {
	t.Parallel()
	type lease struct {
		node int
		at   int // the second it was granted; it counts for 60
		c    governor.Cost
	}
	weights := []float64{1, 3}
	shares := []int64{25, 75}
	limits := limitsOf(t, "rpm=100")
	var leases []lease
	for at := range 600 {
		var live []lease
		for _, l := range leases {
			if l.at > at-60 {
				live = append(live, l)
			}
		}
		leases = live
		for n, w := range weights {
			if n == 1 && at%5 != 0 {
				continue
			}
			var sum, own governor.Cost
			for _, l := range leases {
				sum = add(sum, l.c)
				if l.node == n {
					own = add(own, l.c)
				}
			}
			req := store.LeaseRequest{Want: cost(10, 0, 0), Min: cost(1, 0, 0), Weight: w, Limits: limits}
			g := store.Grant(req, sum, sum, own, own, busy(weights[1-n]))
			if g != (governor.Cost{}) {
				leases = append(leases, lease{n, at, g})
			}
			own = add(own, g)
			if sum = add(sum, g); sum.Requests > 100 {
				t.Fatalf("second %d: the leases in the minute sum to %d requests, over rpm=100", at, sum.Requests)
			}
			// Past the first minute, each holds its share once it has
			// asked; never more.
			if own.Requests > shares[n] || at >= 60 && own.Requests != shares[n] {
				t.Fatalf("second %d: node %d of weight %v holds %d requests of the minute, want its share of %d", at, n, w, own.Requests, shares[n])
			}
		}
	}
}

func TestGrantWaterFills(t *testing.T) {
	t.Parallel()
	more := cost(1000, 1e6, 1e6) // wants more than any limit here
	for _, tc := range []struct {
		name        string
		weight      float64
		want, min   governor.Cost
		limits      string
		minute, day governor.Cost // all the leases, the others' among them
		others      []store.Claim
		grant       governor.Cost
	}{
		{name: "room another node does not claim", weight: 1, want: cost(100, 0, 0), limits: "rpm=100", minute: cost(10, 0, 0),
			others: []store.Claim{{Weight: 1, Minute: cost(10, 0, 0)}}, grant: cost(90, 0, 0)},
		{name: "another node that claims its share", weight: 1, want: cost(100, 0, 0), limits: "rpm=100", minute: cost(10, 0, 0),
			others: []store.Claim{{Weight: 1, Minute: cost(10, 0, 0), Want: cost(60, 0, 0)}}, grant: cost(50, 0, 0)},
		{name: "a claim of exactly the share", weight: 1, want: cost(100, 0, 0), limits: "rpm=100",
			others: []store.Claim{{Weight: 1, Want: cost(50, 0, 0)}}, grant: cost(50, 0, 0)},
		{name: "one claim met, one not", weight: 1, want: cost(100, 0, 0), limits: "rpm=90", minute: cost(10, 0, 0),
			others: []store.Claim{{Weight: 1, Want: more}, {Weight: 1, Minute: cost(10, 0, 0)}}, grant: cost(40, 0, 0)},
		{name: "uneven weights", weight: 3, want: cost(100, 0, 0), limits: "rpm=100", minute: cost(10, 0, 0),
			others: []store.Claim{{Weight: 1, Want: more}, {Weight: 1, Minute: cost(10, 0, 0)}}, grant: cost(67, 0, 0)},
		{name: "claims in order of claim per weight", weight: 1, want: cost(100, 0, 0), limits: "rpm=100",
			others: []store.Claim{{Weight: 1, Want: cost(40, 0, 0)}, {Weight: 4, Want: cost(36, 0, 0)}}, grant: cost(32, 0, 0)},
		{name: "weight 0 gets what the claims leave", weight: 0, want: cost(100, 0, 0), limits: "rpm=100", minute: cost(30, 0, 0),
			others: []store.Claim{{Weight: 1, Minute: cost(30, 0, 0)}}, grant: cost(70, 0, 0)},
		{name: "weight 0 beside a claim of all gets its Min only", weight: 0, want: cost(10, 0, 0), min: cost(1, 0, 0), limits: "rpm=100",
			others: []store.Claim{{Weight: 1, Want: more}}, grant: cost(1, 0, 0)},
		{name: "a claim of weight 0 counts for nothing", weight: 1, want: cost(100, 0, 0), limits: "rpm=100",
			others: []store.Claim{{Weight: 0, Want: more}, {Weight: math.NaN(), Want: more}, {Weight: -1, Want: more}}, grant: cost(100, 0, 0)},
		{name: "a day limit reads the day's claims", weight: 1, want: cost(100, 0, 0), limits: "rpd=100", day: cost(30, 0, 0),
			others: []store.Claim{{Weight: 1, Minute: cost(90, 0, 0), Day: cost(30, 0, 0)}}, grant: cost(70, 0, 0)},
		{name: "a minute limit reads the minute's claims", weight: 1, want: cost(100, 0, 0), limits: "rpm=100", minute: cost(30, 0, 0),
			others: []store.Claim{{Weight: 1, Minute: cost(30, 0, 0), Day: cost(900, 0, 0)}}, grant: cost(70, 0, 0)},
		{name: "each limit its own level", weight: 1, want: cost(100, 1e6, 1e6), limits: "rpm=100,itpm=1000,otpm=1000",
			others: []store.Claim{{Weight: 1, Want: cost(100, 100, 2000)}}, grant: cost(50, 900, 500)},
		{name: "negative parts of a claim count as none", weight: 1, want: cost(100, 0, 0), limits: "rpm=100",
			others: []store.Claim{{Weight: 1, Minute: cost(-50, 0, 0), Want: cost(-50, 0, 0)}}, grant: cost(100, 0, 0)},
		{name: "claims of the largest numbers", weight: 1, want: cost(100, 0, 0), limits: "rpm=100",
			others: []store.Claim{{Weight: 1, Minute: cost(math.MaxInt64, 0, 0), Want: cost(math.MaxInt64, 0, 0)}}, grant: cost(50, 0, 0)},
		{name: "own leases count against the share", weight: 1, want: cost(100, 0, 0), limits: "rpm=100", minute: cost(40, 0, 0),
			others: []store.Claim{{Weight: 1, Minute: cost(10, 0, 0)}}, grant: cost(60, 0, 0)},
	} {
		req := store.LeaseRequest{Want: tc.want, Min: tc.min, Weight: tc.weight, Limits: limitsOf(t, tc.limits)}
		own := func(all governor.Cost, period func(store.Claim) governor.Cost) governor.Cost {
			for _, o := range tc.others {
				p := period(o)
				all = cost(all.Requests-max(p.Requests, 0), all.Input-max(p.Input, 0), all.Output-max(p.Output, 0))
			}
			return cost(max(all.Requests, 0), max(all.Input, 0), max(all.Output, 0))
		}
		ownMinute := own(tc.minute, func(c store.Claim) governor.Cost { return c.Minute })
		ownDay := own(tc.day, func(c store.Claim) governor.Cost { return c.Day })
		if got := store.Grant(req, tc.minute, tc.day, ownMinute, ownDay, tc.others); got != tc.grant {
			t.Errorf("%s: Grant(weight %v, want %+v, %s, minute %+v, day %+v, others %+v) = %+v, want %+v",
				tc.name, tc.weight, tc.want, tc.limits, tc.minute, tc.day, tc.others, got, tc.grant)
		}
	}
}

// TestGrantWindowWaterFills slides a minute over a node that wants 2
// requests every 6 seconds, a fifth of the limit, and one that from half a
// minute in wants all it can get and asks first every second, as a node
// with a backlog would. Each node's claim is what its leases take of the
// window and what it asked for last, as TakeLease records them. The same
// arrivals are admitted by one process, which gives each request that room
// frees to the waiting node with less of the window (the reference: what
// one governor would do). The light node waits no longer on leases than on
// the one process, but by a second, and the limit is as full.
func TestGrantWindowWaterFills(t *testing.T) {
	t.Parallel()
	type lease struct {
		node, at int // at: the second it was granted; it counts for 60
		c        int64
	}
	const limit, seconds = 100, 600
	limits := limitsOf(t, "rpm=100")
	// run admits the arrivals, each second the waiting nodes asking in
	// turn (the greedy one first) through grant, which returns what of
	// want node n gets; it returns the light node's wait for each of its
	// asks, in order, and the requests of the window summed over the
	// seconds past the first 90.
	run := func(grant func(n int, want int64, own, other [2]int64, asks [2]int64) int64) (waits []int, used int64) {
		var leases []lease
		var wants, asks [2]int64
		var asked []int // when each of the light node's asks not yet met began
		for at := range seconds {
			live := leases[:0]
			for _, l := range leases {
				if l.at > at-60 {
					live = append(live, l)
				}
			}
			leases = live
			if at%6 == 0 {
				wants[0] += 2
				asked = append(asked, at)
			}
			if at >= 30 {
				wants[1] = 10 // its first 10 calls, as Demand counts them
			}
			for _, n := range []int{1, 0} {
				if wants[n] == 0 {
					continue
				}
				var own [2]int64
				for _, l := range leases {
					own[l.node] += l.c
				}
				g := grant(n, wants[n], own, [2]int64{own[1], own[0]}, asks)
				if own[0]+own[1]+g > limit {
					t.Fatalf("second %d: the leases in the minute sum to %d requests, over rpm=100", at, own[0]+own[1]+g)
				}
				asks[n] = wants[n]
				if g > 0 {
					leases = append(leases, lease{n, at, g})
				}
				wants[n] -= g
			}
			for len(asked) > 0 && wants[0] <= 2*int64(len(asked)-1) {
				waits, asked = append(waits, at-asked[0]), asked[1:]
			}
			var sum int64
			for _, l := range leases {
				sum += l.c
			}
			if at >= 90 {
				used += sum
			}
		}
		return waits, used
	}
	leased, leasedUsed := run(func(n int, want int64, own, other [2]int64, asks [2]int64) int64 {
		req := store.LeaseRequest{Want: cost(want, 0, 0), Min: cost(1, 0, 0), Weight: 1, Limits: limits}
		sum := cost(own[0]+own[1], 0, 0)
		claim := []store.Claim{{Weight: 1, Minute: cost(other[n], 0, 0), Day: cost(other[n], 0, 0), Want: cost(asks[1-n], 0, 0)}}
		return store.Grant(req, sum, sum, cost(own[n], 0, 0), cost(own[n], 0, 0), claim).Requests
	})
	// One process: the greedy node is served only what is left when the
	// light one, with less of the window, has what it waits for.
	var lightWaits int64
	reference, referenceUsed := run(func(n int, want int64, own, _ [2]int64, _ [2]int64) int64 {
		room := limit - own[0] - own[1]
		if n == 1 && own[0] <= own[1] {
			room -= min(room, lightWaits)
		}
		g := min(want, room)
		if n == 0 {
			lightWaits = want - g
		}
		return g
	})
	if len(leased) < len(reference) {
		t.Fatalf("the light node's asks met: %d on leases, %d on one process", len(leased), len(reference))
	}
	longest, longestRef := 0, 0
	for i := range reference {
		longest, longestRef = max(longest, leased[i]), max(longestRef, reference[i])
		if leased[i] > reference[i]+1 {
			t.Fatalf("the light node's ask at second %d waited %d s on leases, %d s on one process", 6*i, leased[i], reference[i])
		}
	}
	use := func(used int64) float64 { return float64(used) / (limit * (seconds - 90)) }
	if use(leasedUsed) < 0.97*use(referenceUsed) {
		t.Fatalf("the window held %.3f of the limit on leases, %.3f on one process: room idles", use(leasedUsed), use(referenceUsed))
	}
	t.Logf("the light node waited at most %d s on leases, %d s on one process; the window held %.3f and %.3f of the limit",
		longest, longestRef, use(leasedUsed), use(referenceUsed))
}

// Money is granted within the budgets, MPD on the day's window and MPM on
// the month's (read as at least the day's), shared as the other limits are;
// without a budget, as asked.
func TestGrantMoney(t *testing.T) {
	t.Parallel()
	money := func(c governor.Cost, m int64) governor.Cost { c.Money = m; return c }
	want := money(cost(1, 10, 10), 600)
	req := store.LeaseRequest{Want: want, Min: money(cost(1, 10, 10), 100), Weight: 1, Limits: limitsOf(t, "rpm=100")}
	none := governor.Cost{}
	// No budget: the money asked for.
	if got := store.Grant(req, none, none, none, none, nil); got != want {
		t.Errorf("without a budget: %+v, want %+v", got, want)
	}
	day := req
	day.Limits[governor.MPD] = 1000
	month := req
	month.Limits[governor.MPM] = 1000
	for _, tc := range []struct {
		name     string
		req      store.LeaseRequest
		all, own store.Windows
		others   []store.Claim
		money    int64 // granted; -1: nothing
	}{
		{"the day's budget whole", day, store.Windows{}, store.Windows{}, nil, 600},
		{"the day's budget part spent", day, store.Windows{Day: money(none, 700)}, store.Windows{}, nil, 300},
		{"the day's budget spent but for less than Min", day, store.Windows{Day: money(none, 950)}, store.Windows{}, nil, -1},
		{"the day's budget does not read the month", day, store.Windows{Month: money(none, 1000)}, store.Windows{}, nil, 600},
		{"the month's budget part spent", month, store.Windows{Day: money(none, 100), Month: money(none, 700)}, store.Windows{}, nil, 300},
		{"the month's is at least the day's", month, store.Windows{Day: money(none, 700)}, store.Windows{}, nil, 300},
		{"both: the tighter binds", func() store.LeaseRequest { r := day; r.Limits[governor.MPM] = 1000; return r }(),
			store.Windows{Day: money(none, 200), Month: money(none, 800)}, store.Windows{}, nil, 200},
		{"shared with a node that asks for more", day, store.Windows{}, store.Windows{},
			[]store.Claim{{Weight: 1, Want: money(none, governor.MaxCost)}}, 500},
		{"its share less its own day", day, store.Windows{Day: money(none, 300)}, store.Windows{Day: money(none, 300)},
			[]store.Claim{{Weight: 1, Want: money(none, governor.MaxCost)}}, 200},
		// Below its share by less than Min: one call past it, as the room
		// holds it; at its share, none.
		{"below its share by less than a call", day, store.Windows{Day: money(none, 450)}, store.Windows{Day: money(none, 450)},
			[]store.Claim{{Weight: 1, Want: money(none, governor.MaxCost)}}, 100},
		{"at its share", day, store.Windows{Day: money(none, 500)}, store.Windows{Day: money(none, 500)},
			[]store.Claim{{Weight: 1, Want: money(none, governor.MaxCost)}}, -1},
		{"below its share, the room less than a call", day, store.Windows{Day: money(none, 950)}, store.Windows{Day: money(none, 450)},
			[]store.Claim{{Weight: 1, Day: money(none, 500), Want: money(none, governor.MaxCost)}}, -1},
		// Its claim, 450 and 100, is over half: the asking node gets half,
		// not the 550 left (as it would if the claim read the day's 0).
		{"the other node's month counts in its claim", month, store.Windows{Month: money(none, 450)}, store.Windows{},
			[]store.Claim{{Weight: 1, Month: money(none, 450), Want: money(none, 100)}}, 500},
	} {
		got := store.GrantIn(tc.req, tc.all, tc.own, tc.others, nil)
		if tc.money < 0 {
			if got != none {
				t.Errorf("%s: %+v, want nothing", tc.name, got)
			}
			continue
		}
		if got != money(cost(1, 10, 10), tc.money) {
			t.Errorf("%s: %+v, want money %d and the rest as asked", tc.name, got, tc.money)
		}
	}
}
