package storetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseLeases checks the leases of a provider key's capacity: what
// TakeLease grants (store.Grant, on what the store sums), what it records,
// how SettleLease and PruneLeases change it, that final leases are folded
// into a row per node and minute without a sum dropping, and that several
// stores on one database taking leases of one key at once never grant more
// than a limit.
func exerciseLeases(t *testing.T, newDB NewDatabase) {
	ctx := context.Background()
	open := func(t *testing.T) store.Store {
		t.Helper()
		return openOn(t, newDB(t))
	}
	const ttl = 10 * time.Second

	t.Run("LeaseGrantedAndRecorded", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if minute, day := mustLeaseUse(t, s, "groq", base); minute != (governor.Cost{}) || day != (governor.Cost{}) {
			t.Fatalf("LeaseUse of a new database = %+v, %+v; want zero", minute, day)
		}
		// At is stored in UTC at millisecond precision: 0.999999 ms past
		// base is base.
		tokyo := time.FixedZone("JST", 9*3600)
		req := leaseRequest("n1", base.Add(999_999).In(tokyo), cost(2, 300, 200), "rpm=10,tpm=1000")
		first := mustTakeLease(t, s, req)
		assertLease(t, first, "n1", cost(2, 300, 200), base, base.Add(ttl))
		assertLeaseUse(t, s, "groq", base, cost(2, 300, 200), cost(2, 300, 200))
		// The next sees it: what is left of the limits, the tokens shared
		// in proportion to what is wanted.
		req.At, req.Want = base.Add(time.Second), cost(20, 2000, 2000)
		second := mustTakeLease(t, s, req)
		assertLease(t, second, "n1", cost(8, 250, 250), base.Add(time.Second), base.Add(time.Second+ttl))
		if second.ID == first.ID {
			t.Fatalf("two leases of n1 have the same ID %q", first.ID)
		}
		assertLeaseUse(t, s, "groq", base.Add(time.Second), cost(10, 550, 450), cost(10, 550, 450))
		// Nothing is left: a zero grant, and nothing recorded.
		req.At, req.Min = base.Add(2*time.Second), cost(1, 1, 1)
		if l := mustTakeLease(t, s, req); l != (store.Lease{}) {
			t.Fatalf("TakeLease with no room left = %+v, want the zero Lease", l)
		}
		assertLeaseUse(t, s, "groq", base.Add(2*time.Second), cost(10, 550, 450), cost(10, 550, 450))
		// Another key has room of its own.
		other := leaseRequest("n1", base, cost(2, 300, 200), "rpm=10,tpm=1000")
		other.Key = "openai"
		assertLease(t, mustTakeLease(t, s, other), "n1", cost(2, 300, 200), base, base.Add(ttl))
		assertLeaseUse(t, s, "groq", base, cost(10, 550, 450), cost(10, 550, 450))
	})

	t.Run("LeaseWindows", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		l := mustTakeLease(t, s, leaseRequest("n1", base, cost(3, 30, 20), "rpm=3,tpm=1000"))
		until := l.Until
		c := cost(3, 30, 20)
		for _, tc := range []struct {
			at          time.Time
			minute, day governor.Cost
		}{
			// A lease counts from before it starts (another node's clock may
			// be ahead) until a window after it ends.
			{base.Add(-time.Hour), c, c},
			{until.Add(time.Minute - time.Millisecond), c, c},
			{until.Add(time.Minute), governor.Cost{}, c},
			{until.Add(24*time.Hour - time.Millisecond), governor.Cost{}, c},
			{until.Add(24 * time.Hour), governor.Cost{}, governor.Cost{}},
		} {
			assertLeaseUse(t, s, "groq", tc.at, tc.minute, tc.day)
		}
		// TakeLease sums the same way: the requests per minute are free a
		// minute after the lease ends, not before; the requests per day
		// only a day after.
		next := func(at time.Time, limits string) store.Lease {
			req := leaseRequest("n1", at, cost(1, 0, 0), limits)
			req.Min = req.Want
			return mustTakeLease(t, s, req)
		}
		if got := next(until.Add(time.Minute-time.Millisecond), "rpm=3"); got != (store.Lease{}) {
			t.Fatalf("TakeLease within a minute of a lease that used the rpm = %+v, want none", got)
		}
		if got := next(until.Add(time.Minute), "rpm=3,rpd=3"); got != (store.Lease{}) {
			t.Fatalf("TakeLease within a day of a lease that used the rpd = %+v, want none", got)
		}
		assertLease(t, next(until.Add(time.Minute), "rpm=3"), "n1", cost(1, 0, 0), until.Add(time.Minute), until.Add(time.Minute+ttl))
		assertLease(t, next(until.Add(24*time.Hour), "rpm=3,rpd=3"), "n1", cost(1, 0, 0), until.Add(24*time.Hour), until.Add(24*time.Hour+ttl))
	})

	t.Run("LeaseValuesRoundTrip", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const m = governor.MaxCost
		req := leaseRequest("ノード ✓", base, cost(m, m, m), "rpm=1099511627776,rpd=1099511627776,tpm=1099511627776,tpd=1099511627776,itpm=1099511627776,otpm=1099511627776")
		req.Key = `k'ey "with" quotes ✓`
		req.TTL = store.MaxLeaseTTL
		l := mustTakeLease(t, s, req)
		assertLease(t, l, req.Node, cost(m, m/2, m/2), base, base.Add(time.Hour))
		if !strings.HasPrefix(l.ID, req.Node+"/") || len(l.ID) != len(req.Node)+17 {
			t.Fatalf("lease ID %q: want the node, / and 16 hex digits", l.ID)
		}
		assertLeaseUse(t, s, req.Key, base, cost(m, m/2, m/2), cost(m, m/2, m/2))
		// Every limit is used up: nothing more.
		if got := mustTakeLease(t, s, req); got != (store.Lease{}) {
			t.Fatalf("TakeLease on limits used up = %+v, want none", got)
		}
		// The shortest lease.
		req.Key, req.TTL, req.Want = "groq", store.MinLeaseTTL, cost(1, 0, 0)
		assertLease(t, mustTakeLease(t, s, req), req.Node, cost(1, 0, 0), base, base.Add(time.Millisecond))
	})

	t.Run("LeaseFairShare", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		at := base.Add(time.Hour)
		const limits = "rpm=100,tpm=100000"
		take := func(node string, at time.Time, weight float64, want, least governor.Cost) store.Lease {
			req := leaseRequest(node, at, want, limits)
			req.Weight, req.Min = weight, least
			return mustTakeLease(t, s, req)
		}
		// a, of weight 1, is seen 2×TTL before b asks: it counts. c was
		// seen a millisecond earlier: it does not, whatever its weight. c
		// asks for more than the limit: it is recorded, and granted
		// nothing.
		assertLease(t, take("a", at.Add(-2*ttl), 1, cost(1, 10, 10), governor.Cost{}), "a", cost(1, 10, 10), at.Add(-2*ttl), at.Add(-ttl))
		claimMore(t, s, leaseRequest("a", at.Add(-2*ttl), governor.Cost{}, limits)) // and wants more
		if got := take("c", at.Add(-2*ttl-time.Millisecond), 100, cost(1000, 1, 1), cost(1000, 1, 1)); got != (store.Lease{}) {
			t.Fatalf("TakeLease of c with a Min over the limit = %+v, want none", got)
		}
		minute, day := mustLeaseUse(t, s, "groq", at)
		req := leaseRequest("b", at, cost(1000, 1e6, 1e6), limits)
		req.Weight, req.Min = 3, cost(1, 1, 1)
		var none governor.Cost // b has no leases yet
		want := store.Grant(req, minute, day, none, none, busy(1))
		got := mustTakeLease(t, s, req)
		assertLease(t, got, "b", want, at, at.Add(ttl))
		// b's share is 3/4 of the window, not of the room a left (99
		// requests and 99,980 tokens): 75 requests and 75,000 tokens,
		// shared as wanted.
		if got.Cost != cost(75, 37500, 37500) {
			t.Fatalf("b's lease = %+v, want 3/4 of the limits: 75 requests and 75,000 tokens, shared as wanted", got.Cost)
		}
		// A node's own weight is never among the others, and its own leases
		// count against its share: b again shares with a alone, and its
		// share of the window is taken, though room is left. Nothing, and
		// nothing recorded.
		minute, day = mustLeaseUse(t, s, "groq", at)
		if g := store.Grant(req, minute, day, got.Cost, got.Cost, busy(1)); g != (governor.Cost{}) {
			t.Fatalf("Grant to b with its share taken = %+v, want zero", g)
		}
		if l := mustTakeLease(t, s, req); l != (store.Lease{}) {
			t.Fatalf("TakeLease of b with its share of the window taken = %+v, want none", l)
		}
		assertLeaseUse(t, s, "groq", at, minute, day)
		// A node of weight 0 gets its Min while others wait.
		req.Node, req.Weight, req.Min = "z", 0, cost(2, 5, 5)
		assertLease(t, mustTakeLease(t, s, req), "z", cost(2, 5, 5), at, at.Add(ttl))
		// And no more: it now has leases of its own.
		if l := mustTakeLease(t, s, req); l != (store.Lease{}) {
			t.Fatalf("TakeLease of z of weight 0 with a lease of its own = %+v, want none", l)
		}
		// A node seen after the asker's time counts too (its clock, or its
		// turn at the lock, was ahead): e, of weight 6, seen a millisecond
		// after f asks. f's share, of weight 1 against a's, b's and e's 10
		// (z's 0 and c, seen too long ago, count for nothing), is 1/11 of
		// the window: 9 requests and 9,090 tokens; 20 and 20,000 without
		// e.
		if got := take("e", at.Add(time.Millisecond), 6, cost(1000, 1e6, 1e6), cost(1000, 1, 1)); got != (store.Lease{}) {
			t.Fatalf("TakeLease of e with a Min over the limit = %+v, want none", got)
		}
		req = leaseRequest("f", at, cost(1000, 1e6, 1e6), limits)
		minute, day = mustLeaseUse(t, s, "groq", at)
		if store.Grant(req, minute, day, none, none, busy(10)) != cost(9, 4545, 4545) || store.Grant(req, minute, day, none, none, busy(4)) != cost(20, 10000, 10000) {
			t.Fatal("the test cannot tell e's weight counted from not")
		}
		assertLease(t, mustTakeLease(t, s, req), "f", cost(9, 4545, 4545), at, at.Add(ttl))
	})

	t.Run("LeaseShareLessOwnOfEachPeriod", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		take := func(node string, at time.Time, want governor.Cost, limits string) store.Lease {
			t.Helper()
			return mustTakeLease(t, s, leaseRequest(node, at, want, limits))
		}
		const limits = "rpm=100,rpd=100"
		// Q, alone, takes a request; P, beside Q, half the window.
		assertLease(t, take("Q", base, cost(1, 0, 0), limits), "Q", cost(1, 0, 0), base, base.Add(ttl))
		claimMore(t, s, leaseRequest("Q", base, governor.Cost{}, limits))
		assertLease(t, take("P", base.Add(time.Second), cost(1000, 0, 0), limits), "P", cost(50, 0, 0), base.Add(time.Second), base.Add(time.Second+ttl))
		// Two minutes on, P's lease counts in the day, not in the minute:
		// beside Q (seen again), P's share of the day is taken, though 49
		// requests of it are left.
		at := base.Add(2 * time.Minute)
		assertLease(t, take("Q", at, cost(1, 0, 0), limits), "Q", cost(1, 0, 0), at, at.Add(ttl))
		claimMore(t, s, leaseRequest("Q", at, governor.Cost{}, limits))
		at = at.Add(time.Second)
		minute, day := mustLeaseUse(t, s, "groq", at)
		if minute != cost(1, 0, 0) || day != cost(52, 0, 0) {
			t.Fatalf("LeaseUse at %s = %+v, %+v; want 1 request in the minute, 52 in the day", showTime(at), minute, day)
		}
		if l := take("P", at, cost(1000, 0, 0), limits); l != (store.Lease{}) {
			t.Fatalf("TakeLease of P with its share of the day taken by its own lease = %+v, want none", l)
		}
		// Without a daily limit, its share of the minute is all free.
		assertLease(t, take("P", at, cost(1000, 0, 0), "rpm=100"), "P", cost(50, 0, 0), at, at.Add(ttl))
	})

	t.Run("LeaseFlowsShareAcrossNodes", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var none governor.Cost
		take := func(key, node string, at time.Time, want governor.Cost, flows map[string]float64) store.Lease {
			t.Helper()
			req := leaseRequest(node, at, want, "rpm=60")
			req.Key, req.Flows = key, flows
			return mustTakeLease(t, s, req)
		}
		// Each node below that takes a request wants more.
		more := func(key, node string, at time.Time, flows map[string]float64) {
			t.Helper()
			req := leaseRequest(node, at, governor.Cost{}, "rpm=60")
			req.Key, req.Flows = key, flows
			claimMore(t, s, req)
		}
		// B, then C, each with calls of flow b waiting, take a request
		// each: B alone; C's share is half, b's weight split between the
		// two.
		b, c := map[string]float64{"b": 1}, map[string]float64{"b": 1}
		assertLease(t, take("groq", "B", base, cost(1, 0, 0), b), "B", cost(1, 0, 0), base, base.Add(ttl))
		more("groq", "B", base, b)
		assertLease(t, take("groq", "C", base.Add(time.Second), cost(1, 0, 0), c), "C", cost(1, 0, 0), base.Add(time.Second), base.Add(time.Second+ttl))
		more("groq", "C", base.Add(time.Second), c)
		// A, its flow a waiting on it alone, weighs 1 against B's and C's
		// 1/2 each: its share is half the window, 30 requests, though 58
		// are left; not a third, as by the nodes' weights.
		at := base.Add(2 * time.Second)
		req := leaseRequest("A", at, cost(1000, 0, 0), "rpm=60")
		minute, day := mustLeaseUse(t, s, "groq", at)
		if g := store.Grant(req, minute, day, none, none, busy(1)); g != cost(30, 0, 0) {
			t.Fatalf("Grant to A of weight 1 against 1 = %+v, want 30 requests", g)
		}
		assertLease(t, take("groq", "A", at, cost(1000, 0, 0), map[string]float64{"a": 1}), "A", cost(30, 0, 0), at, at.Add(ttl))
		// B again: its 1/2 (b still waits on B and C, B included) against
		// A's 1 and C's 1/2 is a quarter of the window, 15 requests, less
		// the one it holds.
		at = base.Add(3 * time.Second)
		assertLease(t, take("groq", "B", at, cost(1000, 0, 0), b), "B", cost(14, 0, 0), at, at.Add(ttl))
		assertLeaseUse(t, s, "groq", at, cost(46, 0, 0), cost(46, 0, 0))

		// The same without Flows: each node weighs its weight, 1, and A's
		// share is a third of the window.
		take("openai", "B", base, cost(1, 0, 0), nil)
		more("openai", "B", base, nil)
		take("openai", "C", base.Add(time.Second), cost(1, 0, 0), nil)
		more("openai", "C", base.Add(time.Second), nil)
		at = base.Add(2 * time.Second)
		assertLease(t, take("openai", "A", at, cost(1000, 0, 0), nil), "A", cost(20, 0, 0), at, at.Add(ttl))

		// As many flows as a request may give, with names of the most
		// bytes, weights of 0 and a name JSON escapes, are taken, and read
		// back: X weighs what its flows do, 1/2 of the one it shares with
		// Y, not its weight of 3, so Y's share is half the window.
		shared := "flow \"ü\" <&>\n"
		x := map[string]float64{shared: 1}
		for i := range store.MaxLeaseFlows - 1 {
			x[fmt.Sprintf("%s%06d", strings.Repeat("x", store.MaxKeyBytes-6), i)] = 0
		}
		reqX := leaseRequest("X", base, cost(1, 0, 0), "rpm=60")
		reqX.Key, reqX.Weight, reqX.Flows = "mistral", 3, x
		assertLease(t, mustTakeLease(t, s, reqX), "X", cost(1, 0, 0), base, base.Add(ttl))
		reqX.Want = governor.Cost{}
		claimMore(t, s, reqX)
		at = base.Add(time.Second)
		assertLease(t, take("mistral", "Y", at, cost(1000, 0, 0), map[string]float64{shared: 1}), "Y", cost(30, 0, 0), at, at.Add(ttl))
	})

	t.Run("LeaseRoomNobodyClaims", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		take := func(key, node string, at time.Time, want, least governor.Cost) store.Lease {
			t.Helper()
			req := leaseRequest(node, at, want, "rpm=100")
			req.Key, req.Min = key, least
			return mustTakeLease(t, s, req)
		}
		var none governor.Cost
		// A claims its lease and its ask, 20 requests: B, of the same
		// weight, takes the 80 left, not half.
		assertLease(t, take("groq", "A", base, cost(10, 0, 0), none), "A", cost(10, 0, 0), base, base.Add(ttl))
		at := base.Add(time.Second)
		assertLease(t, take("groq", "B", at, cost(1000, 0, 0), none), "B", cost(80, 0, 0), at, at.Add(ttl))
		// An ask that is granted nothing is a claim all the same: A asks
		// for more than the room, and B gets half.
		take("openai", "A", base, cost(10, 0, 0), none)
		if l := take("openai", "A", base.Add(time.Second), cost(1000, 0, 0), cost(95, 0, 0)); l != (store.Lease{}) {
			t.Fatalf("TakeLease of A with a Min over the room = %+v, want none", l)
		}
		at = base.Add(2 * time.Second)
		assertLease(t, take("openai", "B", at, cost(1000, 0, 0), none), "B", cost(50, 0, 0), at, at.Add(ttl))
		// Water-filling among three: A claims 20, met below the level;
		// B claims 60, over it: C's share is half of the 80 A leaves, 40.
		take("mistral", "A", base, cost(10, 0, 0), none)
		assertLease(t, take("mistral", "B", base.Add(time.Second), cost(30, 0, 0), none), "B", cost(30, 0, 0), base.Add(time.Second), base.Add(time.Second+ttl))
		at = base.Add(2 * time.Second)
		req := leaseRequest("C", at, cost(1000, 0, 0), "rpm=100")
		req.Key = "mistral"
		minute, day := mustLeaseUse(t, s, "mistral", at)
		claims := []store.Claim{
			{Weight: 1, Minute: cost(10, 0, 0), Day: cost(10, 0, 0), Want: cost(10, 0, 0)},
			{Weight: 1, Minute: cost(30, 0, 0), Day: cost(30, 0, 0), Want: cost(30, 0, 0)},
		}
		if g := store.Grant(req, minute, day, none, none, claims); g != cost(40, 0, 0) {
			t.Fatalf("Grant to C beside claims of 20 and 60 = %+v, want 40 requests", g)
		}
		assertLease(t, mustTakeLease(t, s, req), "C", cost(40, 0, 0), at, at.Add(ttl))
	})

	t.Run("LeaseMinThatDoesNotFit", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// n1, of weight 9, alone: all it wants.
		first := leaseRequest("n1", base, cost(6, 500, 400), "rpm=10,tpm=1000")
		first.Weight = 9
		assertLease(t, mustTakeLease(t, s, first), "n1", cost(6, 500, 400), base, base.Add(ttl))
		first.Want = governor.Cost{}
		claimMore(t, s, first)
		for _, tc := range []struct {
			name      string
			want, min governor.Cost
		}{
			{"requests", cost(8, 10, 10), cost(5, 10, 10)},
			{"tokens", cost(1, 80, 30), cost(1, 80, 30)},
		} {
			req := leaseRequest("n2", base.Add(time.Second), tc.want, "rpm=10,tpm=1000")
			req.Min = tc.min
			if got := mustTakeLease(t, s, req); got != (store.Lease{}) {
				t.Fatalf("TakeLease with a Min of %s that does not fit = %+v, want the zero Lease", tc.name, got)
			}
			assertLeaseUse(t, s, "groq", base.Add(time.Second), cost(6, 500, 400), cost(6, 500, 400))
		}
		// A Min that fits the room is granted in full, over n2's share of a
		// tenth of the window, 1 request and 100 tokens (n1 was seen a
		// second ago): n2 has no leases of its own.
		req := leaseRequest("n2", base.Add(time.Second), cost(8, 100, 100), "rpm=10,tpm=1000")
		req.Min = cost(4, 60, 40)
		minute, day := mustLeaseUse(t, s, "groq", req.At)
		var none governor.Cost
		if store.Grant(req, minute, day, none, none, busy(9)) != cost(4, 60, 40) || store.Grant(req, minute, day, cost(1, 0, 0), cost(1, 0, 0), busy(9)) != (governor.Cost{}) {
			t.Fatal("the test cannot tell a Min over the share from one within it")
		}
		assertLease(t, mustTakeLease(t, s, req), "n2", cost(4, 60, 40), base.Add(time.Second), base.Add(time.Second+ttl))
	})

	t.Run("SettleLeaseOnlyLowers", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		l := mustTakeLease(t, s, leaseRequest("n1", base, cost(3, 300, 200), "rpm=100,tpm=10000"))
		keep := mustTakeLease(t, s, leaseRequest("n1", base, cost(1, 1, 1), "rpm=100,tpm=10000"))
		// check checks the sums of l, now used and ending at until, and of
		// keep, before and after the minute after until.
		check := func(step string, used governor.Cost, until time.Time) {
			t.Helper()
			sum := add(used, keep.Cost)
			for _, tc := range []struct {
				at   time.Time
				want governor.Cost
			}{{base, sum}, {until.Add(time.Minute - time.Millisecond), sum}, {until.Add(time.Minute), keep.Cost}} {
				if minute, _ := mustLeaseUse(t, s, "groq", tc.at); minute != tc.want {
					t.Fatalf("%s: LeaseUse at %s = %+v, want %+v", step, showTime(tc.at), minute, tc.want)
				}
			}
		}
		mustSettleLease(t, s, "groq", l.ID, cost(1, 400, 100), base.Add(5*time.Second), false)
		check("settled lower", cost(1, 300, 100), base.Add(5*time.Second))
		mustSettleLease(t, s, "groq", l.ID, cost(2, 500, 500), base.Add(20*time.Second), false)
		check("settled higher", cost(1, 300, 100), base.Add(5*time.Second))
		mustSettleLease(t, s, "groq", l.ID, cost(1, 300, 100), base.Add(-time.Hour), false)
		check("settled before its start", cost(1, 300, 100), base)
		mustSettleLease(t, s, "groq", l.ID, governor.Cost{}, base.Add(time.Hour), true)
		check("settled unused", governor.Cost{}, base)
		if minute, _ := mustLeaseUse(t, s, "groq", base.Add(ttl+time.Minute-time.Millisecond)); minute != keep.Cost {
			t.Fatalf("the lease settled beside another changed it: LeaseUse = %+v, want %+v", minute, keep.Cost)
		}
		// Unknown: never taken, or taken on another key.
		for _, tc := range []struct{ key, id, want string }{
			{"groq", "n1/0000000000000000", "settle lease n1/0000000000000000 on groq: store: no such lease"},
			{"openai", l.ID, "settle lease " + l.ID + " on openai: store: no such lease"},
		} {
			err := s.SettleLease(ctx, tc.key, tc.id, governor.Cost{}, base, true)
			if !errors.Is(err, store.ErrNoLease) || err.Error() != tc.want {
				t.Errorf("SettleLease(%q, %q) = %v, want %q wrapping ErrNoLease", tc.key, tc.id, err, tc.want)
			}
		}
	})

	t.Run("LeaseDayPacedAcrossNodes", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// A request a second is the even pace of 86,400 a day; a pacer
		// made now pays back its minute's burst over the day, each unit
		// worth (day + burst) / day of a second.
		paced := func(node string, at time.Time, want int64, ahead int64) store.LeaseRequest {
			req := leaseRequest(node, at, cost(want, 0, 0), "rpd=86400")
			req.Min = cost(1, 0, 0)
			req.Pace = &store.LeasePace{DayPace: 1, Burst: time.Minute, Ahead: cost(ahead, 0, 0)}
			return req
		}
		// The burst in hand: 59 of the 100 asked (60 s over 1.0007 s).
		first := mustTakeLease(t, s, paced("n1", base, 100, 0))
		assertLease(t, first, "n1", cost(59, 0, 0), base, base.Add(ttl))
		// Another node finds the pace taken: the day's room does not help.
		if l := mustTakeLease(t, s, paced("n2", base, 10, 0)); l != (store.Lease{}) {
			t.Fatalf("a second node's lease with the pace taken = %+v, want none", l)
		}
		// What may run ahead of the pace (a priority call on its credit)
		// goes.
		assertLease(t, mustTakeLease(t, s, paced("n2", base, 10, 1)), "n2", cost(1, 0, 0), base, base.Add(ttl))
		// Ten seconds on, what the pace has made since: 9 (the call ahead
		// took one second of it).
		at := base.Add(10 * time.Second)
		assertLease(t, mustTakeLease(t, s, paced("n2", at, 100, 0)), "n2", cost(9, 0, 0), at, at.Add(ttl))
		// The first lease, settled unused, gives its 59 back to the pace.
		mustSettleLease(t, s, "groq", first.ID, governor.Cost{}, base, true)
		assertLease(t, mustTakeLease(t, s, paced("n2", at, 100, 0)), "n2", cost(59, 0, 0), at, at.Add(ttl))
		// A pace out of range is refused, naming it.
		for _, tc := range []struct {
			pace store.LeasePace
			want string
		}{
			{store.LeasePace{DayPace: 1.5, Burst: time.Minute}, "day pace 1.5"},
			{store.LeasePace{DayPace: math.NaN(), Burst: time.Minute}, "day pace NaN"},
			{store.LeasePace{DayPace: 1, Burst: 25 * time.Hour}, "burst 25h0m0s"},
			{store.LeasePace{DayPace: 1, Burst: time.Minute, Ahead: cost(11, 0, 0)}, "Pace.Ahead.Requests 11 is over Want.Requests 10"},
		} {
			req := paced("n3", at, 10, 0)
			req.Pace = &tc.pace
			if _, err := s.TakeLease(ctx, req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("TakeLease with pace %+v = %v, want an error naming %q", tc.pace, err, tc.want)
			}
		}
	})

	t.Run("NodeFlowsOfTheCluster", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		flow := func(node, name string, waiting, admitted int64, at time.Time) store.NodeFlow {
			return store.NodeFlow{Node: node, Flow: name, Waiting: waiting, Admitted: admitted, Input: 10 * admitted, Output: 5 * admitted, At: at}
		}
		record := func(node string, at time.Time, flows ...store.NodeFlow) {
			t.Helper()
			if err := s.RecordNodeFlows(ctx, "groq", node, at, flows); err != nil {
				t.Fatal(err)
			}
		}
		check := func(since time.Time, want ...store.NodeFlow) {
			t.Helper()
			got, err := s.NodeFlows(ctx, "groq", since)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("NodeFlows since %s = %+v, %v; want %+v", showTime(since), got, err, want)
			}
		}
		later := base.Add(2 * time.Second)
		record("n2", base, flow("n2", "summary", 4, 7, base))
		record("n1", base, flow("n1", "title", 0, 3, base), flow("n1", "summary", 2, 9, base))
		check(base, flow("n1", "summary", 2, 9, base), flow("n2", "summary", 4, 7, base), flow("n1", "title", 0, 3, base))
		// A node's next word replaces its last; a node that said nothing
		// since is left out.
		record("n1", later, flow("n1", "summary", 0, 12, later))
		check(later, flow("n1", "summary", 0, 12, later))
		check(base, flow("n1", "summary", 0, 12, later), flow("n2", "summary", 4, 7, base), flow("n1", "title", 0, 3, base))
		// Another key's are its own.
		if got, err := s.NodeFlows(ctx, "openai", base); err != nil || len(got) != 0 {
			t.Fatalf("NodeFlows of another key = %+v, %v; want none", got, err)
		}
		// Bad input names what is wrong and writes nothing.
		for _, tc := range []struct {
			node  string
			flows []store.NodeFlow
			want  string
		}{
			{"", nil, "node"},
			{"n3", []store.NodeFlow{flow("n3", "", 1, 1, later)}, "flow"},
			{"n3", []store.NodeFlow{flow("n3", "a", 1, 1, later), flow("n3", "a", 2, 2, later)}, `flow "a" is given twice`},
			{"n3", []store.NodeFlow{flow("n3", "a", -1, 1, later)}, `flow "a": waiting -1 is out of range`},
			{"n3", []store.NodeFlow{flow("n3", "a", 1, 1<<41, later)}, `flow "a": admitted 2199023255552 is out of range`},
		} {
			if err := s.RecordNodeFlows(ctx, "groq", tc.node, later, tc.flows); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RecordNodeFlows(%q, %+v) = %v, want an error naming %q", tc.node, tc.flows, err, tc.want)
			}
		}
		if err := s.RecordNodeFlows(ctx, "groq", "n3", time.Time{}, nil); err == nil || !strings.Contains(err.Error(), "time") {
			t.Errorf("RecordNodeFlows at the zero time = %v, want an error naming the time", err)
		}
		check(later, flow("n1", "summary", 0, 12, later))
		// Pruned with the leases' nodes.
		if _, err := s.PruneLeases(ctx, "groq", later); err != nil {
			t.Fatal(err)
		}
		check(base, flow("n1", "summary", 0, 12, later))
	})

	t.Run("PruneLeasesEndedAndNodesGone", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		before := base.Add(time.Hour)
		const limits = "rpm=1000"
		take := func(key, node string, at time.Time, weight float64) store.Lease {
			req := leaseRequest(node, at, cost(1, 0, 0), limits)
			req.Key, req.Weight = key, weight
			l := mustTakeLease(t, s, req)
			req.Want = governor.Cost{}
			claimMore(t, s, req)
			return l
		}
		take("groq", "n1", base, 1)                   // ends before before, seen before it
		l2 := take("groq", "n2", before.Add(-ttl), 2) // ends at before: kept; seen before it
		l3 := take("groq", "n3", before, 4)           // seen at before: kept
		take("openai", "n1", base, 1)                 // another key's
		n, err := s.PruneLeases(ctx, "groq", before)
		if err != nil || n != 1 {
			t.Fatalf("PruneLeases = %d, %v; want 1, nil", n, err)
		}
		if n, err := s.PruneLeases(ctx, "groq", before); err != nil || n != 0 {
			t.Fatalf("second PruneLeases = %d, %v; want 0, nil", n, err)
		}
		sum := add(l2.Cost, l3.Cost)
		assertLeaseUse(t, s, "groq", base, sum, sum)
		assertLeaseUse(t, s, "openai", base, cost(1, 0, 0), cost(1, 0, 0))
		// Of the nodes, n3 alone is left: a fourth, whose TTL of an hour
		// would count all three, shares with n3's weight of 4, not 7.
		req := leaseRequest("n4", before, cost(1000, 0, 0), limits)
		req.TTL = time.Hour
		minute, day := mustLeaseUse(t, s, "groq", before)
		var none governor.Cost // n4 has no leases of its own
		if store.Grant(req, minute, day, none, none, busy(4)) == store.Grant(req, minute, day, none, none, busy(7)) {
			t.Fatal("the test cannot tell the nodes' weights apart")
		}
		assertLease(t, mustTakeLease(t, s, req), "n4", store.Grant(req, minute, day, none, none, busy(4)), before, before.Add(time.Hour))
	})

	t.Run("LeaseRowsFoldedPerNodeAndMinute", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// One node whose calls go one at a time takes a lease for each:
		// 2,000 of them, one every 2 s, 67 minutes.
		const leases, every = 2000, 2 * time.Second
		const limits = "rpm=1000000,rpd=1000000000,tpm=1000000000,tpd=1000000000"
		type use struct {
			until time.Time
			used  governor.Cost
		}
		var uses []use // of each lease, as settled
		// sum sums the uses that end after from: what counts in a window
		// that starts at from.
		sum := func(from time.Time) governor.Cost {
			var c governor.Cost
			for _, u := range uses {
				if u.until.After(from) {
					c = add(c, u.used)
				}
			}
			return c
		}
		// The call on every 7th lease runs for three minutes: its lease is
		// settled when it ends, and settled again, final and for less, when
		// the call ends.
		type long struct {
			i   int
			id  string
			end time.Time
		}
		var running []long
		finish := func(r long) {
			t.Helper()
			u := &uses[r.i]
			u.used = cost(u.used.Requests, u.used.Input/2, u.used.Output/2)
			mustSettleLease(t, s, "groq", r.id, u.used, u.until, true)
		}
		rng := rand.New(rand.NewPCG(29, 8))
		var at time.Time
		for i := range leases {
			at = base.Add(time.Duration(i) * every)
			for len(running) > 0 && !running[0].end.After(at) {
				finish(running[0])
				running = running[1:]
			}
			req := leaseRequest("n1", at, cost(1, 100, 50), limits)
			req.TTL = every
			l := mustTakeLease(t, s, req)
			assertLease(t, l, "n1", cost(1, 100, 50), at, at.Add(every))
			u := use{until: at.Add(time.Duration(rng.Int64N(2000)) * time.Millisecond), used: cost(1, rng.Int64N(101), rng.Int64N(51))}
			final := true
			switch {
			case i%50 == 0: // unused: it ends when it was granted
				u = use{until: at}
			case i%7 == 0:
				final = false
				running = append(running, long{i, l.ID, at.Add(3 * time.Minute)})
			}
			uses = append(uses, u)
			mustSettleLease(t, s, "groq", l.ID, u.used, u.until, final)
			if i%100 != 99 {
				continue
			}
			// The rows: a fold for each minute the leases ended in, the
			// leases that ended in the last minute (31 and the one just
			// taken) and those still running. The sums are the leases'.
			rows, _ := leaseRows(t, s, "groq")
			if bound := int64(at.Sub(base)/time.Minute) + 2 + int64(time.Minute/every) + 2 + int64(len(running)); rows > bound {
				t.Fatalf("after %d leases of one node in %s, %d rows of leases; want at most %d", i+1, at.Sub(base), rows, bound)
			}
			assertLeaseUse(t, s, "groq", at, sum(at.Add(-time.Minute)), sum(at.Add(-24*time.Hour)))
		}
		for _, r := range running {
			finish(r)
		}
		end := at.Add(every)

		// The node's next ask folds every lease, all final, that ended a
		// minute before it: one row per minute they ended in is left.
		minutes := map[int64]time.Time{} // the latest end of each
		for _, u := range uses {
			m := u.until.Truncate(time.Minute).Unix()
			minutes[m] = latest(minutes[m], u.until)
		}
		if l := mustTakeLease(t, s, leaseRequest("n1", end.Add(time.Minute), governor.Cost{}, limits)); l != (store.Lease{}) {
			t.Fatalf("TakeLease for nothing = %+v, want none", l)
		}
		rows, folds := leaseRows(t, s, "groq")
		if rows != folds || folds != int64(len(minutes)) {
			t.Fatalf("%d rows, %d of them folds, of %d leases ended in %d minutes; want a fold a minute, nothing else", rows, folds, leases, len(minutes))
		}
		t.Logf("%d leases of one node in %s: %d rows", leases, end.Sub(base), rows)

		// Where the day's window starts, a fold counts as long as its
		// latest lease: at most what the node's leases used in the
		// minute before the start, ended by then, counts beyond them.
		var beyond int
		for day := base.Add(24*time.Hour - time.Minute); day.Before(end.Add(24*time.Hour + time.Minute)); day = day.Add(29*time.Second + 7*time.Millisecond) {
			from := day.Add(-24 * time.Hour)
			exact := sum(from)
			slack := sub(sum(from.Truncate(time.Minute).Add(-time.Millisecond)), exact)
			minute, got := mustLeaseUse(t, s, "groq", day)
			if minute != (governor.Cost{}) || !atLeast(got, exact) || !atLeast(add(exact, slack), got) {
				t.Fatalf("LeaseUse at %s = %+v, %+v; want nothing in the minute, and from %+v, what the leases that count used, to %+v more", showTime(day), minute, got, exact, slack)
			}
			if got != exact {
				beyond++
			}
		}
		if beyond == 0 {
			t.Fatal("the test cannot tell a fold from its leases: no fold counted beyond them")
		}

		// PruneLeases deletes the folds whose latest lease ended before
		// before: what counts from then on is as it was.
		before := base.Add(30*time.Minute + 17*time.Second)
		var gone int64
		for _, last := range minutes {
			if last.Before(before) {
				gone++
			}
		}
		kept := func() []governor.Cost {
			var days []governor.Cost
			for day := before.Add(24 * time.Hour); day.Before(end.Add(24 * time.Hour)); day = day.Add(3 * time.Minute) {
				_, d := mustLeaseUse(t, s, "groq", day)
				days = append(days, d)
			}
			return days
		}
		was := kept()
		if n, err := s.PruneLeases(ctx, "groq", before); err != nil || n != gone {
			t.Fatalf("PruneLeases(%s) = %d, %v; want the %d folds that ended before it", showTime(before), n, err, gone)
		}
		if now := kept(); !slices.Equal(now, was) {
			t.Fatalf("LeaseUse in the days after the prune = %+v, was %+v", now, was)
		}
		if n, err := s.PruneLeases(ctx, "groq", end.Add(time.Minute)); err != nil || n != folds-gone {
			t.Fatalf("PruneLeases(%s) = %d, %v; want the %d folds left", showTime(end.Add(time.Minute)), n, err, folds-gone)
		}
		assertLeaseUse(t, s, "groq", end, governor.Cost{}, governor.Cost{})
	})

	t.Run("LeaseFoldedOnceFinal", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const limits = "rpm=100,rpd=1000"
		take := func(node string, want governor.Cost) store.Lease {
			t.Helper()
			return mustTakeLease(t, s, leaseRequest(node, base, want, limits))
		}
		// ask has n3 ask for nothing at at: it folds, and takes nothing.
		ask := func(at time.Time) {
			t.Helper()
			if l := mustTakeLease(t, s, leaseRequest("n3", at, governor.Cost{}, limits)); l != (store.Lease{}) {
				t.Fatalf("TakeLease for nothing = %+v, want none", l)
			}
		}
		assertRows := func(step string, rows, folds int64) {
			t.Helper()
			if r, f := leaseRows(t, s, "groq"); r != rows || f != folds {
				t.Fatalf("%s: %d rows, %d of them folds; want %d, %d", step, r, f, rows, folds)
			}
		}
		a, b, c := take("n1", cost(3, 0, 0)), take("n1", cost(2, 0, 0)), take("n2", cost(1, 0, 0))
		ended := base.Add(time.Second)
		mustSettleLease(t, s, "groq", a.ID, cost(2, 0, 0), ended, true)
		mustSettleLease(t, s, "groq", b.ID, cost(2, 0, 0), ended, false) // a call on it still runs
		mustSettleLease(t, s, "groq", c.ID, cost(1, 0, 0), ended.Add(time.Second), true)
		// A millisecond short of a minute after they ended, a and b still
		// count in a minute's window: nothing is folded.
		ask(ended.Add(time.Minute - time.Millisecond))
		assertRows("a minute after the leases ended, less a millisecond", 3, 0)
		assertLeaseUse(t, s, "groq", ended.Add(time.Minute-time.Millisecond), cost(5, 0, 0), cost(5, 0, 0))
		// A minute after, a is folded, alone: b is not final, c still
		// counts in the minute.
		ask(ended.Add(time.Minute))
		assertRows("a minute after", 3, 1)
		assertLeaseUse(t, s, "groq", ended.Add(time.Minute), cost(1, 0, 0), cost(5, 0, 0))
		// Folded, a is no lease to settle; nor is the fold, by its ID.
		want := "settle lease " + a.ID + " on groq: store: no such lease"
		if err := s.SettleLease(ctx, "groq", a.ID, governor.Cost{}, base, true); !errors.Is(err, store.ErrNoLease) || err.Error() != want {
			t.Fatalf("SettleLease of a folded lease = %v, want %q", err, want)
		}
		ids := foldIDs(t, s, "groq")
		if len(ids) != 1 {
			t.Fatalf("folds %q, want one", ids)
		}
		want = "settle lease " + ids[0] + " on groq: store: no such lease"
		if err := s.SettleLease(ctx, "groq", ids[0], governor.Cost{}, base, true); !errors.Is(err, store.ErrNoLease) || err.Error() != want {
			t.Fatalf("SettleLease of a fold = %v, want %q", err, want)
		}
		assertLeaseUse(t, s, "groq", ended.Add(time.Minute), cost(1, 0, 0), cost(5, 0, 0))
		// b, settled final for less once its call ended, is added to n1's
		// fold of the minute it ended in, where a is; c has a fold of its
		// own, n2's.
		mustSettleLease(t, s, "groq", b.ID, cost(1, 0, 0), ended, true)
		ask(ended.Add(time.Second + time.Minute))
		assertRows("once b is final and c counts in no minute", 2, 2)
		assertLeaseUse(t, s, "groq", ended.Add(time.Second+time.Minute), governor.Cost{}, cost(4, 0, 0))
		// Each counts in a day as long as its leases.
		assertLeaseUse(t, s, "groq", ended.Add(24*time.Hour-time.Millisecond), governor.Cost{}, cost(4, 0, 0))
		assertLeaseUse(t, s, "groq", ended.Add(24*time.Hour), governor.Cost{}, cost(1, 0, 0))
		assertLeaseUse(t, s, "groq", ended.Add(time.Second+24*time.Hour), governor.Cost{}, governor.Cost{})
	})

	t.Run("LeaseFoldCountsAgainstItsNodesShare", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		take := func(node string, at time.Time, want governor.Cost, limits string) store.Lease {
			t.Helper()
			return mustTakeLease(t, s, leaseRequest(node, at, want, limits))
		}
		const limits = "rpm=100,rpd=100"
		// As in LeaseShareLessOwnOfEachPeriod, but P's lease is used in
		// full and final, and folded by the first ask two minutes on.
		take("Q", base, cost(1, 0, 0), limits)
		claimMore(t, s, leaseRequest("Q", base, governor.Cost{}, limits))
		p := take("P", base.Add(time.Second), cost(1000, 0, 0), limits)
		assertLease(t, p, "P", cost(50, 0, 0), base.Add(time.Second), base.Add(time.Second+ttl))
		mustSettleLease(t, s, "groq", p.ID, p.Cost, base.Add(2*time.Second), true)
		at := base.Add(2 * time.Minute)
		take("Q", at, cost(1, 0, 0), limits)
		claimMore(t, s, leaseRequest("Q", at, governor.Cost{}, limits))
		at = at.Add(time.Second)
		if l := take("P", at, cost(1000, 0, 0), limits); l != (store.Lease{}) {
			t.Fatalf("TakeLease of P with its share of the day taken by its folded lease = %+v, want none", l)
		}
		if _, folds := leaseRows(t, s, "groq"); folds != 1 {
			t.Fatalf("%d folds, want P's lease folded", folds)
		}
		assertLease(t, take("P", at, cost(1000, 0, 0), "rpm=100"), "P", cost(50, 0, 0), at, at.Add(ttl))
	})

	t.Run("LeaseRefusesBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		long := strings.Repeat("k", store.MaxKeyBytes+1)
		bad := func(change func(*store.LeaseRequest)) store.LeaseRequest {
			req := leaseRequest("bad", base, cost(2, 300, 200), "rpm=10,tpm=1000")
			req.Min = cost(1, 100, 100)
			change(&req)
			return req
		}
		// The words are part of the contract: both drivers say the same.
		for _, tc := range []struct {
			call string
			req  store.LeaseRequest
			want string
		}{
			{"without key", bad(func(r *store.LeaseRequest) { r.Key = "" }), "take lease: empty key"},
			{"with a long key", bad(func(r *store.LeaseRequest) { r.Key = long }),
				`take lease: key of 257 bytes is over the limit of 256: "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…`},
			{"with a key not UTF-8", bad(func(r *store.LeaseRequest) { r.Key = "\xff" }), `take lease: key "\xff" is not UTF-8 without NUL`},
			{"without node", bad(func(r *store.LeaseRequest) { r.Node = "" }), "take lease on groq: empty node"},
			{"with a long node", bad(func(r *store.LeaseRequest) { r.Node = long }),
				`take lease on groq: node of 257 bytes is over the limit of 256: "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…`},
			{"with a NUL in the node", bad(func(r *store.LeaseRequest) { r.Node = "n\x001" }), `take lease on groq: node "n\x001" is not UTF-8 without NUL`},
			{"at the zero time", bad(func(r *store.LeaseRequest) { r.At = time.Time{} }), "take lease on groq: zero time"},
			{"with no TTL", bad(func(r *store.LeaseRequest) { r.TTL = 0 }), "take lease on groq: TTL 0s is out of range: want 1ms to 1h0m0s"},
			{"with a TTL under a millisecond", bad(func(r *store.LeaseRequest) { r.TTL = 999 * time.Microsecond }),
				"take lease on groq: TTL 999µs is out of range: want 1ms to 1h0m0s"},
			{"with a TTL over an hour", bad(func(r *store.LeaseRequest) { r.TTL = time.Hour + time.Millisecond }),
				"take lease on groq: TTL 1h0m0.001s is out of range: want 1ms to 1h0m0s"},
			{"with a negative Want", bad(func(r *store.LeaseRequest) { r.Want.Requests = -1 }), "take lease on groq: Want.Requests -1 is negative"},
			{"with a Want over MaxCost", bad(func(r *store.LeaseRequest) { r.Want.Input = governor.MaxCost + 1 }),
				"take lease on groq: Want.Input 1099511627777 is over the bound of 1099511627776 (governor.MaxCost)"},
			{"with a negative Min", bad(func(r *store.LeaseRequest) { r.Min.Output = -1 }), "take lease on groq: Min.Output -1 is negative"},
			{"with a Min over Want", bad(func(r *store.LeaseRequest) { r.Min.Input = 301 }), "take lease on groq: Min.Input 301 is over Want.Input 300"},
			{"with a weight NaN", bad(func(r *store.LeaseRequest) { r.Weight = math.NaN() }), "take lease on groq: weight NaN is not a finite number"},
			{"with an infinite weight", bad(func(r *store.LeaseRequest) { r.Weight = math.Inf(1) }), "take lease on groq: weight +Inf is not a finite number"},
			{"with a negative weight", bad(func(r *store.LeaseRequest) { r.Weight = -0.5 }), "take lease on groq: weight -0.5 is negative"},
			{"with too many flows", bad(func(r *store.LeaseRequest) { r.Flows = manyFlows(store.MaxLeaseFlows + 1) }),
				"take lease on groq: 1001 flows: at most 1000"},
			{"with an empty flow", bad(func(r *store.LeaseRequest) { r.Flows = map[string]float64{"a": 1, "": 1} }), "take lease on groq: empty flow"},
			{"with a long flow", bad(func(r *store.LeaseRequest) { r.Flows = map[string]float64{long: 1} }),
				`take lease on groq: flow of 257 bytes is over the limit of 256: "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…`},
			{"with a flow not UTF-8", bad(func(r *store.LeaseRequest) { r.Flows = map[string]float64{"a": 1, "\xff": 1} }),
				`take lease on groq: flow "\xff" is not UTF-8 without NUL`},
			{"with a NUL in a flow", bad(func(r *store.LeaseRequest) { r.Flows = map[string]float64{"f\x00": 1} }),
				`take lease on groq: flow "f\x00" is not UTF-8 without NUL`},
			{"with a flow's weight NaN", bad(func(r *store.LeaseRequest) { r.Flows = map[string]float64{"a": 1, "b": math.NaN()} }),
				`take lease on groq: flow "b" has weight NaN: want a finite number ≥ 0`},
			{"with a flow's weight infinite", bad(func(r *store.LeaseRequest) { r.Flows = map[string]float64{"a": math.Inf(1)} }),
				`take lease on groq: flow "a" has weight +Inf: want a finite number ≥ 0`},
			{"with a flow's weight negative", bad(func(r *store.LeaseRequest) { r.Flows = map[string]float64{"a": -1} }),
				`take lease on groq: flow "a" has weight -1: want a finite number ≥ 0`},
			// The first bad flow by name, whatever the map's order.
			{"with several bad flows", bad(func(r *store.LeaseRequest) {
				r.Flows = map[string]float64{"\xff": 1, "z": math.NaN(), "m": -0.5, "a": 1}
			}), `take lease on groq: flow "m" has weight -0.5: want a finite number ≥ 0`},
			{"with a negative limit", bad(func(r *store.LeaseRequest) { r.Limits[governor.TPM] = -1 }), "take lease on groq: limit tpm -1 is negative"},
			{"with a limit over MaxCost", bad(func(r *store.LeaseRequest) { r.Limits[governor.RPD] = governor.MaxCost + 1 }),
				"take lease on groq: limit rpd 1099511627777 is over the bound of 1099511627776 (governor.MaxCost)"},
		} {
			l, err := s.TakeLease(ctx, tc.req)
			if l != (store.Lease{}) || err == nil || err.Error() != tc.want {
				t.Errorf("TakeLease %s = %+v, %v; want the zero Lease, %q", tc.call, l, err, tc.want)
			}
		}
		// Nothing refused was written: no lease, and no node, since n1
		// gets every request, shared with no one: had a refused node, or its
		// flow a, been recorded, n1, waiting on flow a too, would share.
		assertLeaseUse(t, s, "groq", base, governor.Cost{}, governor.Cost{})
		first := leaseRequest("n1", base, cost(10, 0, 0), "rpm=10")
		first.Flows = map[string]float64{"a": 1}
		l := mustTakeLease(t, s, first)
		assertLease(t, l, "n1", cost(10, 0, 0), base, base.Add(ttl))

		longID := l.ID + strings.Repeat("0", store.MaxLeaseIDBytes-len(l.ID)+1)
		for _, tc := range []struct {
			call string
			err  error
			want string
		}{
			{"SettleLease without key", s.SettleLease(ctx, "", l.ID, governor.Cost{}, base, true), "settle lease: empty key"},
			{"SettleLease without ID", s.SettleLease(ctx, "groq", "", governor.Cost{}, base, true), "settle lease on groq: empty lease ID"},
			{"SettleLease with a long ID", s.SettleLease(ctx, "groq", longID, governor.Cost{}, base, true),
				fmt.Sprintf(`settle lease on groq: lease ID of 274 bytes is over the limit of 273: %q…`, longID[:48])},
			{"SettleLease with a negative use", s.SettleLease(ctx, "groq", l.ID, cost(1, 0, -1), base, true),
				"settle lease " + l.ID + " on groq: used.Output -1 is negative"},
			{"SettleLease with a use over MaxCost", s.SettleLease(ctx, "groq", l.ID, cost(governor.MaxCost+1, 0, 0), base, true),
				"settle lease " + l.ID + " on groq: used.Requests 1099511627777 is over the bound of 1099511627776 (governor.MaxCost)"},
			{"SettleLease at the zero time", s.SettleLease(ctx, "groq", l.ID, governor.Cost{}, time.Time{}, true), "settle lease " + l.ID + " on groq: zero time"},
			{"LeaseUse without key", third(s.LeaseUse(ctx, "", base)), "read lease use: empty key"},
			{"LeaseUse at the zero time", third(s.LeaseUse(ctx, "groq", time.Time{})), "read lease use of groq: zero time"},
			{"PruneLeases without key", second(s.PruneLeases(ctx, "", base)), "prune leases: empty key"},
		} {
			if tc.err == nil || tc.err.Error() != tc.want {
				t.Errorf("%s = %v, want %q", tc.call, tc.err, tc.want)
			}
		}
		// The lease is as it was: all its requests, until its end.
		assertLeaseUse(t, s, "groq", base.Add(ttl+time.Minute-time.Millisecond), cost(10, 0, 0), cost(10, 0, 0))
	})

	t.Run("LeaseConcurrentStoresStayWithinLimits", func(t *testing.T) {
		t.Parallel()
		openDB := newDB(t)
		const stores, workers, rounds = 4, 4, 25
		const rpm, tpm = 50, 10_000
		handles := make([]store.Store, stores)
		for i := range handles {
			handles[i] = openOn(t, openDB)
		}
		// Round after round, every goroutine asks at the round's time at
		// once: they contend for the same room, on every store.
		taken := make([][]store.Lease, stores*workers)
		rs := make([]*rand.Rand, stores*workers)
		for i := range rs {
			rs[i] = rand.New(rand.NewPCG(uint64(i), 7))
		}
		for k := range rounds {
			at := base.Add(time.Duration(k) * 5 * time.Second)
			together(t, stores*workers, func(i int) error {
				want := cost(1+rs[i].Int64N(4), 100+rs[i].Int64N(1400), rs[i].Int64N(800))
				req := leaseRequest(fmt.Sprintf("s%d-w%d", i%stores, i/stores), at, want, fmt.Sprintf("rpm=%d,tpm=%d", rpm, tpm))
				req.Min = cost(1, 100, 0)
				if i%2 == 0 {
					// Some give the flows they wait on, shared among
					// them, others only their weight.
					req.Flows = map[string]float64{fmt.Sprintf("f%d", i%3): 1, fmt.Sprintf("f%d", (i+k)%5): 0.5}
					req.Weight = 1.5
				}
				l, err := handles[i%stores].TakeLease(ctx, req)
				if err != nil {
					return fmt.Errorf("round %d: %w", k, err)
				}
				if l != (store.Lease{}) {
					taken[i] = append(taken[i], l)
				}
				return nil
			})
		}
		var all []store.Lease
		ids := map[string]bool{}
		var granted []int // the stores whose leases were granted
		for i, ls := range taken {
			for _, l := range ls {
				if ids[l.ID] {
					t.Fatalf("lease ID %s granted twice", l.ID)
				}
				ids[l.ID] = true
			}
			if len(ls) > 0 && !slices.Contains(granted, i%stores) {
				granted = append(granted, i%stores)
			}
			all = append(all, ls...)
		}
		if len(granted) < 2 {
			t.Fatalf("leases granted to stores %v only, want to more than one of %d", granted, stores)
		}
		// Whatever the order the store took them in, the leases that
		// started by any time and end less than a minute before it stay
		// within the limits. Their sum only grows when a lease starts.
		var peak governor.Cost
		for _, at := range all {
			var sum governor.Cost
			for _, l := range all {
				if !l.At.After(at.At) && l.Until.After(at.At.Add(-time.Minute)) {
					sum = add(sum, l.Cost)
				}
			}
			if sum.Requests > rpm || sum.Tokens() > tpm {
				t.Fatalf("the leases in the minute up to %s sum to %+v: over rpm=%d or tpm=%d", showTime(at.At), sum, rpm, tpm)
			}
			peak = cost(max(peak.Requests, sum.Requests), 0, max(peak.Tokens(), sum.Tokens()))
		}
		// And the store sums what was granted.
		end := base.Add(rounds * 5 * time.Second)
		var want governor.Cost
		for _, l := range all {
			if l.Until.After(end.Add(-time.Minute)) {
				want = add(want, l.Cost)
			}
		}
		if minute, _ := mustLeaseUse(t, handles[0], "groq", end); minute != want {
			t.Fatalf("LeaseUse at the end = %+v, want the sum of the leases granted that count, %+v", minute, want)
		}
		t.Logf("%d leases granted of %d asked, to stores %v; at most %d requests and %d tokens in a minute", len(all), stores*workers*rounds, granted, peak.Requests, peak.Tokens())
	})

	exerciseLeaseMoney(t, newDB)
}

