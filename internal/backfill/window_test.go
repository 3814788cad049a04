package backfill

import (
	"testing"
	"time"
)

// clock is a clock a test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time                   { return c.t }
func (c *clock) add(d time.Duration)              { c.t = c.t.Add(d) }
func newClock() *clock                            { return &clock{t: time.Unix(1_700_000_000, 0)} }
func perSecond(r float64) func(time.Time) float64 { return func(time.Time) float64 { return r } }

// drive makes calls through w for d of c's clock: each admitted after
// waiting wait and answered latency later, as many going as w allows, the
// governor admitting at most admit a second (0: any).
func drive(w *window, c *clock, d, latency, wait time.Duration, admit float64) {
	type out struct {
		c  *call
		at time.Time
	}
	var going []out
	var next time.Time // when the governor admits the next call
	step := 10 * time.Millisecond
	for end := c.t.Add(d); c.t.Before(end); c.add(step) {
		for len(going) > 0 && !going[0].at.After(c.t) {
			going[0].c.Answered(latency)
			going[0].c.end()
			going = going[1:]
		}
		for len(going) < w.limit() && !c.t.Before(next) {
			k := w.begin()
			k.Admitted(wait)
			going = append(going, out{c: k, at: c.t.Add(latency)})
			if admit > 0 {
				next = c.t.Add(time.Duration(float64(time.Second) / admit))
			}
		}
	}
	for _, o := range going {
		o.c.end()
	}
}

// Calls admitted without waiting: the window keeps what the key's limits
// admit times the latency, with headroom — 10 a second at 5 s is 62.
func TestWindowGrowsToTheQuota(t *testing.T) {
	c := newClock()
	w := newWindow(0, c.now, perSecond(10))
	if n := w.limit(); n != startWindow {
		t.Fatalf("limit before any call %d, want %d", n, startWindow)
	}
	drive(w, c, time.Minute, 5*time.Second, 0, 0)
	st := w.state()
	if st.Target < 60 || st.Target > 65 || st.LimitedBy != LimitedByQuota {
		t.Fatalf("after a minute at 5 s with 10 calls a second admitted: %+v, want a target of about 62, limited by the quota", st)
	}
}

// Calls that wait in line for a whole latency bring the window down to the
// rate admitted times the latency, with headroom.
func TestWindowShrinksWhenCallsWait(t *testing.T) {
	c := newClock()
	w := newWindow(0, c.now, perSecond(100)) // the limits say more than the governor admits
	drive(w, c, 30*time.Second, 2*time.Second, 0, 0)
	if st := w.state(); st.Target < 240 {
		t.Fatalf("before any wait: %+v, want the limits' 250", st)
	}
	drive(w, c, time.Minute, 2*time.Second, time.Second, 10)
	st := w.state()
	if st.Target < 20 || st.Target > 30 || st.LimitedBy != LimitedByQuota {
		t.Fatalf("after a minute of waits at 10 calls a second admitted, 2 s latency: %+v, want about 25, limited by the quota", st)
	}
}

// A set InFlight bounds the calls going, and the state says the setting,
// not the quota, holds the backfill there.
func TestWindowKeepsToInFlight(t *testing.T) {
	c := newClock()
	w := newWindow(4, c.now, perSecond(10))
	drive(w, c, time.Minute, 5*time.Second, 0, 0)
	if n := w.limit(); n != 4 {
		t.Fatalf("limit %d, want the InFlight of 4", n)
	}
	st := w.state()
	if st.Target < 60 || st.LimitedBy != LimitedByInFlight {
		t.Fatalf("%+v: want a target of about 62, limited by in_flight", st)
	}
}

// With no limit known the window doubles each latency while no call waits,
// up to MaxInFlight, where the latency is what limits it.
func TestWindowDoublesWithNoLimitKnown(t *testing.T) {
	c := newClock()
	w := newWindow(0, c.now, perSecond(0))
	drive(w, c, 3*time.Second, time.Second, 0, 0)
	if st := w.state(); st.Target < 8 || st.Target > 64 || st.LimitedBy != LimitedByGrowing {
		t.Fatalf("after 3 latencies: %+v, want a doubling target, growing", st)
	}
	drive(w, c, 30*time.Second, time.Second, 0, 0)
	if st := w.state(); st.Target != MaxInFlight || st.LimitedBy != LimitedByLatency {
		t.Fatalf("after 30 latencies: %+v, want %d, limited by latency", st, MaxInFlight)
	}
}

// Until the first answers, the latency is at least how long the oldest
// call has been out: the window grows before any call is answered.
func TestWindowGrowsBeforeTheFirstAnswer(t *testing.T) {
	c := newClock()
	w := newWindow(0, c.now, perSecond(10))
	k := w.begin()
	k.Admitted(0)
	c.add(20 * time.Second)
	if n := w.limit(); n < 240 {
		t.Fatalf("limit %d with a call out for 20 s at 10 a second, want about 250", n)
	}
}

func TestShares(t *testing.T) {
	for limit, want := range map[int]int{0: 1, 1: 1, 2: 4, 3: 8, 4: 8, 62: 128, 600: 1024, 1024: 1024} {
		if got := shares(limit); got != want {
			t.Errorf("shares(%d) = %d, want %d", limit, got, want)
		}
	}
}

// The window keeps the latest admitsKept admissions, oldest first, once it
// has seen more: the rate is measured from them.
func TestWindowKeepsTheLatestAdmissions(t *testing.T) {
	c := newClock()
	w := newWindow(0, c.now, perSecond(0))
	first := c.t
	for range admitsKept + 100 {
		w.begin().Admitted(0)
		c.add(time.Millisecond)
	}
	a := &w.admits
	if a.len() != admitsKept {
		t.Fatalf("%d admissions kept, want %d", a.len(), admitsKept)
	}
	for i := range a.len() {
		if want := first.Add(time.Duration(100+i) * time.Millisecond); !a.at(i).Equal(want) {
			t.Fatalf("admission %d kept at %v, want %v", i, a.at(i), want)
		}
	}
	// A thousand a second over the last second.
	if r := w.rate(c.t, time.Second); r < 999 || r > 1001 {
		t.Fatalf("rate %v a second, want 1000", r)
	}
}
