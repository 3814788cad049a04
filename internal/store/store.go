// Package store is sluice's own storage: the few tables sluice keeps next to
// DBOS's (DBOS owns workflows, steps and queues): the governor's charges,
// the engine's rate-limit counts, dropped events and run ends, the
// backfills' items, jobs and runs, the history of configurations and of
// what each flow did, and the leases of a provider key's capacity that
// processes sharing the key take. One interface,
// Store, is implemented by two drivers, internal/store/sqlite (the default:
// one file shared with DBOS) and internal/store/postgres (many nodes on one
// server), and both must pass the same conformance suite,
// internal/store/storetest. A Store also gives DBOS its database's handle
// (Handle), so that DBOS's tables and sluice's share one pool, and holds
// the locks that keep one process at a time at a thing on the database
// (LockExecutor, LockDBOSMigrations), so that the engine takes them with
// no SQL of its own.
//
// Open picks the driver from a URL. A driver makes itself known to Open by
// registering from init, the way database/sql drivers do, because the drivers
// depend on this package for Charge and Store and so cannot be imported by it.
// A program that calls Open imports the drivers it wants to offer:
//
//	import (
//		_ "github.com/sluice-dev/sluice/internal/store/postgres"
//		_ "github.com/sluice-dev/sluice/internal/store/sqlite"
//	)
//
// Every driver applies its numbered schema migrations when it opens a
// database, once, recorded in a sluice_migrations table, and safely when
// several processes open the same database at the same moment.
package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-dev/sluice/governor"
)

// Charge is one admitted call's charge on a provider key, as the governor
// recorded it.
type Charge struct {
	// ID is the reservation id, unique per key. Upserting a charge with an ID
	// already stored on the key replaces that charge: that is how a call's
	// charge is settled with the usage the provider reported.
	ID   string
	Flow string
	// At is when the call was admitted. Drivers store it in UTC truncated to
	// the millisecond, and compare times at that precision.
	At   time.Time
	Cost governor.Cost
}

