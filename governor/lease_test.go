package governor

import (
	"context"
	"testing"
	"time"
)

// A leased governor admits only on room of a lease, charges each call to
// one, and reports what each lease was used for as calls settle and leases
// end.
func TestLeasedGovernorAdmitsOnLeasesOnly(t *testing.T) {
	t.Parallel()
	g := mustNewLeased(t, Config{Limits: Limits{RPM: 100, TPM: 100_000}, SettleOutput: true})
	call := Cost{Requests: 1, Input: 100, Output: 50}
	var rs []*Reservation
	for range 3 {
		r, err := g.Reserve(t0, "a", call)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	g.Advance(t0)
	if rs[0].Admitted() {
		t.Fatal("admitted without a lease")
	}
	if b := g.Blocker(t0, rs[0]); b.Kind != "lease" || b.String() != "a cluster lease" {
		t.Errorf("blocker %+v (%s), want a lease", b, b)
	}
	select {
	case <-in(g).LeaseWanted():
	default:
		t.Error("LeaseWanted did not receive for a call waiting on a lease")
	}
	d := in(g).Demand(t0, 0)
	if d.Want != call.times(3) || d.Min != call || d.Weight != 1 {
		t.Errorf("demand %+v, want 3 calls, at least one, weight 1", d)
	}

	// A lease with room for two calls: two go, the third waits.
	until := t0.Add(time.Second)
	in(g).Grant(t0, "n1/1", call.times(2), until)
	in(g).Grant(t0, "n1/1", call.times(5), until)        // the same ID again: ignored
	in(g).Grant(t0, "n1/old", call.times(5), t0)         // ended: ignored
	in(g).Grant(t0, "n1/bad", Cost{Requests: -1}, until) // not valid: ignored
	g.Advance(t0)
	if !rs[0].Admitted() || !rs[1].Admitted() || rs[2].Admitted() {
		t.Fatalf("admitted %v %v %v, want the first two", rs[0].Admitted(), rs[1].Admitted(), rs[2].Admitted())
	}
	if d := in(g).Demand(t0, 0); d.Want != call || d.Min != call {
		t.Errorf("demand with the lease full: %+v, want the third call", d)
	}
	// An open lease is not reported: the grantor must hold all of it
	// while calls may still be admitted on it.
	if uses := in(g).LeaseUses(t0); len(uses) != 0 {
		t.Fatalf("lease uses %+v of an open lease, want none", uses)
	}

	// A call sent later moves the lease's last use; settling for less
	// lowers its use and frees room on it for the third call.
	at := t0.Add(100 * time.Millisecond)
	rs[0].Sent(at)
	rs[0].Settle(at, Cost{Input: 100, Output: 10})
	rs[1].Cancel(at)
	g.Advance(at)
	if !rs[2].Admitted() {
		t.Fatal("the third call was not admitted on the room given back")
	}

	// Once the lease ends it is reported closed, with what its calls
	// used and when the last was sent; while a call on it may still
	// settle it is kept, and reported again when that lowers it.
	end := until.Add(time.Millisecond)
	uses := in(g).LeaseUses(end)
	want := Cost{Requests: 2, Input: 200, Output: 60}
	if len(uses) != 1 || !uses[0].Closed || uses[0].Final || uses[0].Used != want || !uses[0].Last.Equal(at) {
		t.Fatalf("lease uses after its end %+v, want it closed, not final (a call on it is live), used %+v, last %v", uses, want, at)
	}
	if again := in(g).LeaseUses(end); len(again) != 0 {
		t.Errorf("lease uses reported twice: %+v", again)
	}
	rs[2].Settle(end, Cost{Input: 100, Output: 0})
	uses = in(g).LeaseUses(end)
	want = Cost{Requests: 2, Input: 200, Output: 10}
	if len(uses) != 1 || uses[0].Used != want || !uses[0].Closed || !uses[0].Final {
		t.Fatalf("lease uses after the last settle %+v, want used %+v, final", uses, want)
	}
	if len(g.leases) != 0 {
		t.Errorf("%d leases kept after the last report, want none", len(g.leases))
	}
	// A closed lease admits nothing.
	r, _ := g.Reserve(end, "a", call)
	g.Advance(end)
	if r.Admitted() {
		t.Error("admitted on a closed lease")
	}
}

// A lease is reported final once it ended and every call on it ended: a
// lease nothing was admitted on as soon as it ends, another when its last
// call settles, even for what it reserved.
func TestLeaseFinalOnceItsCallsEnd(t *testing.T) {
	t.Parallel()
	g := mustNewLeased(t, Config{Limits: Limits{RPM: 100, TPM: 100_000}, SettleOutput: true})
	call := Cost{Requests: 1, Input: 100, Output: 50}
	r, err := g.Reserve(t0, "a", call)
	if err != nil {
		t.Fatal(err)
	}
	until := t0.Add(time.Second)
	in(g).Grant(t0, "used", call, until)
	g.Advance(t0)
	in(g).Grant(t0, "idle", call, until)
	if !r.Admitted() {
		t.Fatal("not admitted on the lease")
	}
	final := func(uses []leaseUse) map[string]bool {
		m := map[string]bool{}
		for _, u := range uses {
			m[u.ID] = u.Final
		}
		return m
	}
	if got := final(in(g).LeaseUses(until)); len(got) != 2 || got["used"] || !got["idle"] {
		t.Fatalf("final of the leases reported at their end: %v, want used not (its call is live), idle final", got)
	}
	r.Settle(until, Cost{Input: 100, Output: 50})
	if got := final(in(g).LeaseUses(until)); len(got) != 1 || !got["used"] {
		t.Fatalf("final of the leases reported once the call settled as reserved: %v, want used final", got)
	}
	if again := in(g).LeaseUses(until); len(again) != 0 || len(g.leases) != 0 {
		t.Fatalf("after the final reports: %+v reported, %d leases kept; want none", again, len(g.leases))
	}
}

// A call waiting in Wait for a lease is admitted as soon as one is granted,
// not at its next look.
func TestLeasedWaitWakesOnGrant(t *testing.T) {
	t.Parallel()
	g := mustNewLeased(t, Config{Limits: Limits{RPM: 100}})
	done := make(chan error, 1)
	go func() {
		_, err := g.Wait(context.Background(), "a", Cost{Requests: 1})
		done <- err
	}()
	select {
	case <-in(g).LeaseWanted():
	case <-time.After(budget):
		t.Fatal("no lease wanted")
	}
	in(g).Grant(time.Now(), "x", Cost{Requests: 1}, time.Now().Add(time.Hour))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(budget):
		t.Fatal("the waiter was not admitted on the lease")
	}
}

