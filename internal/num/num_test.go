package num

import (
	"math"
	"testing"
)

func TestGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {1252, "1,252"}, {-1000, "-1,000"}, {-999, "-999"},
		{123456789, "123,456,789"}, {math.MaxInt64, "9,223,372,036,854,775,807"}, {math.MinInt64, "-9,223,372,036,854,775,808"},
	} {
		if got := Group(tc.n); got != tc.want {
			t.Errorf("Group(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