// Store holds sluice's own tables. Implementations are safe for simultaneous
// use by multiple goroutines, and by several processes on one database.
//
// Every time argument and result is compared and returned at millisecond
// precision in UTC: a charge admitted at 10:00:00.1234 is returned with At
// 10:00:00.123 UTC, and is found by Charges(since 10:00:00.123999).
//
// A charge's key names a provider key as the governor configured it
// ("groq", "openai/gpt-4o"), never the secret itself: it is stored in
// clear.
type Store interface {
	// UpsertCharges records charges on key in one transaction, replacing any
	// stored with the same (key, ID). Within one call, the last charge given
	// for an ID wins. No charges is a no-op; an empty key or ID is an error.
	UpsertCharges(ctx context.Context, key string, charges []Charge) error

	// Charges returns the charges on key admitted at or after since, oldest
	// first; charges admitted in the same millisecond come in ID order.
	Charges(ctx context.Context, key string, since time.Time) ([]Charge, error)

	// PruneCharges deletes the charges on key admitted before before and
	// returns how many it deleted.
	PruneCharges(ctx context.Context, key string, before time.Time) (int64, error)

	// CountStart counts one event start of function under key (empty when
	// the rate limit has no key) in the fixed window of length period that
	// contains now, and reports whether the window's count, this start
	// included, is at most limit. The increment and the check are one
	// statement, so concurrent callers never both take a window's last slot;
	// a start beyond the limit is counted too. Windows start at multiples of
	// period (in whole milliseconds) since the Unix epoch. The start that
	// opens a window deletes the older windows of function and key, so a
	// later start in one of those counts from zero again. An empty function,
	// a period under a millisecond or a limit under 1 is an error.
	CountStart(ctx context.Context, function, key string, period time.Duration, limit int, now time.Time) (within bool, err error)

	// RecordDroppedEvent records an event a rate limit dropped. Recording
	// an event already recorded for the same function and event ID changes
	// nothing: the first record stays. An empty function or event ID is an
	// error.
	RecordDroppedEvent(ctx context.Context, ev DroppedEvent) error

	// DroppedEvents returns at most limit dropped events, newest first (those
	// dropped in the same millisecond in function, then event ID, order), of
	// function only unless function is empty. A limit under 1 is an error.
	DroppedEvents(ctx context.Context, function string, limit int) ([]DroppedEvent, error)

	// RecordCancel records end, the end of a run cancelled on request
	// (normally with an empty Step: the run adds it when it stops, see
	// RecordRunEnd), unless the run has a record already, which stays as
	// it is. An empty RunID or Status is an error.
	RecordCancel(ctx context.Context, end RunEnd) error

	// RecordRunEnd records end, written by the run itself as it stops. If
	// the run has a record with an empty Step (a cancel RecordCancel
	// recorded before the run stopped), the record takes end's Reason, Step
	// and Attempt, and end's StartedAt if it had none; its Status and EndedAt
	// stay. A record with a Step stays as it is, and so does a cancelled or
	// timed-out one when end is a failure (Status "failed"): a run being
	// stopped fails as DBOS refuses its records, and was stopped all the
	// same. An empty RunID or Status is an error.
	RecordRunEnd(ctx context.Context, end RunEnd) error

	// RunEnds returns the records of the runs runIDs names, by run ID; a run
	// without a record is not in the map. No run IDs is an empty map.
	RunEnds(ctx context.Context, runIDs []string) (map[string]RunEnd, error)

	// Backfills: items, jobs and runs (see Item, Job and BackfillRun).
	// Names and keys are compared and ordered as bytes on both databases.
	// A backfill name, job name, item key, request ID or alert state is at
	// most MaxKeyBytes, a run ID at most MaxRunIDBytes, each valid UTF-8
	// without NUL, or the call is an error that writes nothing. Reasons,
	// failures and a run's Stopped are cut to MaxReasonBytes on a UTF-8
	// boundary instead, with invalid UTF-8 and NUL bytes replaced by
	// U+FFFD. A zero time where a method records one is an error.

	// AddItems records as pending, eligible at at, each of keys that
	// backfill has no record of, and returns how many it added: a key
	// given twice counts once, and a key with a record, in any state,
	// stays as it is. With after non-empty, only the keys that backfill
	// after has saved are added; the others are left out, which is no
	// error. In the same transaction the job named backfill is created if
	// new, monitored from at (as StartJob does), and its Pending count
	// grows by the number added. No keys adds nothing but still creates
	// the job. An empty backfill name is an error.
	AddItems(ctx context.Context, backfill string, keys []string, at time.Time, after string) (int, error)

	// AddItemsIn is AddItems in tx, a transaction its caller opened and
	// will commit or roll back (as Settle's tx): the items and the job's
	// counts are recorded with the caller's other writes or not at all. A
	// nil tx is AddItems.
	AddItemsIn(ctx context.Context, tx Tx, backfill string, keys []string, at time.Time, after string) (int, error)

	// NextItems returns at most limit items of backfill that may be
	// processed at now: the pending ones after the cursor after, and the
	// rejected ones whose RetryAt is at or before now, wherever they are;
	// earliest EligibleAt first, then by key. The zero Cursor is before
	// every item. It changes nothing: the same items come back until they
	// are settled. An unknown backfill has no items. An empty backfill
	// name, a limit under 1, a cursor whose key could not be stored or a
	// lane out of range is an error. With a lane, only that lane's items
	// come back: a caller going through each lane of Of at once never
	// takes an item another one does.
	//
	// A caller that goes through the items in order passes the place of
	// the last pending item it took: on PostgreSQL the read then starts
	// there in the index, instead of walking past the entries the items
	// processed before it left behind until VACUUM clears them.
	NextItems(ctx context.Context, backfill string, now time.Time, limit int, after Cursor, lane Lane) ([]Item, error)

	// Settle records the outcomes of one batch of s.Backfill in tx, the
	// transaction of the step that saved the batch's outputs, so that the
	// outcomes and the saves commit together or not at all; with a nil tx
	// it runs in a transaction of its own. tx must be on the store's
	// database; Settle neither commits nor rolls it back. Called within a
	// transaction, pass it: on SQLite a transaction of Settle's own would
	// wait for the write lock the open one holds.
	//
	// A saved outcome makes its item ItemSaved with ProcessedAt s.At. A
	// rejected one adds 1 to the item's Rejects and records its Reason:
	// the item becomes ItemParked with ProcessedAt s.At once Rejects
	// reaches s.MaxRejects, ItemRejected with RetryAt s.At+s.RetryAfter
	// before. Every item the call changes records s.RunID and s.RequestID.
	// An item already saved or parked stays as it is, and so does one
	// that records s.RunID and s.RequestID already: settling the same
	// batch twice changes nothing. Each item the call saves becomes
	// pending, eligible at s.At, in each backfill of s.Then that has no
	// record of it (see AddItems). The jobs' counts, and LastProgressAt of
	// the job s.Backfill (the latest At at which an item was saved or
	// parked), change in the same transaction; when the call saves items,
	// each job of s.Then is created if new, monitored from s.At.
	//
	// No outcomes changes nothing. Refused without writing anything: a key
	// s.Backfill has no record of (the error names it), a key given twice,
	// an empty RunID or RequestID, a rejected outcome without a reason, a
	// MaxRejects under 1, a negative RetryAfter, or a name or key the
	// bounds above refuse. Any other error leaves tx for its owner to roll
	// back.
	Settle(ctx context.Context, tx Tx, s Settlement) error

	// Items returns the records of keys of backfill, in key order; a key
	// without a record is left out, and a key given twice comes once. No
	// keys, or an unknown backfill, is no items. An empty backfill name
	// is an error.
	Items(ctx context.Context, backfill string, keys []string) ([]Item, error)

	// RecentItems returns at most limit items of backfill (1 to
	// MaxRecentItems) by their latest activity, newest first: the items
	// that come after before in the order of RecentCursor (the zero
	// RecentCursor: from the newest), each with its ActiveAt. A page's
	// last item's Before is where the next page starts. It reads only
	// the page, whatever the number of items. An empty backfill name, a
	// limit out of range or a cursor whose key could not be stored is an
	// error; so is a backfill with no job, wrapping ErrNoJob (a job with
	// no items has none).
	RecentItems(ctx context.Context, backfill string, limit int, before RecentCursor) ([]RecentItem, error)

	// StartJob records job name, monitored from at, unless it is recorded
	// already: then nothing changes. An empty name is an error.
	StartJob(ctx context.Context, name string, at time.Time) error

	// Job returns the record of job name, or an error wrapping ErrNoJob
	// when there is none. It reads one row, whatever the number of items:
	// the counts are kept with every change of an item, not counted.
	Job(ctx context.Context, name string) (Job, error)

	// Jobs returns every job's record, by name; none is an empty list.
	Jobs(ctx context.Context) ([]Job, error)

	// RecordJobRun records that a run of job name ended at at, and creates
	// the job, monitored from at, if new. LastRunAt becomes at. An empty
	// failure is a success: LastStatus "ok", ConsecutiveFailures 0,
	// LastError kept. Otherwise LastStatus is "failed",
	// ConsecutiveFailures grows by 1 and LastError is failure, cut to
	// MaxReasonBytes. An empty name is an error.
	RecordJobRun(ctx context.Context, name string, at time.Time, failure string) error

	// SetJobAlert sets job name's Alert to to if it is from, and reports
	// whether it did. The test and the change are one statement: of
	// several processes that see the same change and call SetJobAlert with
	// the same from and to, exactly one is told true, and sends the alert.
	// An empty from or to is no alert. An unknown job is an error wrapping
	// ErrNoJob.
	SetJobAlert(ctx context.Context, name, from, to string) (bool, error)

	// RecordBackfillRun records r; recording the same RunID again replaces
	// the record, its Backfill included. An empty RunID or Backfill or a
	// negative figure is an error. Reasons of Rejected that become the
	// same once cut are counted together.
	RecordBackfillRun(ctx context.Context, r BackfillRun) error

	// BackfillRuns returns at most limit runs of backfill, or of every
	// backfill when it is empty, newest EndedAt first, then by RunID. A
	// limit under 1 is an error.
	BackfillRuns(ctx context.Context, backfill string, limit int) ([]BackfillRun, error)

	// History: the configurations processes ran with and what each flow
	// did minute by minute (see ConfigVersion and Sample), for reports
	// over days. Names are compared and ordered as bytes on both
	// databases, and bounded as backfills' are: a source, hash, flow,
	// state or limit name is at most MaxKeyBytes of valid UTF-8 without
	// NUL, or the call is an error that writes nothing; a Code or Reason
	// is cut to MaxReasonBytes, invalid UTF-8 and NUL replaced by U+FFFD.

	// RecordConfig records v unless the latest version of v.Source (by
	// At, then the order they were recorded in) has the same Hash, and
	// reports whether it recorded v: a restart with an unchanged
	// configuration records nothing. The test and the record are one
	// step: of several processes of one source that record the same
	// version at once, one is told true. Another source's versions play
	// no part. An empty Source or Hash, a zero At, a Config that is not
	// JSON (or not UTF-8) or is over MaxConfigBytes is an error that
	// writes nothing.
	RecordConfig(ctx context.Context, v ConfigVersion) (bool, error)

	// ConfigVersions returns the versions of every source recorded at or
	// after since and, before them, per source, the last one recorded
	// before since: the one in effect when the window starts. They come
	// oldest first (by At, then the order they were recorded in); none is
	// an empty list.
	ConfigVersions(ctx context.Context, since time.Time) ([]ConfigVersion, error)

	// RecordSamples records samples in one transaction. A sample with the
	// same (Flow, Source, At) as one recorded — another process's of the
	// same source, in the same millisecond — is added to it: Done,
	// Admitted, Tokens, Money and each limit's Rejections and Refusals are
	// the sums of both (at most the largest int64), as what the processes
	// did adds up; Priced is either's; State, Reason, Remaining and
	// Budgets, how things stood at At, are the later one's. Within one
	// call, samples of one (Flow, Source, At) are added up so in the order
	// given, as if recorded one by one. No samples is a no-op. A negative
	// count, amount of money or budget, an empty Flow or Source, a zero
	// At, an empty limit name in Rejections, Refusals or Budgets, or a name
	// the bounds above refuse is an error that writes nothing.
	RecordSamples(ctx context.Context, samples []Sample) error

	// Samples returns the samples with since <= At < until, of flow only
	// unless flow is empty, ordered by At, then Flow, then Source; none is
	// an empty list. A flow the bounds refuse is an error.
	Samples(ctx context.Context, since, until time.Time, flow string) ([]Sample, error)

	// PruneHistory deletes the samples with At before before and returns
	// how many it deleted. It deletes them oldest first, a thousand in
	// each transaction, so that other writers go on in between; an
	// error ends it with those deleted so far. Config versions are kept:
	// they are few, and the one in effect is needed however old it is.
	PruneHistory(ctx context.Context, before time.Time) (int64, error)

	// Leases: capacity on a provider key that several processes share
	// (see LeaseRequest and Lease). A key or node is at most MaxKeyBytes,
	// a lease ID at most MaxLeaseIDBytes, each valid UTF-8 without NUL, or
	// the call is an error that writes nothing.

	// TakeLease grants req.Node a lease of what fits on req.Key (see
	// Grant), in one transaction serialized with every other TakeLease of
	// the key, so two nodes never both take the last room: the leases
	// that count at req.At (Until > At − the limit's period) are summed,
	// the node's weight and flows are recorded with req.At as when it was
	// last seen, the other nodes' seen since 2×TTL before req.At (later
	// too: another node's clock, or its turn at the lock, may be ahead)
	// with a weight make Grant's others — each node weighed by
	// its flows when it gave them, a flow waiting on n of the nodes
	// counting 1/n of its weight on each, req's own weight too — and a
	// lease of the grant is inserted, ending at At+TTL. A zero grant
	// inserts no lease and returns the zero Lease and nil. Before it sums,
	// it folds the key's final leases (see SettleLease) that ended a minute
	// or more before req.At, and so count in no minute's window at req.At:
	// those of one node that ended in one minute (of Unix time) become one
	// row of that node and minute, or are added to it, whose use is the
	// sum of theirs (each part at most governor.MaxCost, over any limit)
	// and whose end is the latest of theirs. The row counts in every window
	// that any of those leases counted in: the sums TakeLease and LeaseUse
	// read never drop; in a day's window, a minute's use of a node may
	// count up to a minute longer. So a key holds about one row per node
	// and minute, beside the leases of the last minute and those not
	// final. Bad input (an
	// empty or too long key or node, a TTL out of range, a cost part
	// negative or over governor.MaxCost, Min above Want, a weight NaN,
	// infinite or negative, a bad flow name or weight, more than
	// MaxLeaseFlows flows, a limit negative or over governor.MaxCost, a
	// zero At) is an error naming it and writes nothing.
	TakeLease(ctx context.Context, req LeaseRequest) (Lease, error)

	// SettleLease records what lease id on key was used for: its Cost
	// becomes used and its Until last, each part only if lower (a lease
	// never grows, never lasts longer), and Until never before its At.
	// final says that its use changes no more, no call on it being under
	// way: the lease is then final for good, and once it counts in no
	// minute's window, TakeLease folds it (see there). An unknown lease —
	// never taken, on another key, pruned or folded — is an error wrapping
	// ErrNoLease. A part of used negative or over governor.MaxCost, or a
	// zero last, is an error.
	SettleLease(ctx context.Context, key, id string, used governor.Cost, last time.Time, final bool) error

	// LeaseUse returns the sums of key's leases that count at at in a
	// minute window and in a day window (as TakeLease sums them), the
	// day's with its money (a budget per month's window is TakeLease's
	// alone). A zero at is an error.
	LeaseUse(ctx context.Context, key string, at time.Time) (minute, day governor.Cost, err error)

	// PruneLeases deletes key's leases and folds that ended before before
	// (a fold when the last of its leases did), and key's nodes and their
	// flows last seen before it, and returns how many rows of leases and
	// folds it deleted.
	PruneLeases(ctx context.Context, key string, before time.Time) (int64, error)

	// RecordNodeFlows writes down what node says of its flows on key at at
	// (see NodeFlow; its Node and At are node and at), each flow's row
	// replacing the last. More than MaxLeaseFlows flows, a flow's name
	// empty, over MaxKeyBytes or given twice, a count negative or over
	// governor.MaxCost, or a zero at is an error naming it, and writes
	// nothing.
	RecordNodeFlows(ctx context.Context, key, node string, at time.Time, flows []NodeFlow) error

	// NodeFlows returns what the nodes of key last said of their flows, of
	// those that said it at since or later, by flow and then node.
	NodeFlows(ctx context.Context, key string, since time.Time) ([]NodeFlow, error)

	// Locks: what keeps one process at a time doing a thing on the
	// database, however many share it (see Lock).

	// LockExecutor takes the executor lock of executor in app, which one
	// live engine per executor ID, application and database holds (see
	// engine.Launch), without waiting for another holder: while one holds
	// it, in this process or another, it returns a *HeldError. The lock
	// goes with the process that holds it, so a process killed without a
	// shutdown leaves nothing to clean up. On PostgreSQL it is a session
	// advisory lock held by a connection of its own; on SQLite an flock
	// on a file beside the database, <file>.executor-<key>.lock. A
	// PostgreSQL session that just ended (an engine shut down or killed a
	// moment ago) may hold the lock until the server has finished with
	// it: LockExecutor tries tries times, 100 ms apart, before it calls
	// the lock held (on SQLite the lock of a closed file is free at once,
	// and one try tells). An in-memory SQLite database, which no other
	// process can open, is an error.
	LockExecutor(ctx context.Context, app, executor string, tries int) (Lock, error)

	// LockDBOSMigrations runs migrate, which migrates DBOS's system tables
	// in the store's database, while no other process's LockDBOSMigrations
	// runs its own: DBOS's migrations are not serialized, and processes
	// that start together on a new PostgreSQL database race in them (all
	// but one fail on "duplicate key value violates unique constraint
	// pg_namespace_nspname_index" as each creates the dbos schema). On
	// PostgreSQL it polls a session advisory lock until it holds it
	// (polled, not waited for: a session waiting in pg_advisory_lock is a
	// transaction open all the while, and DBOS's CREATE INDEX
	// CONCURRENTLY, under the lock, waits for every open transaction),
	// and ctx's end while it waits is an error. On SQLite migrate runs at
	// once: the database's write lock serializes the migrations. An error
	// taking the lock is wrapped in "lock DBOS's migrations"; migrate's
	// own is returned as it is.
	LockDBOSMigrations(ctx context.Context, migrate func() error) error

	// Handle returns the connection pool of the store's database, for DBOS
	// to keep its tables in the same database through the same connections
	// (see Handle). It is an error when the database cannot be shared, as
	// an in-memory SQLite database, which lives in one connection, cannot.
	Handle() (Handle, error)

	// String names the database in messages: "sqlite:PATH", or the URL with
	// its password replaced by "xxxxx".
	String() string

	// Close releases the database. It is safe to call more than once.
	Close() error
}

