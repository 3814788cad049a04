package governor

import (
	"testing"
	"time"
)

// TestPriorityIsNotHeldByDayPacing: the README's key (TPD 200,000), a
// backfill that has spent its pacer's allowance, and then a 20-token call of
// a priority flow: it is admitted at once, not at the backfill's next
// pacing slot.
func TestPriorityIsNotHeldByDayPacing(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{
		Limits: Limits{RPM: 30, TPM: 8000, TPD: 200000},
		Flows:  []FlowConfig{{Name: "analysis", Priority: 1}, {Name: "backfill"}},
		// A minute's burst: the backfill meets the pacer before TPM.
		DayBurst: time.Minute,
	})
	now := t0
	var back *Reservation
	for used := int64(0); used < 1100; {
		back = mustReserve(t, g, now, "backfill", Cost{Requests: 1, Input: 300, Output: 250})
		g.Advance(now)
		if !back.Admitted() {
			break
		}
		used += back.Cost().Tokens()
	}
	if b := g.Blocker(now, back); back.Admitted() || b.Kind != "pacing" || b.Limit != TPD {
		t.Fatalf("the backfill's next call is held by %v (admitted %v), want tpd pacing: the test needs the pacer to hold it", b, back.Admitted())
	}
	now = now.Add(time.Second)
	urgent := mustReserve(t, g, now, "analysis", Cost{Requests: 1, Input: 10, Output: 10})
	g.Advance(now)
	if !urgent.Admitted() {
		t.Fatalf("the priority call waits on %v; want it admitted at once on an idle key", g.Blocker(now, urgent))
	}
	if back.Admitted() {
		t.Fatal("the backfill call was admitted ahead of its pacing slot")
	}
}

// TestRoomIsHeldForPriorityWork: calls of lower priority leave room in a
// day window for the next calls of a priority flow, so they fit when they
// come.
func TestRoomIsHeldForPriorityWork(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{
		Limits:   Limits{TPD: 2000},
		DayBurst: -1, // no pacing: the window alone
		Flows:    []FlowConfig{{Name: "urgent", Priority: 1}, {Name: "bulk"}},
	})
	// One call teaches the governor the size of urgent's calls; it leaves
	// the window a day later.
	first := mustReserve(t, g, t0, "urgent", Cost{Requests: 1, Input: 200})
	g.Advance(t0)
	if !first.Admitted() {
		t.Fatal("the first urgent call was not admitted")
	}
	now := at(25 * time.Hour)
	var used int64
	for range 30 {
		r := mustReserve(t, g, now, "bulk", Cost{Requests: 1, Input: 100})
		g.Advance(now)
		if !r.Admitted() {
			if b := g.Blocker(now, r); b.Kind != "limit" || b.Limit != TPD {
				t.Errorf("bulk's call past the held room waits on %v, want tpd", b)
			}
			r.Cancel(now)
			break
		}
		used += 100
	}
	if used != 1600 {
		t.Fatalf("bulk took %d tokens of the day, want 1,600: room for two of urgent's calls held", used)
	}
	for i := range 2 {
		now = now.Add(time.Second)
		urgent := mustReserve(t, g, now, "urgent", Cost{Requests: 1, Input: 200})
		g.Advance(now)
		if !urgent.Admitted() {
			t.Fatalf("urgent call %d waits on %v; want the room held for it", i+1, g.Blocker(now, urgent))
		}
	}
}

