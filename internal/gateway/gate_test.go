package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

func TestGateFreeAt(t *testing.T) {
	t.Parallel()
	const lag = 250 * time.Millisecond
	base := time.Date(2026, 11, 29, 10, 0, 30, 0, time.UTC).UnixNano()
	sec := int64(time.Second)
	type sent struct {
		at   time.Duration // after base
		cost governor.Cost
	}
	tok := func(n int64) governor.Cost { return governor.Cost{Requests: 1, Input: n} }
	for _, tc := range []struct {
		name   string
		fixed  bool
		limits string
		sent   []sent
		now    int64 // nanoseconds after base
		need   governor.Cost
		want   int64 // nanoseconds after base
	}{
		{"fits", false, "tpm=100", []sent{{0 * time.Second, tok(60)}}, sec, tok(40), sec},
		{"held a lag past the minute", false, "tpm=100", []sent{{0 * time.Second, tok(60)}}, sec, tok(50), 60*sec + int64(lag)},
		{"the oldest charge that frees enough", false, "tpm=100", []sent{{0 * time.Second, tok(30)}, {5 * time.Second, tok(30)}, {10 * time.Second, tok(30)}}, 20 * sec, tok(50), 65*sec + int64(lag)},
		{"requests too", false, "rpm=2", []sent{{0 * time.Second, tok(1)}, {1 * time.Second, tok(1)}}, 2 * sec, tok(1), 60*sec + int64(lag)},
		{"aged out", false, "tpm=100", []sent{{0 * time.Second, tok(90)}}, 61 * sec, tok(90), 61 * sec},
		{"day limits", false, "tpd=100", []sent{{0 * time.Second, tok(90)}}, 3600 * sec, tok(20), 86400*sec + int64(lag)},
		{"no limit", false, "", []sent{{0 * time.Second, tok(1e6)}}, sec, tok(1e6), sec},
		// base is 30 s into a minute: the window ends in 30 s.
		{"fixed: next window", true, "tpm=100", []sent{{0 * time.Second, tok(90)}}, sec, tok(20), 30 * sec},
		{"fixed: sent just before the boundary counts in the next window", true, "tpm=100", []sent{{59*time.Second + 900*time.Millisecond - 30*time.Second, tok(90)}}, 30*sec + int64(100*time.Millisecond), tok(20), 90 * sec},
		{"fixed: sent well before the boundary does not", true, "tpm=100", []sent{{20 * time.Second, tok(90)}}, 30*sec + int64(100*time.Millisecond), tok(20), 30*sec + int64(100*time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := limits(tc.limits)
			gt := newGate(lag, tc.fixed, func() governor.Limits { return lim }, time.Now)
			for _, s := range tc.sent {
				gt.record(base+int64(s.at), s.cost, lim)
			}
			if got := gt.freeAt(base+tc.now, tc.need, lim); got != base+tc.want {
				t.Errorf("freeAt = base%+v, want base%+v", time.Duration(got-base), time.Duration(tc.want))
			}
		})
	}
}

func TestGateAmend(t *testing.T) {
	t.Parallel()
	lim := limits("tpm=100")
	gt := newGate(time.Second, false, func() governor.Limits { return lim }, time.Now)
	e := gt.record(0, governor.Cost{Requests: 1, Input: 50, Output: 40}, lim)
	need := governor.Cost{Requests: 1, Input: 30}
	if at := gt.freeAt(1, need, lim); at == 1 {
		t.Fatal("fits before the correction")
	}
	gt.amend(e, governor.Cost{Requests: 1, Input: 45, Output: 20}) // the provider's count
	if at := gt.freeAt(1, need, lim); at != 1 {
		t.Errorf("after the correction freeAt = %d, want now", at)
	}
	gt.amend(e, governor.Cost{}) // the provider refused the call: nothing counts
	if s := gt.minute.sum; s != (governor.Cost{}) {
		t.Errorf("sum after a refusal %+v", s)
	}
	gt.expire(int64(2 * time.Minute))
	gt.amend(e, governor.Cost{Requests: 1, Input: 99}) // aged out: no effect
	if s := gt.minute.sum; s != (governor.Cost{}) {
		t.Errorf("an aged-out entry changed the sum: %+v", s)
	}
}

// TestGateOrder shows calls pass in the order they came: a small call that
// would fit does not overtake a large one waiting for room.
func TestGateOrder(t *testing.T) {
	t.Parallel()
	lim := limits("tpm=100")
	gt := newGate(time.Hour, false, func() governor.Limits { return lim }, time.Now)
	if _, err := gt.pass(context.Background(), governor.Cost{Requests: 1, Input: 80}); err != nil {
		t.Fatal(err)
	}
	bigCtx, cancelBig := context.WithCancel(context.Background())
	bigDone := make(chan error, 1)
	go func() {
		_, err := gt.pass(bigCtx, governor.Cost{Requests: 1, Input: 50})
		bigDone <- err
	}()
	waitFor(t, "the large call to wait", func() bool { gt.mu.Lock(); defer gt.mu.Unlock(); return len(gt.line) == 1 })
	smallDone := make(chan error, 1)
	go func() {
		_, err := gt.pass(context.Background(), governor.Cost{Requests: 1, Input: 10})
		smallDone <- err
	}()
	waitFor(t, "the small call to queue", func() bool { gt.mu.Lock(); defer gt.mu.Unlock(); return len(gt.line) == 2 })
	select {
	case <-smallDone:
		t.Fatal("the small call overtook the large one")
	default:
	}
	cancelBig()
	if err := <-bigDone; err != context.Canceled {
		t.Errorf("large call: %v", err)
	}
	select {
	case err := <-smallDone:
		if err != nil {
			t.Errorf("small call: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the small call did not pass once the line ahead of it left")
	}
}

func TestGateOff(t *testing.T) {
	t.Parallel()
	lim := limits("rpm=1")
	gt := newGate(-1, false, func() governor.Limits { return lim }, time.Now)
	for range 3 {
		if e, err := gt.pass(context.Background(), governor.Cost{Requests: 1}); e != nil || err != nil {
			t.Fatalf("a gate that is off held a call: %v %v", e, err)
		}
	}
}

// TestGateWaitsAtMostLag: a call the governor admitted is held at most lag,
// so holds cannot pile up from one minute to the next on a saturated key.
func TestGateWaitsAtMostLag(t *testing.T) {
	t.Parallel()
	lim := limits("tpm=100")
	gt := newGate(50*time.Millisecond, false, func() governor.Limits { return lim }, time.Now)
	if _, err := gt.pass(context.Background(), governor.Cost{Requests: 1, Input: 100}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := gt.pass(ctx, governor.Cost{Requests: 1, Input: 100}); err != nil {
		t.Fatalf("a full window held the call past its lag: %v", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("passed after %s, before the lag", d)
	}
}
