package driver

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// CheckCharges returns an error naming the first charge a driver must not
// store: an empty key or ID would make a charge impossible to settle later.
func CheckCharges(key string, charges []store.Charge) error {
	if key == "" {
		return fmt.Errorf("empty key")
	}
	for i, c := range charges {
		if c.ID == "" {
			return fmt.Errorf("charge %d (flow %q) has an empty ID", i, c.Flow)
		}
	}
	return nil
}

// LastByID returns charges with only the last one given for each ID, sorted
// by ID. A single multi-row upsert cannot touch a row twice, and writers that
// lock rows in the same order cannot deadlock each other.
func LastByID(charges []store.Charge) []store.Charge {
	last := make(map[string]int, len(charges))
	for i, c := range charges {
		last[c.ID] = i
	}
	out := make([]store.Charge, 0, len(last))
	for i, c := range charges {
		if last[c.ID] == i {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Millis truncates t to the millisecond in UTC: the precision both drivers
// store and compare times at.
func Millis(t time.Time) time.Time {
	return t.Truncate(time.Millisecond).UTC()
}