// Demand counts only calls that fit every limit and wait for a lease
// alone: a call a limit holds back asks for no lease.
func TestLeaseDemandLeavesOutCallsALimitHolds(t *testing.T) {
	t.Parallel()
	g := mustNewLeased(t, Config{Limits: Limits{RPM: 2}})
	in(g).Grant(t0, "x", Cost{Requests: 2}, t0.Add(time.Hour))
	for range 4 {
		if _, err := g.Reserve(t0, "a", Cost{Requests: 1}); err != nil {
			t.Fatal(err)
		}
	}
	g.Advance(t0)
	if d := in(g).Demand(t0, 0); d.Want != (Cost{}) || d.Min != (Cost{}) {
		t.Errorf("demand %+v with the minute full, want none", d)
	}
}

// A leased governor that paces a day limit tells its grantor how (DayPace,
// Burst) and which of the calls it wants a lease for may run ahead of the
// pace: a priority flow's call on its credit, not a backlog's.
func TestDemandSaysWhatGoesAheadOfThePace(t *testing.T) {
	t.Parallel()
	g := mustNewLeased(t, Config{Limits: Limits{TPD: 200_000},
		Flows: []FlowConfig{{Name: "analysis", Priority: 1}, {Name: "backfill"}}})
	urgent, bulk := Cost{Requests: 1, Input: 300, Output: 200}, Cost{Requests: 1, Input: 2000, Output: 1000}
	for _, r := range []struct {
		flow string
		c    Cost
	}{{"backfill", bulk}, {"analysis", urgent}} {
		if _, err := g.Reserve(t0, r.flow, r.c); err != nil {
			t.Fatal(err)
		}
	}
	d := in(g).Demand(t0, 0)
	if d.DayPace != 0.995 || d.Burst != time.Hour {
		t.Errorf("demand's pacing %v, %v; want the defaults 0.995 and an hour", d.DayPace, d.Burst)
	}
	if d.Want != bulk.add(urgent) || d.Ahead != urgent {
		t.Errorf("demand wants %+v with %+v ahead of the pace; want both calls, the priority one ahead", d.Want, d.Ahead)
	}
	// Without day pacing, nothing is ahead of it.
	g = mustNewLeased(t, Config{Limits: Limits{TPD: 200_000}, DayBurst: -1,
		Flows: []FlowConfig{{Name: "analysis", Priority: 1}}})
	if _, err := g.Reserve(t0, "analysis", urgent); err != nil {
		t.Fatal(err)
	}
	if d := in(g).Demand(t0, 0); d.Burst != 0 || d.Ahead != (Cost{}) || d.Want != urgent {
		t.Errorf("demand without pacing %+v; want the call, no burst, nothing ahead", d)
	}
}

