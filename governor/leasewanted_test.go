package governor

import (
	"testing"
	"time"
)

// Only an attempt to admit a call tells the grant loop that a lease is
// wanted. The grant loop calls Demand when told: were Demand to tell it
// again, while the store has no room for a lease, it would take lease
// after lease in a loop though no call looked again.
func TestLeaseWantedOnlyByAdmission(t *testing.T) {
	t.Parallel()
	g := mustNewLeased(t, Config{Limits: Limits{RPM: 100}})
	call := Cost{Requests: 1}
	r, err := g.Reserve(t0, "a", call)
	if err != nil {
		t.Fatal(err)
	}
	pending := func() bool {
		select {
		case <-in(g).LeaseWanted():
			return true
		default:
			return false
		}
	}
	if pending() {
		t.Fatal("LeaseWanted received before any attempt to admit the call")
	}
	g.Advance(t0)
	if !pending() {
		t.Fatal("LeaseWanted did not receive for a call that waits only for a lease")
	}
	// What the grant loop does once told, over and over as it would if
	// Demand told it again: no lease comes, the call keeps waiting.
	for i := range 3 {
		if d := in(g).Demand(t0, 0); d.Want != call {
			t.Fatalf("round %d: demand %+v, want the waiting call", i, d)
		}
		if pending() {
			t.Fatalf("round %d: Demand made LeaseWanted receive: the grant loop would wake itself", i)
		}
	}
	// Nor do the other looks at the line.
	g.Stats(t0)
	if b := g.Blocker(t0, r); b.Kind != "lease" {
		t.Fatalf("blocker %+v, want a lease", b)
	}
	g.EstimateWait(t0, r)
	if pending() {
		t.Fatal("Stats, Blocker or EstimateWait made LeaseWanted receive")
	}
	// The call's next look still tells at once.
	later := t0.Add(leaseRetry)
	g.Advance(later)
	if !pending() {
		t.Fatal("LeaseWanted did not receive at the waiting call's next look")
	}
	// Once a lease has room, the call is admitted on it, and nothing
	// more is wanted.
	in(g).Grant(later, "x", call.times(5), later.Add(time.Hour))
	g.Advance(later)
	if !r.Admitted() {
		t.Fatal("the call was not admitted on the lease granted")
	}
	if pending() {
		t.Fatal("LeaseWanted received though the call was admitted on a lease")
	}
}
