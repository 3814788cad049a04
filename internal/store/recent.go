package store

import "time"

// MaxRecentItems bounds the limit of RecentItems.
const MaxRecentItems = 1000

// RecentItem is an item of a backfill as RecentItems lists it: its record
// and when it last changed.
type RecentItem struct {
	Item
	// ActiveAt is the item's latest activity: when it was added (its
	// EligibleAt) until an outcome of it is settled, then when its last
	// outcome was (for a saved or parked item, its ProcessedAt). A
	// rejected item recorded before the store kept this time counts its
	// EligibleAt until its next outcome. UTC at millisecond precision.
	ActiveAt time.Time
}

// RecentCursor is a place in the order in which RecentItems returns
// items: latest ActiveAt first, then by key in reverse byte order. The
// zero RecentCursor is before every item. A cursor with a time and no key
// is past every item active in that millisecond: RecentItems after it
// returns the items active before At.
type RecentCursor struct {
	At  time.Time `json:"at"`
	Key string    `json:"key"`
}

// IsZero reports whether c is the zero RecentCursor.
func (c RecentCursor) IsZero() bool { return c.At.IsZero() && c.Key == "" }

// Before is the cursor just past it: RecentItems after it returns the
// items that come after it, the older ones.
func (it RecentItem) Before() RecentCursor { return RecentCursor{At: it.ActiveAt, Key: it.Key} }
