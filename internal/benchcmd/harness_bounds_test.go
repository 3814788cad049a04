package benchcmd

import (
	"testing"
	"time"
)

// A bench refuses a flag out of its bounds in the words it always has:
// numbers as they are, durations without their zero units.
func TestBetween(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{between("stops", -1, 0, 10_000), "--stops must be between 0 and 10000"},
		{between("stop-grace", 2*time.Hour, 0, time.Hour), "--stop-grace must be between 0 and 1h"},
		{between("first-byte", 0, time.Millisecond, time.Hour), "--first-byte must be between 1ms and 1h"},
		{between("latency", 2*time.Minute, 0, time.Minute), "--latency must be between 0 and 1m"},
		{between("wait", time.Second, 90*time.Minute, 10*time.Hour), "--wait must be between 1h30m and 10h"},
		{between("wait", 0, 1500*time.Millisecond, 10*time.Minute), "--wait must be between 1.5s and 10m"},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("got %v, want %q", tc.err, tc.want)
		}
	}
	for _, err := range []error{between("events", 0, 0, 1), between("events", 1, 0, 1), between("lag", time.Hour, 0, time.Hour)} {
		if err != nil {
			t.Errorf("a value within its bounds refused: %v", err)
		}
	}
}
