package clock

import (
	"testing"
	"time"
)

// A reading converts the wall clock's times to the app's and back, where
// the app's clock is not the wall clock, and leaves them as they are where
// it is.
func TestReadingConverts(t *testing.T) {
	t.Parallel()
	wall := time.Date(2026, 12, 6, 16, 50, 0, 0, time.UTC)
	app := time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		r       Reading
		w, want time.Time // a wall time and the app's time of it
		d, dApp time.Duration
	}{
		{"compressed", Reading{App: app, Wall: wall, Speed: 720}, wall.Add(-time.Second), app.Add(-12 * time.Minute), time.Second, 12 * time.Minute},
		{"compressed, at the wall clock's time", Reading{App: wall, Wall: wall, Speed: 720}, wall.Add(-5 * time.Second), wall.Add(-time.Hour), 5 * time.Second, time.Hour},
		{"an hour ahead", Reading{App: wall.Add(time.Hour), Wall: wall, Speed: 1}, wall.Add(-time.Minute), wall.Add(59 * time.Minute), time.Minute, time.Minute},
		{"an hour ahead, speed 0", Reading{App: wall.Add(time.Hour), Wall: wall}, wall.Add(-time.Minute), wall.Add(59 * time.Minute), time.Minute, time.Minute},
		{"the wall clock", Reading{App: wall.Add(30 * time.Second), Wall: wall, Speed: 1}, wall.Add(-time.Minute), wall.Add(-time.Minute), time.Minute, time.Minute},
		{"the zero reading", Reading{}, wall, wall, time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.r.ToApp(tc.w); !got.Equal(tc.want) {
				t.Errorf("ToApp(%s) = %s, want %s", tc.w, got, tc.want)
			}
			if got := tc.r.ToWall(tc.want); !got.Equal(tc.w) {
				t.Errorf("ToWall(%s) = %s, want %s", tc.want, got, tc.w)
			}
			if got := tc.r.Duration(tc.d); got != tc.dApp {
				t.Errorf("Duration(%v) = %v, want %v", tc.d, got, tc.dApp)
			}
			if !tc.r.ToApp(time.Time{}).IsZero() || !tc.r.ToWall(time.Time{}).IsZero() {
				t.Error("the zero time did not stay zero")
			}
		})
	}
}

// A time of the app's clock centuries away, as a search may give, goes
// back to the wall clock's without wrapping around.
func TestReadingSaturates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 16, 50, 0, 0, time.UTC)
	r := Reading{App: now, Wall: now, Speed: 1000}
	if got := r.ToWall(time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)); !got.Before(now) {
		t.Errorf("the year 1 is %s on the wall clock, want before %s", got, now)
	}
	if got := r.ToApp(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)); !got.After(now) {
		t.Errorf("the year 9999 is %s on the app's clock, want after %s", got, now)
	}
}

// Read reads the app's clock with the wall clock of the call.
func TestRead(t *testing.T) {
	t.Parallel()
	ahead := time.Now().Add(72 * time.Hour)
	before := time.Now()
	r := Read(func() time.Time { return ahead }, 1)
	if !r.App.Equal(ahead) || r.Wall.Before(before) || r.Wall.After(time.Now()) {
		t.Fatalf("Read = %+v, want the app at %s and the wall clock of the call", r, ahead)
	}
	if r.Label() == "" {
		t.Error("a clock three days ahead is not named")
	}
}
