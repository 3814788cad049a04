package clock

import (
	"runtime"
	"testing"
	"time"
)

// checkRate checks that c moves speed times as fast as the wall clock: it
// reads c twice, each reading between two of the wall clock's, at least
// wall apart, and wants c to have moved speed times the wall time between
// the readings, as those of the wall clock bound it. The bounds hold
// however long the machine takes between any two readings.
func checkRate(t *testing.T, c *Clock, speed float64, wall time.Duration) {
	t.Helper()
	w0 := time.Now()
	a := c.Now()
	w1 := time.Now()
	for time.Since(w1) < wall {
		runtime.Gosched() // until the wall clock moved that much: it always does
	}
	w2 := time.Now()
	b := c.Now()
	w3 := time.Now()
	// Now truncates speed times the elapsed time to a nanosecond.
	lo := time.Duration(float64(w2.Sub(w1))*speed) - time.Nanosecond
	hi := time.Duration(float64(w3.Sub(w0))*speed) + time.Nanosecond
	if got := b.Sub(a); got < lo || got > hi {
		t.Fatalf("at least %v of wall time moved a speed-%v clock %v, want between %v and %v", w2.Sub(w1), speed, got, lo, hi)
	}
}

func TestFastClock(t *testing.T) {
	t.Parallel()
	c := New(1000)
	checkRate(t, c, 1000, time.Millisecond)
	if got := c.Real(time.Minute); got != 60*time.Millisecond {
		t.Fatalf("a minute at speed 1000 is %v of wall time, want 60ms", got)
	}
	prev := c.Now()
	for range 1000 {
		if now := c.Now(); now.Before(prev) {
			t.Fatalf("the clock went back from %v to %v", prev, now)
		} else {
			prev = now
		}
	}
}

func TestSlowSpeedsAreOne(t *testing.T) {
	t.Parallel()
	for _, s := range []float64{0, 0.5, -3} {
		if c := New(s); c.Speed() != 1 || c.Real(time.Second) != time.Second {
			t.Errorf("speed %v: %v, want 1", s, c.Speed())
		}
	}
	if Real(0, time.Second) != time.Second || Real(4, -time.Second) != -time.Second {
		t.Error("Real changed a duration it should leave alone")
	}
}

// A wait shorter than Speed nanoseconds of the clock is still a wait: the
// governor's loop, woken after a wait of zero, would find its clock where
// it was on a virtual clock and wait zero again.
func TestRealKeepsAPositiveWait(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		speed float64
		d     time.Duration
		want  time.Duration
	}{{720, 51, 1}, {720, 720, 1}, {720, 721, 2}, {1000, time.Minute, 60 * time.Millisecond}} {
		if got := Real(c.speed, c.d); got != c.want {
			t.Errorf("Real(%v, %v) = %v, want %v", c.speed, c.d, got, c.want)
		}
	}
}

func TestAtStartsAtItsOrigin(t *testing.T) {
	t.Parallel()
	before := time.Now()
	later := before.Add(48 * time.Hour)
	c := At(100, later)
	now := c.Now()
	if most := later.Add(100 * time.Since(before)); now.Before(later) || now.After(most) {
		t.Fatalf("a clock from %v reads %v, want at most %v", later, now, most)
	}
	// An origin in the past is no reason to turn back time.
	wall := time.Now()
	if now := At(1, wall.Add(-time.Hour)).Now(); now.Before(wall) {
		t.Fatalf("a clock from an hour ago reads %v, before the wall time %v", now, wall)
	}
	// At speed 1 from a later origin, it runs as the wall clock does.
	checkRate(t, At(1, later), 1, time.Millisecond)
}
