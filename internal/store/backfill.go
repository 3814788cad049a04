package store

import "time"

// ItemState is where one item of a backfill is.
type ItemState string

// The states of an item. Saved and Parked are final: the item has been
// processed, and its ProcessedAt is set, once.
const (
	ItemPending  ItemState = "pending"  // eligible, not yet processed
	ItemRejected ItemState = "rejected" // its last output was rejected; tried again from RetryAt
	ItemSaved    ItemState = "saved"    // processed: its output is saved
	ItemParked   ItemState = "parked"   // processed: rejected MaxRejects times, Reason says why last
)

// Item is one item of a backfill as sluice records it. Times are UTC at
// millisecond precision; a zero time was never set.
type Item struct {
	Backfill string
	Key      string
	State    ItemState
	// EligibleAt is when the item became eligible: when the backfill first
	// found it pending, or, for a backfill that runs after another, when
	// that one saved it. It never changes once recorded.
	EligibleAt time.Time
	// ProcessedAt is when the item was saved or parked; set once.
	ProcessedAt time.Time
	RunID       string // the run of its last attempt
	RequestID   string // the provider request of its last attempt
	Rejects     int    // outputs rejected so far
	Reason      string // why the last output was rejected
	RetryAt     time.Time
}

// Cursor is a place in the order in which NextItems returns pending
// items: by EligibleAt, then by key in byte order. The zero Cursor is
// before every item.
type Cursor struct {
	EligibleAt time.Time `json:"eligible_at"`
	Key        string    `json:"key"`
}

// IsZero reports whether c is the zero Cursor.
func (c Cursor) IsZero() bool { return c.EligibleAt.IsZero() && c.Key == "" }

// After is the cursor just past it: NextItems after it returns the pending
// items that come after it.
func (it Item) After() Cursor { return Cursor{EligibleAt: it.EligibleAt, Key: it.Key} }

// MaxLanes is how many lanes a backfill's items are spread over: each item
// is given one of them at random when it is added, and keeps it.
const MaxLanes = 1024

// Lane is a share of a backfill's items that no other Lane of the same Of
// holds: those whose lane is Index modulo Of. Of lanes together hold every
// item. The zero Lane is every item.
type Lane struct {
	Of, Index int
}

// Outcome is what became of one item of a batch.
type Outcome struct {
	Key    string
	Saved  bool
	Reason string // when not saved: why the output was rejected (non-empty)
}

// Settlement records the outcomes of one batch of a backfill.
type Settlement struct {
	Backfill  string
	RunID     string
	RequestID string
	At        time.Time
	Outcomes  []Outcome
	// MaxRejects is how many rejected outputs park an item (at least 1).
	MaxRejects int
	// RetryAfter is how long a rejected item waits before it is selected
	// again.
	RetryAfter time.Duration
	// Then names the backfills that run after this one: each item saved
	// here becomes eligible in each of them, at At.
	Then []string
	// Shard is the share of the jobs' counts the settlement changes (0 to
	// MaxLanes-1): settlements in different shards at once do not wait
	// for each other, as they would on one row per job. A backfill's
	// lanes each settle in their own.
	Shard int
}

// Job is the record of one job (a backfill) that health is judged by.
type Job struct {
	Name string
	// MonitoringSince is when the job was first recorded: a job that has
	// never made progress is judged from then, never by its items' age.
	MonitoringSince time.Time
	LastProgressAt  time.Time // when an item was last saved or parked
	LastRunAt       time.Time // when a run last ended
	// LastStatus is how the last run ended: "ok", "failed", or "" before
	// any run ended. ConsecutiveFailures counts the failed runs since the
	// last that was not; LastError says why the last failed.
	LastStatus          string
	ConsecutiveFailures int
	LastError           string
	// Items of the job in each state, kept with every change of an item.
	Pending, Rejected, Saved, Parked int64
	// Alert is the state the job was last alerted in ("" for none), so an
	// alert is sent once per change, by one process.
	Alert string
}

// BackfillRun is the record of one run of a backfill: the figures of its
// log line.
type BackfillRun struct {
	RunID     string
	Backfill  string
	StartedAt time.Time
	EndedAt   time.Time
	Selected  int            // items selected
	Retried   int            // of them, items whose earlier output was rejected
	Saved     int            // items saved
	Rejected  map[string]int // rejected outputs by reason
	Parked    int            // items parked
	// Stopped says why the run ended: "done" (nothing eligible was left),
	// "continued" (it handed on to the next run), "aborted=<why>"
	// (waiting for quota, naming the limit; failing, naming the error).
	Stopped string
}