// On a priced key a lease carries money: a call is admitted on a lease
// only when its worst-case price fits the money left on it, beside its
// requests and tokens; the lease's use goes down with what the calls
// cost as they settle, and is reported with it. Demand asks for the
// waiting calls' money.
func TestLeaseMoneyBoundsAdmission(t *testing.T) {
	t.Parallel()
	// A budget of $1 a day, which the calls come nowhere near: the
	// lease's money is what holds them. Each call's worst case is $0.005.
	g := mustNewLeased(t, Config{Key: "k", Price: price, Limits: Limits{MPD: Nano}, DayBurst: -1})
	c := Cost{Requests: 1, Input: 1000, Output: 2000}
	a := mustReserve(t, g, t0, "a", c)
	b := mustReserve(t, g, t0, "a", c)
	x := mustReserve(t, g, t0, "a", c)
	g.Advance(t0)
	worst := c
	worst.Money = 5_000_000
	if d := in(g).Demand(t0, 0); d.Want != worst.times(3) || d.Min != worst {
		t.Fatalf("demand %+v, want the three calls with their worst-case money, at least one", d)
	}
	// Room for ten calls' requests and tokens, and two calls' money.
	in(g).Grant(t0, "n1/1", Cost{Requests: 10, Input: 10_000, Output: 20_000, Money: 10_000_000}, t0.Add(time.Minute))
	g.Advance(t0)
	if !a.Admitted() || !b.Admitted() || x.Admitted() {
		t.Fatalf("admitted %v %v %v, want the first two: the lease's money holds two worst cases", a.Admitted(), b.Admitted(), x.Admitted())
	}
	if bl := g.Blocker(t0, x); bl.Kind != "lease" {
		t.Fatalf("the third call waits on %+v, want a lease", bl)
	}
	if d := in(g).Demand(t0, 0); d.Want != worst {
		t.Fatalf("demand with the lease's money taken: %+v, want the third call's", d)
	}
	// $0.002 and $0.0007 spent: the lease's money left, $0.0073, holds
	// the third call's worst case once both settle, not before.
	a.Settle(at(time.Second), Cost{Input: 1000, Output: 500})
	g.Advance(at(time.Second))
	if x.Admitted() {
		t.Fatal("admitted with 0.007 of the lease's 0.01 charged")
	}
	b.Settle(at(2*time.Second), Cost{Input: 1000, Cached: 400})
	g.Advance(at(2 * time.Second))
	if !x.Admitted() {
		t.Fatal("not admitted with 0.0027 of the lease's 0.01 charged")
	}
	x.Settle(at(3*time.Second), Cost{Input: 1000, Output: 1000})
	uses := in(g).LeaseUses(t0.Add(time.Minute))
	if len(uses) != 1 || !uses[0].Final || uses[0].Used.Money != 2_000_000+700_000+3_000_000 {
		t.Fatalf("lease uses %+v, want one, final, its money what the three calls cost: 5,700,000", uses)
	}
}

