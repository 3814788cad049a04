package clock

import (
	"testing"
	"time"
)

func TestFastClock(t *testing.T) {
	t.Parallel()
	c := New(1000)
	t0 := c.Now()
	time.Sleep(20 * time.Millisecond)
	if d := c.Now().Sub(t0); d < 20*time.Second {
		t.Fatalf("20 ms of wall time at speed 1000 moved the clock %v, want 20 s at least", d)
	}
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

func TestAtStartsAtItsOrigin(t *testing.T) {
	t.Parallel()
	later := time.Now().Add(48 * time.Hour)
	c := At(100, later)
	if now := c.Now(); now.Before(later) || now.After(later.Add(time.Hour)) {
		t.Fatalf("a clock from %v reads %v", later, now)
	}
	// An origin in the past is no reason to turn back time.
	wall := time.Now()
	if now := At(1, wall.Add(-time.Hour)).Now(); now.Before(wall) {
		t.Fatalf("a clock from an hour ago reads %v, before the wall time %v", now, wall)
	}
	// At speed 1 from a later origin, it runs as the wall clock does.
	d := At(1, later)
	t0 := d.Now()
	time.Sleep(5 * time.Millisecond)
	if got := d.Now().Sub(t0); got < 5*time.Millisecond || got > time.Minute {
		t.Fatalf("5 ms of wall time moved a speed-1 clock %v", got)
	}
}