// TestPriorityCreditIsBounded: a priority flow runs ahead of the day pacer
// only on the credit it earned while idle — a quarter hour of its share — and
// then waits for the pacer like any other flow.
func TestPriorityCreditIsBounded(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{
		Limits: Limits{TPD: 240000},
		Flows:  []FlowConfig{{Name: "urgent", Priority: 1}, {Name: "bulk"}},
	})
	// The pacer is spent by bulk.
	now := t0
	for range 20 {
		r := mustReserve(t, g, now, "bulk", Cost{Requests: 1, Input: 1000})
		g.Advance(now)
		if !r.Admitted() {
			r.Cancel(now)
			break
		}
	}
	// urgent's share is 4/5 of the key: a quarter hour of it is 2,000 tokens.
	var admitted int64
	for range 20 {
		r := mustReserve(t, g, now, "urgent", Cost{Requests: 1, Input: 250})
		g.Advance(now)
		if !r.Admitted() {
			if b := g.Blocker(now, r); b.Kind != "pacing" {
				t.Errorf("urgent's call past its credit waits on %v, want tpd pacing", b)
			}
			break
		}
		admitted += 250
	}
	if admitted < 1750 || admitted > 2250 {
		t.Fatalf("urgent ran %d tokens ahead of the pacer, want a quarter hour of its share (2,000)", admitted)
	}
}

// TestBackloggedPriorityGetsItsShare: a priority flow that always has calls
// waiting earns no credit: it is served its share in fair order, no more.
func TestBackloggedPriorityGetsItsShare(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{
		Limits: Limits{TPM: 10000},
		Flows:  []FlowConfig{{Name: "urgent", Priority: 1}, {Name: "bulk"}},
	})
	c := Cost{Requests: 1, Input: 500}
	var lines = map[string][]*Reservation{}
	got := map[string]int64{}
	now := t0
	for now.Before(at(time.Hour)) {
		for _, f := range []string{"urgent", "bulk"} {
			for len(lines[f]) < 40 { // deeper than the 20 calls a window holds: always backlogged
				lines[f] = append(lines[f], mustReserve(t, g, now, f, c))
			}
		}
		next := g.Advance(now)
		for _, f := range []string{"urgent", "bulk"} {
			for len(lines[f]) > 0 && lines[f][0].Admitted() {
				got[f] += lines[f][0].Cost().Tokens()
				lines[f] = lines[f][1:]
			}
		}
		if next.IsZero() || !next.After(now) {
			next = now.Add(time.Second)
		}
		now = next
	}
	ratio := float64(got["urgent"]) / float64(got["bulk"])
	if ratio < 3.6 || ratio > 4.4 {
		t.Fatalf("urgent got %d tokens, bulk %d: ratio %.2f, want its share's 4", got["urgent"], got["bulk"], ratio)
	}
}

// TestFaultRetryGoesAheadOfThePacer: a call that failed keeps its charge,
// and its flow's retry does not wait for the next pacing slot — once.
func TestFaultRetryGoesAheadOfThePacer(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPD: 240000}})
	c := Cost{Requests: 1, Input: 1000}
	now := t0
	var last *Reservation
	for range 20 {
		r := mustReserve(t, g, now, "bulk", c)
		g.Advance(now)
		if !r.Admitted() {
			r.Cancel(now)
			break
		}
		last = r
	}
	last.Fault(now, Cost{})
	if got := last.Cost(); got != c {
		t.Fatalf("a failed call's charge is %+v, want it kept: %+v", got, c)
	}
	retry := mustReserve(t, g, now, "bulk", c)
	g.Advance(now)
	if !retry.Admitted() {
		t.Fatalf("the retry of a failed call waits on %v; want it admitted ahead of the pacer", g.Blocker(now, retry))
	}
	again := mustReserve(t, g, now, "bulk", c)
	g.Advance(now)
	if b := g.Blocker(now, again); again.Admitted() || b.Kind != "pacing" {
		t.Fatalf("the call after the retry is admitted %v, waiting on %v; want it paced: a fault buys one call", again.Admitted(), b)
	}
}