// Bounds on the text of backfills' and history's records (see Store). They are checked
// before the database sees anything, so SQLite and PostgreSQL answer the
// same input the same way: PostgreSQL refuses a NUL and invalid UTF-8 in
// text and an index entry over about 2.7 KB, where SQLite takes all three.
const (
	// MaxKeyBytes bounds an item key, a backfill or job name, a request
	// ID and an alert state; in the history, a source, hash, flow, state
	// and limit name.
	MaxKeyBytes = 256
	// MaxRunIDBytes bounds a run ID: the engine's run IDs are at most as
	// long.
	MaxRunIDBytes = 512
	// MaxReasonBytes bounds a reason for a rejection, a job's LastError,
	// a run's Stopped, a sample's Reason and a config version's Code;
	// longer ones are cut.
	MaxReasonBytes = 1024
)

// ErrNoJob is the error, wrapped, of Job and SetJobAlert on a job that is
// not recorded.
var ErrNoJob = errors.New("no such job")

// ErrLocked is matched (errors.Is) by the error of a statement that waited
// its whole busy timeout for a lock another connection or process holds on
// an SQLite database: nothing was written, and the same call may be made
// again once the lock is free.
var ErrLocked = errors.New("store: the database is locked")

// Tx is what Settle needs of a transaction that its caller opened and will
// commit or roll back: dbos.Tx, which dbos.RunAsTransaction (and so
// sluice.Transaction) gives its function, is one. Statements use $1, $2 …
// placeholders on SQLite and PostgreSQL alike.
type Tx interface {
	Exec(ctx context.Context, query string, args ...any) (dbos.Result, error)
	Query(ctx context.Context, query string, args ...any) (dbos.Rows, error)
}

