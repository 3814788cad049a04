package clock

import (
	"math"
	"time"
)

// Reading is an app's clock and the wall clock read at one moment, with
// the app clock's speed: what converts a time the wall clock recorded (DBOS
// records its runs so) to the app's clock, and a time of the app's clock
// back to the wall clock's, for a search of those records.
//
// The conversion assumes the app's clock ran at Speed, without a break,
// from the time converted until the reading: then it is exact. A time
// recorded before the clock was last started elsewhere (a rehearsal
// resumed on its database, whose clock starts where the last one stopped)
// lands where the clock would have been had it run on without the break:
// earlier than the clock then said, by the break times Speed.
//
// Where the app's clock is the wall clock, as Label tells (speed 1, within
// a minute of it), every time stays as it is: a page of an app on the wall
// clock shows DBOS's times unchanged.
type Reading struct {
	App, Wall time.Time // the two clocks at one moment
	Speed     float64   // how many times as fast as the wall clock App runs; 1 or less is 1
}

// Read reads the app's clock now, of the given speed, and the wall clock.
// The wall clock is read before and after it, and the middle taken: the
// two readings are apart by as little as the machine allows, and a
// conversion is off by Speed times half of that at most.
func Read(now func() time.Time, speed float64) Reading {
	w0 := time.Now()
	app := now()
	w1 := time.Now()
	return Reading{App: app, Wall: w0.Add(w1.Sub(w0) / 2).Round(0), Speed: speed}
}

// speed is the reading's Speed, 1 for one of 1 or less (or NaN).
func (r Reading) speed() float64 {
	if !(r.Speed > 1) {
		return 1
	}
	return r.Speed
}

// Label names the app's clock where it is not the wall clock, as the
// package's Label does; "" where it is, and times are not converted.
func (r Reading) Label() string { return Label(r.Speed, r.App, r.Wall) }

// converts reports whether times are converted: the app's clock is not the
// wall clock.
func (r Reading) converts() bool { return r.Label() != "" }

// ToApp converts w, a time of the wall clock, to the app's clock: App less
// Speed times the wall time since w. The zero time stays zero.
func (r Reading) ToApp(w time.Time) time.Time {
	if w.IsZero() || !r.converts() {
		return w
	}
	return r.App.Add(scale(w.Sub(r.Wall), r.speed())).UTC()
}

// ToWall converts t, a time of the app's clock, to the wall clock's: ToApp
// backwards. The zero time stays zero.
func (r Reading) ToWall(t time.Time) time.Time {
	if t.IsZero() || !r.converts() {
		return t
	}
	return r.Wall.Add(scale(t.Sub(r.App), 1/r.speed())).UTC()
}

// Duration converts d, a span of wall time between two times ToApp
// converts, to the app's clock: d times Speed.
func (r Reading) Duration(d time.Duration) time.Duration {
	if !r.converts() {
		return d
	}
	return scale(d, r.speed())
}

// scale is d times f, saturated at the longest durations either way: a
// time from outside (a search's since) may be centuries away.
func scale(d time.Duration, f float64) time.Duration {
	v := float64(d) * f
	switch {
	case v >= math.MaxInt64:
		return math.MaxInt64
	case v <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(v)
}