// On a priced key without a budget a lease must still carry the calls'
// money (the grantor grants what Demand asks); on a key without a price
// the calls cost none and a lease without money admits them, as before.
func TestLeaseMoneyOnlyWherePriced(t *testing.T) {
	t.Parallel()
	c := Cost{Requests: 1, Input: 1000, Output: 2000}
	room := Cost{Requests: 10, Input: 10_000, Output: 20_000}
	for _, tc := range []struct {
		name  string
		cfg   Config
		money int64 // the lease's
		want  bool
	}{
		{"priced, a lease without money", Config{Key: "k", Price: price, DayBurst: -1}, 0, false},
		{"priced, a lease with its money", Config{Key: "k", Price: price, DayBurst: -1}, 5_000_000, true},
		{"unpriced, a lease without money", Config{Key: "k", Limits: Limits{RPM: 100}, DayBurst: -1}, 0, true},
	} {
		g := mustNewLeased(t, tc.cfg)
		r := mustReserve(t, g, t0, "a", c)
		lease := room
		lease.Money = tc.money
		in(g).Grant(t0, "n1/1", lease, t0.Add(time.Minute))
		g.Advance(t0)
		if r.Admitted() != tc.want {
			t.Errorf("%s: admitted %v, want %v", tc.name, r.Admitted(), tc.want)
		}
	}
}

// Demand asks for no more than one lease holds, each part at most
// MaxCost: calls whose money adds up past it wait for the next lease.
func TestDemandAsksForWhatALeaseHolds(t *testing.T) {
	t.Parallel()
	// 600 of money a call at worst: two are more than MaxCost.
	g := mustNewLeased(t, Config{Key: "k", Price: Price{Input: 1000}, DayBurst: -1})
	c := Cost{Requests: 1, Input: 600_000}
	mustReserve(t, g, t0, "a", c)
	mustReserve(t, g, t0, "b", c)
	g.Advance(t0)
	d := in(g).Demand(t0, 0)
	if d.Want.Requests != 1 || d.Want.Money != 600*Nano || d.Min != d.Want {
		t.Fatalf("demand %+v, want one call's: two are more than a lease holds", d)
	}
}

// On a leased governor a call of a flow with a budget of its own needs
// room on a lease of that budget too: it waits on "lease" with the key's
// lease granted, Demand asks for its money under its flow, GrantBudget's
// lease admits it and is charged its money, settling lowers that, and the
// budget's lease is reported under its flow. A call of a flow without a
// budget needs the key's lease only.
func TestLeasedFlowBudgetNeedsItsOwnLease(t *testing.T) {
	t.Parallel()
	price := Price{Input: 1, Output: 2}
	g := mustNewLeased(t, Config{Limits: Limits{RPM: 100}, Price: price, SettleOutput: true,
		Flows: []FlowConfig{{Name: "a", Budget: Budget{Day: 1}}, {Name: "b"}}})
	call := Cost{Requests: 1, Input: 60, Output: 40}
	worst := price.Of(call) // 140 billionths
	ra, err := g.Reserve(t0, "a", call)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := g.Reserve(t0, "b", call)
	if err != nil {
		t.Fatal(err)
	}
	until := t0.Add(time.Second)
	in(g).Grant(t0, "n1/key", Cost{Requests: 5, Input: 1000, Output: 1000, Money: 10 * worst}, until)
	g.Advance(t0)
	if !rb.Admitted() || ra.Admitted() {
		t.Fatalf("admitted a %v, b %v; want b only: a's budget has no lease", ra.Admitted(), rb.Admitted())
	}
	if b := g.Blocker(t0, ra); b.Kind != "lease" {
		t.Errorf("a waits on %+v, want a lease", b)
	}
	d := in(g).Demand(t0, 0)
	if bd := d.Budgets["a"]; bd.Want != worst || bd.Min != worst || bd.Limits[MPD] != int64(Nano) || len(d.Budgets) != 1 {
		t.Fatalf("budget demand %+v, want flow a's worst case %d under its budget of %d", d.Budgets, worst, int64(Nano))
	}
	in(g).GrantBudget(t0, "a", "n1/b1", worst-1, until) // too small for the call
	in(g).GrantBudget(t0, "", "n1/b2", worst, until)    // no flow: ignored
	in(g).GrantBudget(t0, "a", "n1/b3", 0, until)       // no money: ignored
	g.Advance(t0)
	if ra.Admitted() {
		t.Fatal("a admitted on a budget lease too small for it")
	}
	in(g).GrantBudget(t0, "a", "n1/b4", 2*worst, until)
	g.Advance(t0)
	if !ra.Admitted() {
		t.Fatal("a not admitted with room on both leases")
	}
	if d := in(g).Demand(t0, 0); len(d.Budgets) != 0 {
		t.Errorf("budget demand %+v with nothing waiting", d.Budgets)
	}
	at := t0.Add(100 * time.Millisecond)
	ra.Settle(at, Cost{Input: 60, Output: 10})
	rb.Settle(at, Cost{Input: 60, Output: 10})
	uses := in(g).LeaseUses(until.Add(time.Millisecond))
	got := map[string]leaseUse{}
	for _, u := range uses {
		got[u.Flow+"|"+u.ID] = u
	}
	spent := price.Of(Cost{Input: 60, Output: 10})
	if u := got["a|n1/b4"]; u.Used != (Cost{Money: spent}) || !u.Final {
		t.Errorf("flow a's budget lease reported %+v, want %d of money used, final", u, spent)
	}
	if u := got["a|n1/b1"]; u.Used != (Cost{}) || !u.Final {
		t.Errorf("the unused budget lease reported %+v, want nothing used, final", u)
	}
	if u := got["|n1/key"]; u.Used.Money != 2*spent || u.Used.Requests != 2 {
		t.Errorf("the key's lease reported %+v, want both calls", u)
	}
	if len(uses) != 3 {
		t.Errorf("lease uses %+v, want the key's and flow a's two", uses)
	}
}

