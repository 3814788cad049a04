package driver

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// Backfills is the part of store.Store on backfills' items, jobs and runs,
// the same for both drivers but for their statements and how they run
// them. Times are BIGINT Unix milliseconds, NULL when never set; lists of
// keys and of items go to a statement as one JSON text parameter, so any
// number of them is one statement on both databases. A driver's Store
// embeds it, made by NewBackfills.
type Backfills struct {
	conn Conn
	sql  map[string]string // by file name without .sql
}

// backfillStatements are the files of a driver's sql folder that
// NewBackfills reads, each in the driver's dialect, with the parameters
// listed.
var backfillStatements = []string{
	"add_items",           // backfill, keys, eligible at, after ("" for none); affects the rows added
	"create_job",          // job, monitored since if new
	"count_job_items",     // job, shard, changes of pending, rejected, saved, parked, progress at (or NULL)
	"next_items",          // backfill, now, limit, cursor's eligible at, cursor's key, lanes, lane; returns the columns readItems scans
	"items",               // backfill, keys; returns the columns readItems scans
	"lock_items",          // as items, and locks them for the transaction
	"record_call",         // run ID, request ID; returns the call's number
	"settle_items",        // backfill, items read by lock_items (settledItem objects), the call's number
	"start_job",           // job, monitored since
	"job",                 // job; returns the columns readJobs scans
	"jobs",                // returns the columns readJobs scans
	"record_job_run",      // job, ended at, status, last error
	"set_job_alert",       // job, from, to; returns the job's name if it changed
	"record_backfill_run", // run ID, backfill, started at (or NULL), ended at, selected, retried, saved, parked, rejected (JSON object), stopped
	"backfill_runs",       // backfill or "", limit; returns the columns of record_backfill_run in its order
	"recent_items",        // backfill, limit, cursor's active at, cursor's key; returns the columns readRecentItems scans
}

// NewBackfills returns the backfills' tables on a driver's database: conn
// runs the statements in the sql folder of fsys (see backfillStatements).
func NewBackfills(conn Conn, fsys fs.FS) (Backfills, error) {
	q, err := readStatements(fsys, backfillStatements)
	if err != nil {
		return Backfills{}, fmt.Errorf("read the backfills' statements: %w", err)
	}
	return Backfills{conn: conn, sql: q}, nil
}

// AddItems implements store.Store.
func (b Backfills) AddItems(ctx context.Context, backfill string, keys []string, at time.Time, after string) (int, error) {
	return b.AddItemsIn(ctx, nil, backfill, keys, at, after)
}

// AddItemsIn implements store.Store.
func (b Backfills) AddItemsIn(ctx context.Context, tx store.Tx, backfill string, keys []string, at time.Time, after string) (int, error) {
	op, err := named("add items", " to ", "backfill name", backfill, store.MaxKeyBytes)
	if err != nil {
		return 0, err
	}
	if after != "" {
		if err := checkName("after", after, store.MaxKeyBytes); err != nil {
			return 0, fmt.Errorf("%s: %w", op, err)
		}
	}
	keys, err = uniqueKeys(keys)
	if err == nil {
		err = checkTime("time", at)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	var added int64
	add := func(tx store.Tx) error {
		var err error
		if added, err = b.addItems(ctx, tx, backfill, keys, at, after); err != nil {
			return err
		}
		return b.countJobItems(ctx, tx, backfill, at, 0, counts{store.ItemPending: added}, time.Time{})
	}
	if tx != nil {
		err = add(tx)
	} else {
		err = b.conn.InTx(ctx, add)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return int(added), nil
}

// addItems adds keys, sorted and each once, to backfill and returns how
// many it added.
func (b Backfills) addItems(ctx context.Context, tx store.Tx, backfill string, keys []string, at time.Time, after string) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return 0, err
	}
	res, err := tx.Exec(ctx, b.sql["add_items"], backfill, string(list), at.UnixMilli(), after)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// counts are changes of a job's counts of items, by state.
type counts map[store.ItemState]int64

// countJobItems changes the counts of job's shard by c, and its LastProgressAt to
// progress if that is later (unless progress is zero), creating the job,
// monitored from since, if new.
func (b Backfills) countJobItems(ctx context.Context, tx store.Tx, job string, since time.Time, shard int, c counts, progress time.Time) error {
	if _, err := tx.Exec(ctx, b.sql["create_job"], job, since.UnixMilli()); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, b.sql["count_job_items"], job, shard,
		c[store.ItemPending], c[store.ItemRejected], c[store.ItemSaved], c[store.ItemParked], nullMillis(progress))
	return err
}