// claimMore has req's node ask, at its time and with its key, weight,
// flows and limits, for more than any limit allows: it is granted nothing,
// and to the other nodes it claims at least its share of every limit from
// now on (until it asks again). req.Want is ignored.
func claimMore(t *testing.T, s store.Store, req store.LeaseRequest) {
	t.Helper()
	all := governor.Cost{Requests: governor.MaxCost, Input: governor.MaxCost, Output: governor.MaxCost}
	req.Want, req.Min = all, all
	if l := mustTakeLease(t, s, req); l != (store.Lease{}) {
		t.Fatalf("TakeLease of %s for more than any limit = %+v, want none", req.Node, l)
	}
}

// busy is what other nodes of weight w claim when they ask for at least
// their share of every limit.
func busy(w float64) []store.Claim {
	all := governor.Cost{Requests: governor.MaxCost, Input: governor.MaxCost, Output: governor.MaxCost}
	return []store.Claim{{Weight: w, Want: all}}
}

// leaseCalls calls every method on leases once, with good input, and
// yields what each call does, as its error names it, with the error.
func leaseCalls(ctx context.Context, s store.Store) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for _, c := range []struct {
			op  string
			err error
		}{
			{"take lease on groq", second(s.TakeLease(ctx, leaseRequest("n1", base, cost(1, 1, 1), "rpm=10")))},
			{"settle lease n1/0000000000000000 on groq", s.SettleLease(ctx, "groq", "n1/0000000000000000", cost(1, 1, 1), base, true)},
			{"read lease use of groq", third(s.LeaseUse(ctx, "groq", base))},
			{"prune leases of groq", second(s.PruneLeases(ctx, "groq", base))},
		} {
			if !yield(c.op, c.err) {
				return
			}
		}
	}
}