// A flow's own budget per day is paced over its day as the key's is: a
// backlog spends the burst's worth at once (an idle flow answers at once)
// and then one call per call's share of the day, not the whole budget in
// its first hour; a flow without a budget goes on beside it. With pacing
// off (DayBurst below 0) the backlog spends the budget at once.
func TestFlowBudgetIsPaced(t *testing.T) {
	t.Parallel()
	price := Price{Input: 1}
	call := Cost{Requests: 1, Input: 1_000_000}                              // $1 a call
	flows := []FlowConfig{{Name: "a", Budget: Budget{Day: 24}}, {Name: "b"}} // $24 a day: a call an hour at the even pace
	for _, burst := range []time.Duration{time.Hour, -1} {
		g := mustNew(t, Config{Limits: Limits{RPM: 1000}, Price: price, DayBurst: burst, Flows: flows})
		var as, bs []*Reservation
		for range 10 {
			ra, err := g.Reserve(t0, "a", call)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := g.Reserve(t0, "b", call)
			if err != nil {
				t.Fatal(err)
			}
			as, bs = append(as, ra), append(bs, rb)
		}
		g.Advance(t0)
		count := func(rs []*Reservation) (n int) {
			for _, r := range rs {
				if r.Admitted() {
					n++
				}
			}
			return n
		}
		if count(bs) != 10 {
			t.Fatalf("burst %v: flow b, without a budget, had %d of 10 calls admitted", burst, count(bs))
		}
		if burst < 0 {
			if count(as) != 10 {
				t.Fatalf("unpaced: flow a had %d of 10 calls admitted with $24 of budget, want all", count(as))
			}
			continue
		}
		// A dollar is a call's share of the day, 24h / (24 × 0.995) ≈ 1h0m18s,
		// and the burst an hour: one call goes at once (an idle flow's
		// first), the second when the pace is back within the burst, 18 s
		// later, and each after that a call's share of the day later.
		if got := count(as); got != 1 {
			t.Fatalf("paced: flow a had %d calls admitted at once, want 1", got)
		}
		next := as[1]
		b := g.Blocker(t0, next)
		if b.Kind != "budget" || b.Limit != MPD {
			t.Fatalf("flow a's second call waits on %+v, want its budget's pace", b)
		}
		per := time.Duration(float64(24*time.Hour) / (24 * g.cfg.DayPace)) // a dollar's share of the day
		wait := b.Until.Sub(t0)
		if wait < per-time.Hour-time.Second || wait > per-time.Hour+time.Second {
			t.Errorf("the second call waits %v, want a call's share of the day (%v) less the burst (1h)", wait, per)
		}
		g.Advance(b.Until)
		if got := count(as); got != 2 {
			t.Fatalf("at %v flow a has %d calls admitted, want 2", b.Until.Sub(t0), got)
		}
		third := g.Blocker(b.Until, as[2])
		if d := third.Until.Sub(b.Until); third.Kind != "budget" || d < per-time.Second || d > per+time.Second {
			t.Errorf("the third call waits on %+v, %v after the second went; want its budget's pace, %v", third, d, per)
		}
	}
}