// NextItems implements store.Store.
func (b Backfills) NextItems(ctx context.Context, backfill string, now time.Time, limit int, after store.Cursor, lane store.Lane) ([]store.Item, error) {
	op, err := named("list next items", " of ", "backfill name", backfill, store.MaxKeyBytes)
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%s: limit %d is under 1", op, limit)
	}
	switch {
	case lane.Of < 0 || lane.Of > store.MaxLanes:
		return nil, fmt.Errorf("%s: %d lanes: want 0 (all) to %d", op, lane.Of, store.MaxLanes)
	case lane.Of == 0 && lane.Index != 0:
		return nil, fmt.Errorf("%s: lane %d of all lanes: want 0", op, lane.Index)
	case lane.Index < 0 || lane.Of > 0 && lane.Index >= lane.Of:
		return nil, fmt.Errorf("%s: lane %d of %d: want 0 to %d", op, lane.Index, lane.Of, lane.Of-1)
	}
	// The zero cursor is before every item: before the earliest time any
	// item can have, with the empty key, which sorts before every other.
	afterAt := int64(math.MinInt64)
	if !after.IsZero() {
		if err := checkName("cursor key", after.Key, store.MaxKeyBytes); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if err := checkTime("cursor time", after.EligibleAt); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		afterAt = after.EligibleAt.UnixMilli()
	}
	items, err := b.readItems(ctx, b.conn.Query, b.sql["next_items"], backfill, now.UnixMilli(), limit, afterAt, after.Key, lane.Of, lane.Index)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return items, nil
}

// Items implements store.Store.
func (b Backfills) Items(ctx context.Context, backfill string, keys []string) ([]store.Item, error) {
	op, err := named("read items", " of ", "backfill name", backfill, store.MaxKeyBytes)
	if err != nil {
		return nil, err
	}
	keys, err = uniqueKeys(keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	items, err := b.readItems(ctx, b.conn.Query, b.sql["items"], backfill, string(list))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return items, nil
}

// readItems returns the items q selects, in its order: the columns of
// backfill, item_key, state, eligible_at, processed_at, run_id,
// request_id, rejects, reason, retry_at.
func (b Backfills) readItems(ctx context.Context, query queryFunc, q string, args ...any) ([]store.Item, error) {
	var out []store.Item
	err := query(ctx, q, args, func(r Row) error {
		var it store.Item
		var state string
		var eligible int64
		var processed, retry sql.NullInt64
		if err := r.Scan(&it.Backfill, &it.Key, &state, &eligible, &processed, &it.RunID, &it.RequestID, &it.Rejects, &it.Reason, &retry); err != nil {
			return err
		}
		it.State = store.ItemState(state)
		it.EligibleAt, it.ProcessedAt, it.RetryAt = time.UnixMilli(eligible).UTC(), fromNull(processed), fromNull(retry)
		out = append(out, it)
		return nil
	})
	return out, err
}

// named returns op on name (op, sep and name: "add items to titles"), or
// an error saying why name, what it is, cannot be stored.
func named(op, sep, what, name string, limit int) (string, error) {
	if err := checkName(what, name, limit); err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	return op + sep + name, nil
}

// uniqueKeys returns keys sorted in byte order, each once, or an error
// naming the first that cannot be stored. Writers that touch rows in the
// same order cannot deadlock each other.
func uniqueKeys(keys []string) ([]string, error) {
	for _, k := range keys {
		if err := checkName("key", k, store.MaxKeyBytes); err != nil {
			return nil, err
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(keys))), nil
}

func checkTime(what string, t time.Time) error {
	if t.IsZero() {
		return fmt.Errorf("zero %s", what)
	}
	return nil
}

// nullMillis returns t as a nullable column holds it: Unix milliseconds,
// or nil (NULL) for the zero time.
func nullMillis(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func fromNull(ms sql.NullInt64) time.Time {
	if !ms.Valid {
		return time.Time{}
	}
	return time.UnixMilli(ms.Int64).UTC()
}
