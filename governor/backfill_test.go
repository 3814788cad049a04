package governor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBackfillUsesRoomTheFrontCallCannot: a call that must wait for room
// does not leave idle what smaller calls of another flow can use without
// delaying it, and it starts exactly when it would have alone.
func TestBackfillUsesRoomTheFrontCallCannot(t *testing.T) {
	t.Parallel()
	run := func(smalls int) (admittedNow int, bigAt time.Time) {
		g := mustNew(t, Config{Limits: Limits{TPM: 1000}})
		old := mustReserve(t, g, at(0), "old", Cost{Requests: 1, Input: 500})
		g.Advance(at(0))
		if !old.Admitted() {
			t.Fatal("the first call was not admitted")
		}
		big := mustReserve(t, g, at(time.Second), "big", Cost{Requests: 1, Input: 600})
		var rs []*Reservation
		for range smalls {
			rs = append(rs, mustReserve(t, g, at(time.Second), "small", Cost{Requests: 1, Input: 40}))
		}
		next := g.Advance(at(time.Second))
		for _, r := range rs {
			if r.Admitted() {
				admittedNow++
			}
		}
		for !big.Admitted() {
			if next.IsZero() {
				t.Fatal("the big call waits and Advance says nothing waits")
			}
			next = g.Advance(next)
		}
		return admittedNow, big.AdmittedAt()
	}
	_, alone := run(0)
	n, with := run(12)
	if n != 10 {
		t.Errorf("%d of 12 calls of 40 tokens admitted while the 600-token call waits; want 10 (the room it cannot use before its start)", n)
	}
	if !with.Equal(alone) || !alone.Equal(at(time.Minute)) {
		t.Errorf("the front call started at %v with others backfilled, %v alone; want both at %v", with, alone, at(time.Minute))
	}
}

// TestBackfillNeverDelaysTheFrontCall holds for every limit kind: day
// pacing and fixed windows too.
func TestBackfillNeverDelaysTheFrontCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"rolling tpm", Config{Limits: Limits{TPM: 1000, RPM: 100}}},
		{"fixed tpm", Config{Limits: Limits{TPM: 1000}, FixedWindows: true}},
		{"paced tpd", Config{Limits: Limits{TPD: 100000, TPM: 5000}}},
		{"otpm", Config{Limits: Limits{OTPM: 1000, TPM: 20000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := func(others bool) time.Time {
				g := mustNew(t, tc.cfg)
				for i := range 3 {
					mustReserve(t, g, at(0), "fill", Cost{Requests: 1, Input: 300, Output: 300})
					g.Advance(at(time.Duration(i) * time.Second))
				}
				big := mustReserve(t, g, at(5*time.Second), "big", Cost{Requests: 1, Input: 450, Output: 450})
				if others {
					for range 40 {
						mustReserve(t, g, at(5*time.Second), "small", Cost{Requests: 1, Input: 20, Output: 20})
					}
				}
				now := at(5 * time.Second)
				for i := 0; !big.Admitted(); i++ {
					next := g.Advance(now)
					if big.Admitted() {
						break
					}
					if next.IsZero() || i > 100000 {
						t.Fatal("the front call never started")
					}
					now = next
				}
				return big.AdmittedAt()
			}
			if alone, with := start(false), start(true); with.After(alone) {
				t.Errorf("the front call started at %v with backfilling, %v without", with.Sub(t0), alone.Sub(t0))
			}
		})
	}
}

// TestLearnedLowerLimitRefusesWaitingCall: a queued call that a limit
// learned lower makes impossible fails at once, and no longer holds back
// the calls of other flows.
func TestLearnedLowerLimitRefusesWaitingCall(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{OTPM: 5000}})
	first := mustReserve(t, g, at(0), "a", Cost{Requests: 1, Output: 4000})
	g.Advance(at(0))
	if !first.Admitted() {
		t.Fatal("first call not admitted")
	}
	large := mustReserve(t, g, at(time.Second), "a", Cost{Requests: 1, Output: 3000})
	small := mustReserve(t, g, at(time.Second), "b", Cost{Requests: 1, Output: 10})
	var s Snapshot
	s[OTPM] = Observed{Known: true, Limit: 1000, Remaining: 1000}
	first.Observe(at(2*time.Second), s)
	next := g.Advance(at(2 * time.Second))
	var tl *TooLargeError
	if err := large.Err(); !errors.As(err, &tl) || tl.Limit != OTPM || tl.Max != 1000 {
		t.Fatalf("the 3,000-token call after OTPM fell to 1,000: err %v", large.Err())
	}
	select {
	case <-large.Ready():
	default:
		t.Error("Ready is not closed for a refused reservation")
	}
	if large.Admitted() {
		t.Error("a refused reservation reports admitted")
	}
	// The first call still holds 4,000 of a 1,000 minute: the small call
	// waits for it to age out, and Advance says when.
	if small.Admitted() || next.IsZero() {
		t.Fatalf("small admitted %v, next %v", small.Admitted(), next)
	}
	g.Advance(next)
	if !small.Admitted() || next.After(at(time.Minute+time.Second)) {
		t.Errorf("the small call of another flow: admitted %v at %v", small.Admitted(), next.Sub(t0))
	}
}