// A priority flow with calls waiting earns no credit: a call its credit
// falls just short of waits for the day pacer, and the governor says so —
// it does not wake again and again, microseconds apart, for a credit that
// never comes (as it did once a learned day limit lapsed and came back).
func TestShortCreditWaitsForThePacer(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{
		Limits: Limits{TPD: 200000},
		Flows:  []FlowConfig{{Name: "analysis", Priority: 1}, {Name: "backfill"}},
	})
	now := t0
	for {
		back := mustReserve(t, g, now, "backfill", Cost{Requests: 1, Input: 300, Output: 250})
		if g.Advance(now); !back.Admitted() {
			break
		}
	}
	now = now.Add(time.Second)
	c := Cost{Requests: 1, Input: 500, Output: 500}
	r := mustReserve(t, g, now, "analysis", c)
	g.mu.Lock()
	g.flows["analysis"].prio.credit = g.size(c) - 1e-6
	g.mu.Unlock()
	wakes := 0
	for g.Advance(now); !r.Admitted(); g.Advance(now) {
		b := g.Blocker(now, r)
		if wakes++; b.Until.IsZero() || wakes > 3 {
			t.Fatalf("after %d wakes the call waits on %v until %v", wakes, b, b.Until.Sub(now))
		}
		now = b.Until
	}
}

// TestPromotedFlowIsNotPushedByHeldRoom: a flow promoted for having waited
// PromoteAfter, waiting for a full day window to free room, is not pushed
// later by the room held for a priority flow as that flow's credit refills:
// the time it will fit, once promoted, does not move later, and it is
// admitted then.
func TestPromotedFlowIsNotPushedByHeldRoom(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{
		Limits:   Limits{TPD: 100000},
		DayBurst: -1, // no pacing: the window alone
		// Equal shares: the urgent flow's credit refills at half the key,
		// about 35 tokens a minute.
		Flows: []FlowConfig{{Name: "urgent", Priority: 1, Weight: 250}, {Name: "bulk", Weight: 1000}},
	})
	// Yesterday's charges: the window is full but for 500 tokens; 100
	// tokens age out each minute from 41 min on, the rest in 10 hours.
	charges := []Charge{{ID: 1, Flow: "old", At: at(-14 * time.Hour), Cost: Cost{Requests: 1, Input: 89500}}}
	for k := range 100 {
		charges = append(charges, Charge{ID: uint64(k + 2), Flow: "old", At: at(-24*time.Hour + time.Duration(41+k)*time.Minute), Cost: Cost{Requests: 1, Input: 100}})
	}
	g.Restore(t0, charges)
	// One call teaches the governor urgent's size (room for two such is
	// held, as far as its credit goes); it leaves, and credit refills.
	mustReserve(t, g, t0, "urgent", Cost{Requests: 1, Input: 3000}).Cancel(t0)
	bulk := mustReserve(t, g, t0, "bulk", Cost{Requests: 1, Input: 1000})
	now := at(35*time.Minute + time.Second)
	g.Advance(now)
	if bulk.Admitted() {
		t.Fatal("bulk was admitted before the window freed room: the test needs it to wait")
	}
	if !g.promotedNow(bulk.f) {
		t.Fatal("bulk is not promoted after waiting PromoteAfter: the test needs it to be")
	}
	until := g.Blocker(now, bulk).Until
	if !until.After(at(41 * time.Minute)) {
		t.Fatalf("bulk fits at %v, want later than 41 min: the test needs it to wait for the window", until.Sub(t0))
	}
	for now.Before(until) {
		if now = now.Add(time.Minute); now.After(until) {
			now = until
		}
		g.Advance(now)
		if bulk.Admitted() {
			break
		}
		if u := g.Blocker(now, bulk).Until; u.After(until) {
			t.Fatalf("at %v promoted bulk fits at %v, later than %v when it was promoted", now.Sub(t0), u.Sub(t0), until.Sub(t0))
		}
	}
	if !bulk.Admitted() || bulk.AdmittedAt().After(until) {
		t.Errorf("bulk admitted %v at %v, want by %v", bulk.Admitted(), bulk.AdmittedAt().Sub(t0), until.Sub(t0))
	}
}
