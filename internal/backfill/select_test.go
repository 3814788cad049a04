package backfill

import (
	"maps"
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/internal/store"
)

// The items of the batch before that the next read may return are those
// rejected before and those parked as too large: its pending items lie
// before the cursor the read starts from.
func TestReturningItems(t *testing.T) {
	for _, c := range []struct {
		name string
		skip batch
		want []string
	}{
		{"none", batch{}, nil},
		{"pending only", batch{Keys: []string{"a", "b"}, Rejects: []int{0, 0}}, nil},
		{"rejected before", batch{Keys: []string{"a", "b", "c"}, Rejects: []int{0, 2, 1}}, []string{"b", "c"}},
		{"too large", batch{TooLarge: []store.Outcome{{Key: "x", Reason: "too large"}}}, []string{"x"}},
		{"no rejects recorded", batch{Keys: []string{"a"}}, []string{"a"}},
		{"gone", batch{Gone: []string{"g", "h"}, GoneRejects: []int{0, 1}}, []string{"h"}},
		{"gone, no rejects recorded", batch{Gone: []string{"g"}}, []string{"g"}},
	} {
		got := slices.Sorted(maps.Keys(returning(c.skip)))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: returning %v, want %v", c.name, got, c.want)
		}
	}
}
