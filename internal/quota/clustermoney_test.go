package quota_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// moneyPrice prices the budget tests' calls: a call reserved at 60 tokens
// in and 40 out costs 140,000 billionths at worst, and 100,000 settled at
// 20 out.
var moneyPrice = governor.Price{Input: 1, Output: 2}

// Three processes share one priced key with a budget per day, held in
// aggregate by the money their leases carry (see clusterSim): flow a's
// calls wait on one node, flow b's on the two others, and one node dies
// midway. On both databases, however the calls land, the money the nodes
// admit never exceeds the budget — each call's worst case, on top of what
// the calls before it cost, fits — the budget, not the requests per
// minute, is what stops them, and most of it is spent.
func TestClusterHoldsADayBudgetInAggregate(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const budget = 200 * 100_000 // 200 calls as settled, 0.02 of the unit
		limits := governor.Limits{governor.RPM: 120, governor.TPM: 12_000}
		limits[governor.MPD] = budget
		sim := clusterSim{
			limits: limits, price: moneyPrice, dayBurst: -1,
			reserve: governor.Cost{Requests: 1, Input: 60, Output: 40}, used: governor.Cost{Input: 60, Output: 20},
			ttl: 20 * time.Second, step: 500 * time.Millisecond, run: 3 * time.Minute,
			nodes: []simNode{{"n1", []string{"a", "a"}}, {"n2", []string{"b", "b"}}, {"n3", []string{"b", "b"}}},
			kill:  2,
		}
		calls, end := sim.simulate(t, url, time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC))
		if len(calls) == 0 {
			t.Fatal("no call admitted")
		}
		if calls[0].reserved.Money != 140_000 || calls[0].cost.Money != 100_000 {
			t.Fatalf("a call reserved %+v and settled %+v; want 140,000 of money at worst, 100,000 spent", calls[0].reserved, calls[0].cost)
		}
		// Each call, admitted at its worst case, fits beside what every
		// call admitted before it cost (at least what it settled at).
		var spent, worst int64
		for i, c := range calls {
			before := int64(0)
			for _, p := range calls[:i] {
				if p.at.Before(c.at) {
					before += p.cost.Money
				}
			}
			if before+c.reserved.Money > budget {
				t.Fatalf("call %d (%s on %s at %s) admitted at a worst case of %d with %d spent before it: over the budget of %d",
					i, c.flow, c.node, c.at.Format(time.TimeOnly), c.reserved.Money, before, budget)
			}
			worst = max(worst, before+c.reserved.Money)
			spent += c.cost.Money
		}
		if spent > budget {
			t.Fatalf("the nodes spent %d in the day, over the budget of %d", spent, budget)
		}
		// The budget binds: 200 calls of the 360 the rpm would let by, and
		// what is left of it is less than a few calls' worst case (the
		// dead node's last lease holds some until it ages out).
		if len(calls) >= 300 || spent < budget*85/100 {
			t.Errorf("%d calls spent %d of the budget %d: want the budget, not the rpm, to stop them, most of it spent", len(calls), spent, budget)
		}
		perNode := map[string]int{}
		for _, c := range calls {
			perNode[c.node]++
		}
		t.Logf("%d calls %v spent %d of the budget %d; at most %d counted at an admission", len(calls), perNode, spent, budget, worst)

		// The store agrees: the leases of the day hold at most the budget.
		st := testenv.OpenStore(t, url)
		if _, day, err := st.LeaseUse(context.Background(), "groq", end); err != nil || day.Money > budget || day.Money < spent {
			t.Errorf("the store's leases of the day hold %d of money (%v); want the %d spent, at most the budget %d", day.Money, err, spent, budget)
		}
	})
}

