// Package clock provides a clock that may run faster than the wall clock,
// for simulations in compressed time: the simulator, the governor and the
// gateway all read one Clock's Now, and divide what they sleep by its Speed.
// A Reading puts times the wall clock recorded on such a clock, and back.
package clock

import (
	"math"
	"sync"
	"time"
)

// Clock is a clock that runs Speed times as fast as the wall clock from
// the moment it was made. Its Now never goes backwards. A Clock is safe for
// simultaneous use by multiple goroutines.
type Clock struct {
	speed  float64
	origin time.Time // the wall time when it was made: Now starts here
	start  time.Time // the same, with its monotonic reading

	mu   sync.Mutex
	last time.Time
}

// New returns a clock running speed times as fast as the wall clock
// (speed ≤ 1 is treated as 1: a clock never runs slow).
func New(speed float64) *Clock { return At(speed, time.Time{}) }

// At returns a clock running speed times as fast as the wall clock whose
// Now starts at origin, or at the wall time if origin is zero or earlier:
// a rehearsal in compressed time that resumes where the last one stopped
// (origin, as it recorded it) rather than a day or more before the times it
// left in its records.
func At(speed float64, origin time.Time) *Clock {
	if !(speed > 1) {
		speed = 1
	}
	now := time.Now()
	o := now.Round(0)
	if origin.After(o) {
		o = origin.Round(0)
	}
	return &Clock{speed: speed, origin: o, start: now}
}

// Speed is how many times as fast as the wall clock c runs.
func (c *Clock) Speed() float64 { return c.speed }

// Now returns the clock's time: its origin plus Speed times the wall time
// elapsed since.
func (c *Clock) Now() time.Time {
	if c.speed == 1 && c.origin.Equal(c.start.Round(0)) {
		return time.Now()
	}
	t := c.origin.Add(time.Duration(float64(time.Since(c.start)) * c.speed))
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.last) {
		t = c.last
	}
	c.last = t
	return t
}

// Real converts a duration on c into wall time: d divided by Speed.
func (c *Clock) Real(d time.Duration) time.Duration { return Real(c.speed, d) }

// Real converts a duration on a clock of the given speed into wall time; a
// speed of 0 or 1 leaves it as it is. It rounds up: a positive wait stays
// positive, so a loop that waits until its clock reaches a time less than
// Speed nanoseconds away waits a nanosecond, after which the clock has
// reached it, rather than not at all — on a clock that moves only when
// every goroutine waits (testing/synctest), a wait of zero never lets it
// move, and such a loop would spin for good.
func Real(speed float64, d time.Duration) time.Duration {
	if speed <= 1 || d <= 0 {
		return d
	}
	return time.Duration(math.Ceil(float64(d) / speed))
}