func third[A, B any](_ A, _ B, err error) error { return err }

// manyFlows returns n flows of weight 1.
func manyFlows(n int) map[string]float64 {
	flows := make(map[string]float64, n)
	for i := range n {
		flows[fmt.Sprintf("flow %d", i)] = 1
	}
	return flows
}

func cost(requests, input, output int64) governor.Cost {
	return governor.Cost{Requests: requests, Input: input, Output: output}
}

func add(a, b governor.Cost) governor.Cost {
	return cost(a.Requests+b.Requests, a.Input+b.Input, a.Output+b.Output)
}

// leaseRequest is node's request on key groq at at for want, with no Min,
// a weight of 1, a TTL of 10 s and limits as governor.Limits.UnmarshalText reads them.
func leaseRequest(node string, at time.Time, want governor.Cost, limits string) store.LeaseRequest {
	ls, err := govtext.Limits(limits)
	if err != nil {
		panic(err)
	}
	return store.LeaseRequest{Key: "groq", Node: node, At: at, TTL: 10 * time.Second, Want: want, Weight: 1, Limits: ls}
}

func mustTakeLease(t *testing.T, s store.Store, req store.LeaseRequest) store.Lease {
	t.Helper()
	l, err := s.TakeLease(context.Background(), req)
	if err != nil {
		t.Fatalf("TakeLease(%s of %s at %s, want %+v): %v", req.Key, req.Node, showTime(req.At), req.Want, err)
	}
	return l
}

