package driver

import (
	"fmt"
	"time"
)

// Millis truncates t to the millisecond in UTC: the precision both drivers
// store and compare times at.
func Millis(t time.Time) time.Time {
	return t.Truncate(time.Millisecond).UTC()
}

// timestamp scans a column of times of either driver into *t, in UTC:
// SQLite's INTEGER Unix milliseconds or PostgreSQL's timestamptz.
type timestamp struct{ t *time.Time }

func (s timestamp) Scan(v any) error {
	switch v := v.(type) {
	case int64:
		*s.t = time.UnixMilli(v).UTC()
	case time.Time:
		*s.t = v.UTC()
	default:
		return fmt.Errorf("a time stored as %T", v)
	}
	return nil
}
