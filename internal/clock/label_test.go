package clock

import (
	"testing"
	"time"
)

func TestLabel(t *testing.T) {
	t.Parallel()
	wall := time.Date(2026, 12, 6, 16, 50, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		speed float64
		now   time.Time
		want  string
	}{
		{"the wall clock", 1, wall.Add(30 * time.Second), ""},
		{"compressed", 720, wall.Add(50 * time.Hour), "simulated time, ×720"},
		{"ahead", 1, wall.Add(26*time.Hour + 5*time.Minute), "simulated time, 26h 5m ahead of the wall clock"},
		{"behind", 0, wall.Add(-2 * time.Hour), "simulated time, 2h 0m behind the wall clock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Label(tc.speed, tc.now, wall); got != tc.want {
				t.Errorf("Label(%v, %s) = %q, want %q", tc.speed, tc.now, got, tc.want)
			}
		})
	}
}