func mustSettleLease(t *testing.T, s store.Store, key, id string, used governor.Cost, last time.Time, final bool) {
	t.Helper()
	if err := s.SettleLease(context.Background(), key, id, used, last, final); err != nil {
		t.Fatalf("SettleLease(%s, %s): %v", key, id, err)
	}
}

func mustLeaseUse(t *testing.T, s store.Store, key string, at time.Time) (minute, day governor.Cost) {
	t.Helper()
	minute, day, err := s.LeaseUse(context.Background(), key, at)
	if err != nil {
		t.Fatalf("LeaseUse(%s, %s): %v", key, showTime(at), err)
	}
	return minute, day
}

func assertLeaseUse(t *testing.T, s store.Store, key string, at time.Time, minute, day governor.Cost) {
	t.Helper()
	if gotMinute, gotDay := mustLeaseUse(t, s, key, at); gotMinute != minute || gotDay != day {
		t.Fatalf("LeaseUse(%s, %s) = minute %+v, day %+v; want %+v, %+v", key, showTime(at), gotMinute, gotDay, minute, day)
	}
}

// assertLease checks l, with times compared at the precision the store
// promises; its ID is node's.
func assertLease(t *testing.T, l store.Lease, node string, c governor.Cost, at, until time.Time) {
	t.Helper()
	at, until = utcMillis(at), utcMillis(until)
	if l.Node != node || l.Cost != c || !l.At.Equal(at) || l.At.Location() != time.UTC || !l.Until.Equal(until) || l.Until.Location() != time.UTC {
		t.Fatalf("lease = %+v, want node %s, cost %+v, from %s until %s in UTC", l, node, c, showTime(at), showTime(until))
	}
	if !strings.HasPrefix(l.ID, node+"/") || len(l.ID) > store.MaxLeaseIDBytes {
		t.Fatalf("lease ID %q: want %s/ and a suffix, at most %d bytes", l.ID, node, store.MaxLeaseIDBytes)
	}
}

