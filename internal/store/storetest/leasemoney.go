package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseLeaseMoney checks money in leases, for a key with a budget that
// several processes share: a lease grants money within the budgets (MPD
// over a day's window, MPM over a month's), is settled down to what its
// calls cost, keeps its money when folded, and several stores taking
// leases at once never grant more than a budget; a key without a budget
// grants the money asked, and one without a price none, as before.
func exerciseLeaseMoney(t *testing.T, newDB NewDatabase) {
	ctx := context.Background()
	open := func(t *testing.T) store.Store {
		t.Helper()
		return openOn(t, newDB(t))
	}
	// budget is node's request at at for want (money, and a request) on a
	// key of rpm=1000 with the budgets day and month (0: none).
	budget := func(node string, at time.Time, money, day, month int64) store.LeaseRequest {
		req := leaseRequest(node, at, priced(1, 10, 10, money), "rpm=1000")
		req.Limits[governor.MPD], req.Limits[governor.MPM] = day, month
		return req
	}

	t.Run("LeaseMoneyWithinTheDayBudget", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// Alone, n1 gets the money it asks for.
		first := mustTakeLease(t, s, budget("n1", base, 600, 1000, 0))
		assertLease(t, first, "n1", priced(1, 10, 10, 600), base, base.Add(10*time.Second))
		assertLeaseUse(t, s, "groq", base, priced(1, 10, 10, 0), priced(1, 10, 10, 600))
		// n2 gets what is left of the day's budget, though it asks for
		// more: its share is half, the room 400.
		second := mustTakeLease(t, s, budget("n2", base.Add(time.Second), 600, 1000, 0))
		assertLease(t, second, "n2", priced(1, 10, 10, 400), base.Add(time.Second), base.Add(11*time.Second))
		// Spent: a call of the least money waits, though the other limits
		// have room.
		req := budget("n3", base.Add(2*time.Second), 600, 1000, 0)
		req.Min = priced(1, 10, 10, 1)
		if l := mustTakeLease(t, s, req); l != (store.Lease{}) {
			t.Fatalf("TakeLease with the day's budget spent = %+v, want none", l)
		}
		// A call asking no money still goes: the budget bounds money only.
		req.Want, req.Min = priced(1, 10, 10, 0), priced(1, 10, 10, 0)
		assertLease(t, mustTakeLease(t, s, req), "n3", priced(1, 10, 10, 0), req.At, req.At.Add(10*time.Second))
		// n1's calls cost 150 of the 600 it was granted: settled, the rest
		// is the budget's again.
		mustSettleLease(t, s, "groq", first.ID, priced(1, 10, 10, 150), base.Add(time.Second), true)
		_, day := mustLeaseUse(t, s, "groq", base.Add(3*time.Second))
		if day.Money != 550 {
			t.Fatalf("the day's money after n1's lease was settled at 150 = %d, want 550", day.Money)
		}
		// A settle never raises a lease's money.
		mustSettleLease(t, s, "groq", second.ID, priced(1, 10, 10, 900), base.Add(time.Second), true)
		if _, day := mustLeaseUse(t, s, "groq", base.Add(3*time.Second)); day.Money != 550 {
			t.Fatalf("the day's money after a settle above the grant = %d, want 550", day.Money)
		}
		// n3 may take 450, but n1 and n2 still ask: its share is a third.
		req = budget("n3", base.Add(3*time.Second), 600, 1000, 0)
		assertLease(t, mustTakeLease(t, s, req), "n3", priced(1, 10, 10, 333), req.At, req.At.Add(10*time.Second))
		// A day after the leases' ends, the day's budget is whole again.
		at := base.Add(24*time.Hour + 15*time.Second)
		assertLease(t, mustTakeLease(t, s, budget("n1", at, 1000, 1000, 0)), "n1", priced(1, 10, 10, 1000), at, at.Add(10*time.Second))
	})

	t.Run("LeaseMoneyWithinTheMonthBudget", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const month = 1000
		l := mustTakeLease(t, s, budget("n1", base, 700, 0, month))
		assertLease(t, l, "n1", priced(1, 10, 10, 700), base, base.Add(10*time.Second))
		mustSettleLease(t, s, "groq", l.ID, priced(1, 10, 10, 600), base.Add(time.Second), true)
		// Two days on, after a minute's fold, the month still counts the
		// 600; a day's budget alone would not.
		at := base.Add(48 * time.Hour)
		assertLease(t, mustTakeLease(t, s, budget("n2", at, 700, 0, month)), "n2", priced(1, 10, 10, 400), at, at.Add(10*time.Second))
		if _, folds := leaseRows(t, s, "groq"); folds != 1 {
			t.Fatalf("%d folds, want n1's settled lease folded", folds)
		}
		// A day's budget counts n2's 400 of this day, not n1's 600 of two
		// days ago.
		at = at.Add(time.Minute)
		assertLease(t, mustTakeLease(t, s, budget("n3", at, 300, 1000, 0)), "n3", priced(1, 10, 10, 300), at, at.Add(10*time.Second))
		// Thirty days after n1's lease ended, its money no longer counts;
		// n2's and n3's still do in the month.
		at = base.Add(governor.Month + time.Second)
		assertLease(t, mustTakeLease(t, s, budget("n1", at, 1000, 0, month)), "n1", priced(1, 10, 10, 300), at, at.Add(10*time.Second))
		// Under both budgets, the tighter binds: the day's room is 1000,
		// the month's none.
		req := budget("n4", at.Add(time.Second), 1, 1000, month)
		req.Min = req.Want
		if l := mustTakeLease(t, s, req); l != (store.Lease{}) {
			t.Fatalf("TakeLease with the month's budget spent = %+v, want none", l)
		}
	})

	t.Run("LeaseMoneyFoldedKeepsItsSum", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var want int64
		for i := range 5 {
			at := base.Add(time.Duration(i) * time.Second)
			l := mustTakeLease(t, s, budget("n1", at, 100, 0, 1_000_000))
			used := int64(10 * (i + 1))
			mustSettleLease(t, s, "groq", l.ID, priced(1, 10, 10, used), at, true)
			want += used
		}
		// A minute on, n2's ask folds them into one row, whose money is
		// their sum; it counts in the day and the month as they did.
		at := base.Add(2 * time.Minute)
		if l := mustTakeLease(t, s, leaseRequest("n2", at, governor.Cost{}, "rpm=1000")); l != (store.Lease{}) {
			t.Fatalf("TakeLease for nothing = %+v, want none", l)
		}
		if rows, folds := leaseRows(t, s, "groq"); rows != 1 || folds != 1 {
			t.Fatalf("%d rows of leases, %d folds; want n1's five folded into one", rows, folds)
		}
		if _, day := mustLeaseUse(t, s, "groq", at); day.Money != want {
			t.Fatalf("the day's money after the fold = %d, want the leases' %d", day.Money, want)
		}
		at = base.Add(10 * 24 * time.Hour)
		req := budget("n2", at, 1_000_000, 0, 1_000_000)
		assertLease(t, mustTakeLease(t, s, req), "n2", priced(1, 10, 10, 1_000_000-want), at, at.Add(10*time.Second))
	})

	t.Run("LeaseMoneyWithoutABudget", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// A priced key without a budget: the money asked for, whatever it
		// is, with the other limits' bounds as before.
		req := leaseRequest("n1", base, priced(20, 100, 100, governor.MaxCost), "rpm=10")
		assertLease(t, mustTakeLease(t, s, req), "n1", priced(10, 100, 100, governor.MaxCost), base, base.Add(10*time.Second))
		// A key without a price: no money, as before money was.
		req = leaseRequest("n1", base, cost(20, 100, 100), "rpm=20")
		assertLease(t, mustTakeLease(t, s, req), "n1", cost(10, 100, 100), base, base.Add(10*time.Second))
		assertLeaseUse(t, s, "groq", base, cost(20, 200, 200), priced(20, 200, 200, governor.MaxCost))
	})

	t.Run("LeaseMoneyRefusesBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, tc := range []struct {
			name string
			req  func(*store.LeaseRequest)
			want string
		}{
			{"a negative Want.Money", func(r *store.LeaseRequest) { r.Want.Money = -1 }, "take lease on groq: Want.Money -1 is negative"},
			{"a Want.Money over MaxCost", func(r *store.LeaseRequest) { r.Want.Money = governor.MaxCost + 1 },
				"take lease on groq: Want.Money 1099511627777 is over the bound of 1099511627776 (governor.MaxCost)"},
			{"a Min.Money over Want.Money", func(r *store.LeaseRequest) { r.Min.Money = 601 }, "take lease on groq: Min.Money 601 is over Want.Money 600"},
			{"a budget over MaxBudgetLimit", func(r *store.LeaseRequest) { r.Limits[governor.MPM] = store.MaxBudgetLimit + 1 },
				fmt.Sprintf("take lease on groq: limit mpm %d is over the bound of %d (store.MaxBudgetLimit)", store.MaxBudgetLimit+1, store.MaxBudgetLimit)},
		} {
			req := budget("n1", base, 600, 1000, 0)
			tc.req(&req)
			if _, err := s.TakeLease(ctx, req); err == nil || err.Error() != tc.want {
				t.Errorf("TakeLease with %s: error %v, want %q", tc.name, err, tc.want)
			}
		}
		l := mustTakeLease(t, s, budget("n1", base, 600, 1000, 0))
		if err, want := s.SettleLease(ctx, "groq", l.ID, priced(1, 0, 0, -1), base, true), "settle lease "+l.ID+" on groq: used.Money -1 is negative"; err == nil || err.Error() != want {
			t.Errorf("SettleLease with a negative money: error %v, want %q", err, want)
		}
		// The largest budget a governor has is taken, beside a money of
		// MaxCost.
		req := budget("n2", base, governor.MaxCost, store.MaxBudgetLimit, store.MaxBudgetLimit)
		assertLease(t, mustTakeLease(t, s, req), "n2", priced(1, 10, 10, governor.MaxCost), base, base.Add(10*time.Second))
	})

	t.Run("LeaseMoneyConcurrentStoresStayWithinTheBudget", func(t *testing.T) {
		t.Parallel()
		openDB := newDB(t)
		const stores, workers, rounds = 4, 4, 20
		const day = 50_000
		handles := make([]store.Store, stores)
		for i := range handles {
			handles[i] = openOn(t, openDB)
		}
		taken := make([][]store.Lease, stores*workers)
		rs := make([]*rand.Rand, stores*workers)
		for i := range rs {
			rs[i] = rand.New(rand.NewPCG(uint64(i), 11))
		}
		// Every goroutine asks at the round's time at once, for a few
		// calls' worst-case money; some of the leases are settled lower.
		for k := range rounds {
			at := base.Add(time.Duration(k) * time.Minute)
			together(t, stores*workers, func(i int) error {
				money := 100 + rs[i].Int64N(1500)
				req := budget(fmt.Sprintf("s%d-w%d", i%stores, i/stores), at, money, day, 0)
				req.Min = priced(1, 10, 10, 100)
				h := handles[i%stores]
				l, err := h.TakeLease(ctx, req)
				if err != nil {
					return fmt.Errorf("round %d: %w", k, err)
				}
				if l == (store.Lease{}) {
					return nil
				}
				if rs[i].IntN(3) == 0 {
					l.Cost.Money /= 2
					if err := h.SettleLease(ctx, "groq", l.ID, l.Cost, at, true); err != nil {
						return fmt.Errorf("round %d: %w", k, err)
					}
				}
				taken[i] = append(taken[i], l)
				return nil
			})
		}
		var sum int64
		n := 0
		for _, ls := range taken {
			for _, l := range ls {
				sum += l.Cost.Money
				n++
			}
		}
		if sum > day {
			t.Fatalf("the leases of all stores hold %d of money within a day, over the budget of %d", sum, day)
		}
		if sum < day*9/10 {
			t.Fatalf("the leases of all stores hold %d of money, want near the budget of %d: the budget goes unspent", sum, day)
		}
		if _, d := mustLeaseUse(t, handles[0], "groq", base.Add(rounds*time.Minute)); d.Money != sum {
			t.Fatalf("LeaseUse's money of the day = %d, want the leases' %d", d.Money, sum)
		}
		t.Logf("%d leases hold %d of the day's %d", n, sum, int64(day))
	})
}

// priced is a cost with money.
func priced(requests, input, output, money int64) governor.Cost {
	return governor.Cost{Requests: requests, Input: input, Output: output, Money: money}
}
