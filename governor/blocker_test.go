package governor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBlockerNamesWhatAWaitingCallWaitsOn: a window, a day pacer, a pause,
// or its turn in line — each named, with when it ends.
func TestBlockerNamesWhatAWaitingCallWaitsOn(t *testing.T) {
	t.Parallel()
	t.Run("a minute window", func(t *testing.T) {
		g := mustNew(t, Config{Limits: Limits{TPM: 1000}})
		mustReserve(t, g, at(0), "a", Cost{Requests: 1, Input: 900})
		g.Advance(at(0))
		r := mustReserve(t, g, at(time.Second), "b", Cost{Requests: 1, Input: 500})
		g.Advance(at(time.Second))
		b := g.Blocker(at(time.Second), r)
		if b.Kind != "limit" || b.Limit != TPM || !b.Until.Equal(at(time.Minute)) || b.String() != "tpm" {
			t.Errorf("blocker %+v (%s), want tpm until one minute after the first call", b, b)
		}
	})
	t.Run("day pacing", func(t *testing.T) {
		g := mustNew(t, Config{Limits: Limits{TPD: 100000}})
		mustReserve(t, g, at(0), "a", Cost{Requests: 1, Input: 5000})
		g.Advance(at(0))
		r := mustReserve(t, g, at(time.Second), "a", Cost{Requests: 1, Input: 5000})
		g.Advance(at(time.Second))
		b := g.Blocker(at(time.Second), r)
		if b.Kind != "pacing" || b.Limit != TPD || b.String() != "tpd pacing" || !b.Until.After(at(time.Minute)) {
			t.Errorf("blocker %+v (%s), want tpd pacing for minutes", b, b)
		}
		st := g.Stats(at(time.Second))
		if st.Flows[0].WaitingOn != b {
			t.Errorf("Stats says %+v, Blocker %+v", st.Flows[0].WaitingOn, b)
		}
	})
	t.Run("a pause", func(t *testing.T) {
		g := mustNew(t, Config{Limits: Limits{TPM: 1000}})
		in(g).RejectedUnclassified(at(0))
		r := mustReserve(t, g, at(0), "a", Cost{Requests: 1, Input: 5})
		g.Advance(at(0))
		if b := g.Blocker(at(0), r); b.Kind != "pause" || !b.Until.Equal(at(time.Second)) {
			t.Errorf("blocker %+v, want a pause of 1s", b)
		}
	})
	t.Run("its turn", func(t *testing.T) {
		g := mustNew(t, Config{Limits: Limits{TPM: 1000}})
		r := mustReserve(t, g, at(0), "a", Cost{Requests: 1, Input: 5})
		if b := g.Blocker(at(0), r); b.Kind != "turn" || b.String() != "its turn" {
			t.Errorf("blocker %+v, want its turn", b)
		}
		g.Advance(at(0))
		if b := g.Blocker(at(0), r); b != (Blocker{}) {
			t.Errorf("an admitted call's blocker %+v, want none", b)
		}
	})
}

func TestWaitErrorNamesTheBlocker(t *testing.T) {
	t.Parallel()
	now := at(0)
	g := mustNew(t, Config{Limits: Limits{TPD: 100000}, Now: func() time.Time { return now }})
	if _, err := g.Wait(context.Background(), "a", Cost{Requests: 1, Input: 5000}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := g.Wait(ctx, "a", Cost{Requests: 1, Input: 5000})
	var we *WaitError
	if !errors.As(err, &we) || we.On.Kind != "pacing" || !strings.Contains(err.Error(), "waiting on tpd pacing until ") {
		t.Fatalf("Wait: %v", err)
	}
}
