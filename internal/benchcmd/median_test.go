package benchcmd

import (
	"math"
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{0.9, 1.5, 0.7}, 0.9},
		{[]float64{1, 0.5, 0.9, 0.8}, 0.85},
	} {
		in := slices.Clone(tc.in)
		if got := median(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("median reordered its input: %v, was %v", tc.in, in)
		}
	}
}