func TestWaitReturnsRefusal(t *testing.T) {
	t.Parallel()
	now := at(0)
	g := mustNew(t, Config{Limits: Limits{OTPM: 5000}, Now: func() time.Time { return now }})
	first := mustReserve(t, g, now, "a", Cost{Requests: 1, Output: 4000})
	g.Advance(now)
	errc := make(chan error, 1)
	go func() {
		_, err := g.Wait(context.Background(), "a", Cost{Requests: 1, Output: 3000})
		errc <- err
	}()
	waitUntil(t, "the second call waits", func() bool { return waitingIn(g, now, "a") > 0 })
	var s Snapshot
	s[OTPM] = Observed{Known: true, Limit: 1000, Remaining: 1000}
	first.Observe(now, s)
	select {
	case err := <-errc:
		var tl *TooLargeError
		if !errors.As(err, &tl) {
			t.Fatalf("Wait returned %v, want a *TooLargeError", err)
		}
	case <-time.After(budget):
		t.Fatal("Wait still waits for a call that can never fit")
	}
}

// TestBackfillFillsTheOtherTokenLimit: with separate input and output
// limits, the first call in line waits for output room while the input
// limit idles. A call that needs little output goes now, although its input
// charge outlasts the first call's start by a few seconds: it fills far
// more room that would idle than it delays the first call. It may do so
// once per call: a second such call waits.
func TestBackfillFillsTheOtherTokenLimit(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{ITPM: 20000, OTPM: 4000}, SettleOutput: true})
	write := mustReserve(t, g, at(0), "write", Cost{Requests: 1, Input: 600, Output: 4000})
	g.Advance(at(0))
	if !write.Admitted() {
		t.Fatal("the first call was not admitted")
	}
	extract := mustReserve(t, g, at(time.Second), "extract", Cost{Requests: 1, Input: 14000, Output: 1200})
	huge := mustReserve(t, g, at(time.Second), "huge", Cost{Requests: 1, Input: 7000, Output: 400})
	g.Advance(at(time.Second))
	write.Settle(at(8*time.Second), Cost{Requests: 1, Input: 600, Output: 3200})
	next := g.Advance(at(8 * time.Second))
	if !huge.Admitted() || extract.Admitted() {
		t.Fatalf("at 8s, with 800 output tokens free and 19,400 input: huge admitted %v, extract %v; want only huge", huge.Admitted(), extract.Admitted())
	}
	// extract waited for the first call's output charge to age out (at
	// 60s), and now for huge's input charge too (at 68s): 8s later, for 52s
	// of input room filled.
	if want := at(68 * time.Second); !next.Equal(want) {
		t.Errorf("Advance says to come back at %v, want %v", next.Sub(t0), want.Sub(t0))
	}
	// other fits now and would delay extract by a second only: but extract
	// was delayed once already.
	other := mustReserve(t, g, at(9*time.Second), "other", Cost{Requests: 1, Input: 7000, Output: 10})
	g.Advance(at(9 * time.Second))
	if other.Admitted() {
		t.Fatal("at 9s a second call delayed the first in line again")
	}
	// At 60s it would delay extract by 52s for 8s of room: it waits too.
	g.Advance(at(60 * time.Second))
	if other.Admitted() || extract.Admitted() {
		t.Fatalf("at 60s: other admitted %v, extract %v; want neither", other.Admitted(), extract.Admitted())
	}
	g.Advance(at(68 * time.Second))
	if !extract.Admitted() || !extract.AdmittedAt().Equal(at(68*time.Second)) {
		t.Errorf("extract admitted %v at %v, want at 68s", extract.Admitted(), extract.AdmittedAt().Sub(t0))
	}
}