// leaseRows counts key's rows of leases and, of them, the folds, through
// the store's handle.
func leaseRows(t *testing.T, s store.Store, key string) (rows, folds int64) {
	t.Helper()
	const q = `SELECT count(*), coalesce(sum(CASE WHEN state = 2 THEN 1 ELSE 0 END), 0) FROM sluice_leases WHERE key = $1`
	if err := scanRow(mustHandle(t, s), q, []any{key}, &rows, &folds); err != nil {
		t.Fatalf("count the leases of %s: %v", key, err)
	}
	return rows, folds
}

// scanRow runs q, which returns one row, on the store's database through
// its handle, and scans the row into dest.
func scanRow(h store.Handle, q string, args []any, dest ...any) error {
	if h.SQLite != nil {
		return h.SQLite.QueryRowContext(context.Background(), q, args...).Scan(dest...)
	}
	return h.Postgres.QueryRow(context.Background(), q, args...).Scan(dest...)
}

// foldIDs returns the IDs of key's folds, through the store's handle.
func foldIDs(t *testing.T, s store.Store, key string) []string {
	t.Helper()
	const q = `SELECT id FROM sluice_leases WHERE key = $1 AND state = 2 ORDER BY id`
	ctx := context.Background()
	h := mustHandle(t, s)
	var ids []string
	scan := func(next func() bool, sc func(...any) error, errf func() error) {
		for next() {
			var id string
			if err := sc(&id); err != nil {
				t.Fatalf("read the folds of %s: %v", key, err)
			}
			ids = append(ids, id)
		}
		if err := errf(); err != nil {
			t.Fatalf("read the folds of %s: %v", key, err)
		}
	}
	if h.SQLite != nil {
		rows, err := h.SQLite.QueryContext(ctx, q, key)
		if err != nil {
			t.Fatalf("read the folds of %s: %v", key, err)
		}
		defer rows.Close()
		scan(rows.Next, rows.Scan, rows.Err)
	} else {
		rows, err := h.Postgres.Query(ctx, q, key)
		if err != nil {
			t.Fatalf("read the folds of %s: %v", key, err)
		}
		defer rows.Close()
		scan(rows.Next, rows.Scan, rows.Err)
	}
	return ids
}

func sub(a, b governor.Cost) governor.Cost {
	return cost(a.Requests-b.Requests, a.Input-b.Input, a.Output-b.Output)
}

// atLeast reports whether every part of a is at least b's.
func atLeast(a, b governor.Cost) bool {
	return a.Requests >= b.Requests && a.Input >= b.Input && a.Output >= b.Output
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