// A node of a priced key with a budget per day spends part of it, stops
// and starts again under its name; the spend is the cluster's still: a
// node that was running all along, whose own governor saw none of it,
// admits only what is left of the budget, and the restarted node, which
// restored its charges, none after that. On both databases; the test
// turns the grant loops itself, on a clock it moves.
func TestClusterBudgetSurvivesARestart(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clk := &stepClock{now: time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)}
		call := governor.Cost{Requests: 1, Input: 60, Output: 40}
		const worst = 140_000 // call's money, settled as reserved
		limits := governor.Limits{governor.RPM: 1000}
		limits[governor.MPD] = 10 * worst
		open := func(node string) *quota.Ledger {
			t.Helper()
			l, err := quota.Open(ctx, testenv.OpenStore(t, url), governor.Config{Key: "groq", Limits: limits, Price: moneyPrice,
				SettleOutput: true, Now: clk.Now, After: func(time.Duration) <-chan time.Time { return nil }, DayBurst: -1},
				quota.Config{Now: clk.Now, Cluster: &quota.Cluster{Node: node, LeaseTTL: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		// admit reserves n calls on l at the clock's time and turns the
		// grant loops of all until nothing more is admitted; it returns
		// the calls.
		var ledgers []*quota.Ledger
		admit := func(l *quota.Ledger, n int) []*governor.Reservation {
			t.Helper()
			var rs []*governor.Reservation
			for range n {
				r, err := l.Reserve(clk.Now(), "a", call)
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
			}
			for {
				before := admitted(rs)
				for _, o := range ledgers {
					o.LeaseOnce(ctx)
					o.Advance(clk.Now())
				}
				if admitted(rs) == before {
					return rs
				}
			}
		}
		settle := func(rs []*governor.Reservation) {
			for _, r := range rs {
				if r.Admitted() {
					r.Settle(clk.Now(), governor.Cost{Input: 60, Output: 40})
				}
			}
		}
		n1, n2 := open("n1"), open("n2")
		ledgers = []*quota.Ledger{n1, n2}
		first := admit(n1, 6)
		if got := admitted(first); got != 6 {
			t.Fatalf("n1 admitted %d of 6 calls with the budget whole, want all", got)
		}
		settle(first)
		// n1 stops: its lease ends, written down at what its calls cost,
		// and its charges are flushed.
		clk.set(clk.Now().Add(time.Second))
		n1.Start(ctx)
		if err := n1.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// It starts again.
		clk.set(clk.Now().Add(time.Second))
		again := open("n1")
		ledgers = []*quota.Ledger{again, n2}
		if used := again.Stats(clk.Now()).Limits[governor.MPD].Used; used != 6*worst {
			t.Fatalf("the restarted node counts %d of the day's money, want the %d its calls cost before", used, 6*worst)
		}
		// n2, which saw none of it, has only what is left: four calls.
		second := admit(n2, 6)
		if got := admitted(second); got != 4 {
			t.Fatalf("n2 admitted %d of 6 calls with 6 of the budget's 10 spent by n1, want 4", got)
		}
		for _, r := range second {
			if !r.Admitted() {
				if b := n2.Blocker(clk.Now(), r); b.Kind != "lease" {
					t.Errorf("n2's call waits on %+v, want a lease (its own view of the budget is not spent)", b)
				}
			}
		}
		settle(second)
		// And the restarted node none.
		if got := admitted(admit(again, 2)); got != 0 {
			t.Fatalf("the restarted node admitted %d calls with the budget spent, want none", got)
		}
		st := testenv.OpenStore(t, url)
		if _, day, err := st.LeaseUse(ctx, "groq", clk.Now()); err != nil || day.Money != 10*worst {
			t.Fatalf("the store's leases of the day hold %d of money (%v), want the budget, %d", day.Money, err, 10*worst)
		}
		stopAll(t, ledgers)
	})
}

// A budget larger than a lease's money (governor.MaxCost, about 1,099 of
// the unit) is taken by the store, and calls whose money adds up past what
// one lease holds are asked for a lease at a time, each lease no larger in
// requests than its calls: all of them go, within the requests per minute.
func TestClusterBudgetLargerThanALease(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clk := &stepClock{now: time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)}
		// $900 a call at worst, 60 calls waiting: $54,000, past the
		// $1,099 of money a lease holds; a budget of a million a month.
		price := governor.Price{Input: 1000}
		budget := governor.Budget{Month: 1_000_000}
		l, err := quota.Open(ctx, testenv.OpenStore(t, url), governor.Config{Key: "groq", Limits: budget.Limits(governor.Limits{governor.RPM: 100}),
			Price: price, Now: clk.Now, After: func(time.Duration) <-chan time.Time { return nil }, DayBurst: -1},
			quota.Config{Now: clk.Now, Cluster: &quota.Cluster{Node: "n1", LeaseTTL: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		var rs []*governor.Reservation
		for i := range 60 {
			r, err := l.Reserve(clk.Now(), fmt.Sprint("f", i%10), governor.Cost{Requests: 1, Input: 900_000})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		l.LeaseOnce(ctx)
		l.Advance(clk.Now())
		if got := admitted(rs); got != 1 {
			t.Fatalf("%d calls admitted on the first lease, want one: a lease holds at most governor.MaxCost of money", got)
		}
		for range 59 {
			l.LeaseOnce(ctx)
			l.Advance(clk.Now())
		}
		if got := admitted(rs); got != len(rs) {
			t.Fatalf("%d of %d calls admitted, want all: the budget has room", got, len(rs))
		}
	})
}

// admitted counts the admitted of rs.
func admitted(rs []*governor.Reservation) int {
	return len(slices.DeleteFunc(slices.Clone(rs), func(r *governor.Reservation) bool { return !r.Admitted() }))
}

// Calls come to two nodes on a budget at one pace: they share it by
// halves, and as their calls settle for less than their worst case, what
// is left of each half comes to less than a call while the budget still
// holds one. A node
// below its share then takes a call past it, so the budget is spent to
// less than a call's worst case instead of the rest waiting a day for
// the window to slide. On both databases, on a clock the test moves.
func TestClusterBudgetSpentToTheLastCall(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clk := &stepClock{now: time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)}
		call := governor.Cost{Requests: 1, Input: 60, Output: 40}
		const worst, used = 140_000, 100_000 // a call's money, at worst and settled at 20 out
		const budget = 10 * worst
		limits := governor.Limits{governor.RPM: 1000}
		limits[governor.MPD] = budget
		var nodes []*quota.Ledger
		var waiting [][]*governor.Reservation
		for _, name := range []string{"n1", "n2"} {
			l, err := quota.Open(ctx, testenv.OpenStore(t, url), governor.Config{Key: "groq", Limits: limits, Price: moneyPrice,
				SettleOutput: true, Now: clk.Now, After: func(time.Duration) <-chan time.Time { return nil }, DayBurst: -1},
				quota.Config{Now: clk.Now, Cluster: &quota.Cluster{Node: name, LeaseTTL: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			nodes, waiting = append(nodes, l), append(waiting, nil)
		}
		// Round after round, a call comes to each node, both grant loops
		// turn, what they admit is settled, and the clock moves past the
		// leases' end, until three rounds admit nothing.
		var spent int64
		for idle := 0; idle < 3; {
			admittedNow := 0
			for i, l := range nodes {
				r, err := l.Reserve(clk.Now(), "a", call)
				if err != nil {
					t.Fatal(err)
				}
				waiting[i] = append(waiting[i], r)
			}
			for i, l := range nodes {
				l.LeaseOnce(ctx)
				l.Advance(clk.Now())
				for _, r := range waiting[i] {
					if r.Admitted() && r.Cost().Money == worst {
						r.Settle(clk.Now(), governor.Cost{Input: 60, Output: 20})
						spent += r.Cost().Money
						admittedNow++
					}
				}
			}
			if admittedNow == 0 {
				idle++
			}
			clk.set(clk.Now().Add(2 * time.Second))
		}
		if spent > budget || budget-spent >= worst {
			t.Fatalf("the nodes spent %d of the budget %d, want within a call's worst case (%d) of it", spent, budget, worst)
		}
		t.Logf("spent %d of %d; n1 %d calls, n2 %d", spent, budget, admitted(waiting[0]), admitted(waiting[1]))
	})
}

// Two processes share a key whose flow "a" has a budget of its own, of 10
// calls' worst case a day; flow "b" has none. Each node's own governor
// sees only its calls, so without leases of the flow's budget each would
// spend it whole. Held by the store, the nodes together admit 10 of a's
// calls and no more — the calls past it wait on a lease, naming it — while
// b's calls go on both nodes; the store's leases of the budget hold what
// a's calls cost. A node that stops and starts again under its name finds
// the budget spent. On both databases; the test turns the grant loops
// itself, on a clock it moves.
func TestClusterHoldsAFlowsBudgetInAggregate(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clk := &stepClock{now: time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)}
		call := governor.Cost{Requests: 1, Input: 60, Output: 40}
		const worst = 140_000 // call's money, settled as reserved
		flows := []governor.FlowConfig{{Name: "a", Budget: governor.Budget{Day: 10 * worst / float64(governor.Nano)}}, {Name: "b"}}
		open := func(node string) *quota.Ledger {
			t.Helper()
			l, err := quota.Open(ctx, testenv.OpenStore(t, url), governor.Config{Key: "groq", Limits: governor.Limits{governor.RPM: 1000},
				Price: moneyPrice, Flows: flows, SettleOutput: true, Now: clk.Now, After: func(time.Duration) <-chan time.Time { return nil }, DayBurst: -1},
				quota.Config{Now: clk.Now, Cluster: &quota.Cluster{Node: node, LeaseTTL: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		n1, n2 := open("n1"), open("n2")
		ledgers := []*quota.Ledger{n1, n2}
		var all []*governor.Reservation
		reserve := func(l *quota.Ledger, flow string, n int) []*governor.Reservation {
			t.Helper()
			var rs []*governor.Reservation
			for range n {
				r, err := l.Reserve(clk.Now(), flow, call)
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
			}
			all = append(all, rs...)
			return rs
		}
		// turn runs the grant loops and admissions until nothing more is
		// admitted, then settles what was.
		turn := func() {
			for {
				before := admitted(all)
				for _, l := range ledgers {
					l.LeaseOnce(ctx)
					l.Advance(clk.Now())
				}
				if admitted(all) == before {
					break
				}
			}
			for _, r := range all {
				if r.Admitted() {
					r.Settle(clk.Now(), governor.Cost{Input: 60, Output: 40})
				}
			}
		}
		a1, a2 := reserve(n1, "a", 8), reserve(n2, "a", 8)
		b1, b2 := reserve(n1, "b", 8), reserve(n2, "b", 8)
		turn()
		if got := admitted(a1) + admitted(a2); got != 10 {
			t.Fatalf("the nodes admitted %d+%d of flow a's 16 calls with a budget of 10 calls, want 10 in all", admitted(a1), admitted(a2))
		}
		if admitted(b1) != 8 || admitted(b2) != 8 {
			t.Fatalf("flow b, without a budget, had %d and %d of 8 calls admitted on its nodes; want all", admitted(b1), admitted(b2))
		}
		for i, l := range ledgers {
			for _, r := range [][]*governor.Reservation{a1, a2}[i] {
				if !r.Admitted() {
					if b := l.Blocker(clk.Now(), r); b.Kind != "lease" {
						t.Errorf("a call of flow a past its budget waits on %+v, want a lease of the budget", b)
					}
				}
			}
		}
		st := testenv.OpenStore(t, url)
		key := quota.BudgetKey("groq", "a")
		if _, day, err := st.LeaseUse(ctx, key, clk.Now()); err != nil || day.Money != 10*worst {
			t.Fatalf("the store's leases of flow a's budget hold %d of money (%v), want the budget, %d", day.Money, err, 10*worst)
		}
		// n1 stops and starts again: flow a's budget is still spent.
		for _, r := range append(a1, a2...) {
			if !r.Admitted() {
				r.Cancel(clk.Now())
			}
		}
		clk.set(clk.Now().Add(time.Second))
		n1.Start(ctx)
		if err := n1.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		clk.set(clk.Now().Add(time.Second))
		again := open("n1")
		ledgers = []*quota.Ledger{again, n2}
		all = nil
		if got := admitted(reserve(again, "a", 2)) + admitted(reserve(n2, "a", 2)); got != 0 {
			t.Fatalf("%d calls of flow a admitted with its budget spent", got)
		}
		later := reserve(again, "b", 3)
		turn()
		if got := admitted(all[:4]); got != 0 {
			t.Fatalf("after a restart the nodes admitted %d calls of flow a with its budget spent, want none", got)
		}
		if admitted(later) != 3 {
			t.Fatalf("flow b had %d of 3 calls admitted after the restart, want all", admitted(later))
		}
		stopAll(t, ledgers)
	})
}

// The leases of a flow's budget are kept under a name of their own beside
// the key's, one per key and flow, within the store's bound on a key's
// name however long the key's and the flow's names are; a key whose name
// could make one of them is refused in a cluster.
func TestBudgetKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", store.MaxKeyBytes)
	keys := map[string]bool{}
	for _, kf := range [][2]string{{"groq", "a"}, {"groq", "b"}, {"groq-a", "b"}, {long, "a"}, {long, "b"}, {"groq", long}} {
		k := quota.BudgetKey(kf[0], kf[1])
		if len(k) > store.MaxKeyBytes || k == kf[0] || keys[k] {
			t.Errorf("budget key %q of %q and %q: want a name of its own within %d bytes", k, kf[0], kf[1], store.MaxKeyBytes)
		}
		keys[k] = true
	}
	_, err := quota.Open(context.Background(), testenv.OpenStore(t, t.TempDir()+"/q.db"), governor.Config{Key: "groq\x1fbudget\x1fa", Limits: governor.Limits{governor.RPM: 10}},
		quota.Config{Cluster: &quota.Cluster{Node: "n1"}})
	if err == nil || !strings.Contains(err.Error(), "no unit separator") {
		t.Errorf("a key named with a unit separator in a cluster: %v, want it refused", err)
	}
}

// stopAll starts and stops each ledger: its leases end, written down, and
// its charges are flushed.
func stopAll(t *testing.T, ledgers []*quota.Ledger) {
	t.Helper()
	for _, l := range ledgers {
		l.Start(context.Background())
		if err := l.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}
}
