package governor

import (
	"testing"
	"time"
)

// TestProbeKeyToldNoLimit: a governor told no limit sends its first call
// alone, and each round of accepted answers lets twice as many go; a
// failure lets the next call go but widens nothing; a minute after the
// first call nothing is held any more. A governor told a limit does not
// probe.
func TestProbeKeyToldNoLimit(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{})
	var rs []*Reservation
	for range 12 {
		rs = append(rs, mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 100, Output: 100}))
	}
	admitted := func(now time.Time) (n int) {
		g.Advance(now)
		for _, r := range rs {
			if r.Admitted() || r.state == settled {
				n++
			}
		}
		return n
	}
	if n := admitted(t0); n != 1 {
		t.Fatalf("%d calls admitted at once on a key told no limit, want 1", n)
	}
	if b := g.Blocker(t0, rs[1]); b.Kind != "probe" || b.String() != "the key's first answers" || !b.Until.Equal(at(time.Minute)) {
		t.Errorf("the second call waits on %+v (%q), want the probe until a minute after the first call", b, b.String())
	}
	// A failure the provider may have counted ends the call but is no
	// acceptance: one more goes, not two.
	rs[0].Fault(at(time.Second), Cost{})
	if n := admitted(at(time.Second)); n != 2 {
		t.Fatalf("after a fault %d calls admitted or ended, want 2", n)
	}
	now := at(2 * time.Second)
	for i, want := range []int{4, 8, 12} {
		for _, r := range rs {
			if r.Admitted() {
				r.Settle(now, Cost{Input: 100, Output: 50})
			}
		}
		if n := admitted(now); n != want {
			t.Fatalf("after round %d of accepted answers %d calls admitted or ended, want %d", i+1, n, want)
		}
		now = now.Add(time.Second)
	}

	// A caller that never ends its calls is held for the first minute only.
	quiet := mustNew(t, Config{})
	var qs []*Reservation
	for range 5 {
		qs = append(qs, mustReserve(t, quiet, t0, "a", Cost{Requests: 1}))
	}
	quiet.Advance(t0)
	quiet.Advance(at(time.Minute))
	for i, r := range qs {
		if !r.Admitted() {
			t.Errorf("call %d of a caller that ends none is still held a minute after the first", i+1)
		}
	}

	told := mustNew(t, Config{Limits: Limits{RPM: 100}})
	for i := range 10 {
		r := mustReserve(t, told, t0, "a", Cost{Requests: 1})
		told.Advance(t0)
		if !r.Admitted() {
			t.Fatalf("call %d of a governor told RPM 100 waits on %v: only a key told no limit is probed", i+1, told.Blocker(t0, r))
		}
	}
}
