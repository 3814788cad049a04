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