var _ Tx = dbos.Tx(nil)

// DroppedEvent is an event a function's rate limit dropped, kept so that
// "why did nothing run" has an answer.
type DroppedEvent struct {
	Function  string
	EventID   string
	EventName string
	Key       string // the rate limit's key value, empty without a key
	Reason    string
	At        time.Time // when it was dropped: UTC, millisecond precision
}

// RunEnd is why a run ended without finishing: its deadline passed, it
// was cancelled, or it failed. DBOS records a stopped run only as
// cancelled, with no error, and clears its start time, and keeps a failed
// run's error where no query can search it; the engine keeps the rest here.
type RunEnd struct {
	RunID   string
	Status  string // the engine's status: "timed_out", "cancelled" or "failed"
	Reason  string // in words, with the step and attempt
	Step    string // the step the run was in; empty before the run says
	Attempt int    // the attempt of Step
	// StartedAt is when the run first started: zero when not known, or when
	// it never started. EndedAt is when the record was written. Both are
	// UTC at millisecond precision.
	StartedAt, EndedAt time.Time
}

// Handle is the connection pool of a Store's database, which the store
// shares with DBOS: DBOS's tables and sluice's then live in one database,
// and one process holds one pool per database, so SQLite's writes are
// serialized in one place instead of two pools fighting over the file's
// lock. Exactly one of SQLite and Postgres is set.
//
// DBOS closes the pool it is given when it shuts down: shut DBOS down after
// the last call on the Store, then Close the Store (a no-op by then, and
// what releases the pool if DBOS never took it).
type Handle struct {
	// SQLite is an SQLite database's handle, for dbos.Config.SQLiteSystemDB
	// (the sqlite driver links in DBOS's SQLite support, which DBOS needs
	// to accept it). File is that database's file, without the "sqlite:"
	// and "file:" prefixes or DSN parameters: the place beside which
	// LockExecutor keeps its lock files.
	SQLite *sql.DB
	File   string

	// Postgres is a PostgreSQL database's pool, for dbos.Config.SystemDBPool.
	Postgres *pgxpool.Pool
}

// Migration is one numbered schema change as a driver recorded it in the
// sluice_migrations table when it applied it.
type Migration struct {
	Version   int       // 1, 2, 3…: applied in order, each once
	Name      string    // from the file name: "quota_charges" for 001_quota_charges.sql
	AppliedAt time.Time // UTC, millisecond precision
}
