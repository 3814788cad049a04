package driver

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

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
	"settle_items",        // backfill, items read by lock_items (settledItem objects), run ID, request ID
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
	err = b.conn.InTx(ctx, func(tx store.Tx) error {
		var err error
		if added, err = b.addItems(ctx, tx, backfill, keys, at, after); err != nil {
			return err
		}
		return b.countJobItems(ctx, tx, backfill, at, 0, counts{store.ItemPending: added}, time.Time{})
	})
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

// queryFunc is Conn.Query, or the same on a transaction (txQuery).
type queryFunc func(ctx context.Context, q string, args []any, each func(Row) error) error

// txQuery returns the queryFunc of tx.
func txQuery(tx store.Tx) queryFunc {
	return func(ctx context.Context, q string, args []any, each func(Row) error) error {
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		return Each(rows, each)
	}
}

// Each calls each for every row of rows, then closes them.
func Each(rows dbos.Rows, each func(Row) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
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

// Settle implements store.Store.
func (b Backfills) Settle(ctx context.Context, tx store.Tx, s store.Settlement) error {
	op, err := named("settle batch", " of ", "backfill name", s.Backfill, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	s, err = checkSettlement(s)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if len(s.Outcomes) == 0 {
		return nil
	}
	settle := func(tx store.Tx) error { return b.settle(ctx, tx, s) }
	if tx != nil {
		err = settle(tx)
	} else {
		err = b.conn.InTx(ctx, settle)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// checkSettlement returns s as it is stored, its outcomes sorted by key
// and its reasons cut, or an error naming what must not be stored.
func checkSettlement(s store.Settlement) (store.Settlement, error) {
	if err := checkName("run ID", s.RunID, store.MaxRunIDBytes); err != nil {
		return s, err
	}
	if err := checkName("request ID", s.RequestID, store.MaxKeyBytes); err != nil {
		return s, err
	}
	switch {
	case s.Shard < 0 || s.Shard >= store.MaxLanes:
		return s, fmt.Errorf("shard %d: want 0 to %d", s.Shard, store.MaxLanes-1)
	case s.MaxRejects < 1:
		return s, fmt.Errorf("MaxRejects %d is under 1", s.MaxRejects)
	case s.RetryAfter < 0:
		return s, fmt.Errorf("RetryAfter %s is negative", s.RetryAfter)
	}
	if err := checkTime("time", s.At); err != nil {
		return s, err
	}
	for _, then := range s.Then {
		if err := checkName("backfill name in Then", then, store.MaxKeyBytes); err != nil {
			return s, err
		}
	}
	out := slices.Clone(s.Outcomes)
	slices.SortFunc(out, func(a, b store.Outcome) int { return strings.Compare(a.Key, b.Key) })
	for i, o := range out {
		if err := checkName("key", o.Key, store.MaxKeyBytes); err != nil {
			return s, err
		}
		if i > 0 && out[i-1].Key == o.Key {
			return s, fmt.Errorf("key %s is in the batch twice", quote(o.Key))
		}
		if o.Saved {
			out[i].Reason = ""
			continue
		}
		if o.Reason == "" {
			return s, fmt.Errorf("rejected key %s has no reason", quote(o.Key))
		}
		out[i].Reason = text(o.Reason, store.MaxReasonBytes)
	}
	s.Outcomes = out
	s.Then = slices.Compact(slices.Sorted(slices.Values(s.Then)))
	s.At = Millis(s.At)
	return s, nil
}

// settle records s, checked, in tx: it reads and locks the batch's items,
// then writes only what changes, so the same s a second time writes
// nothing. Jobs are written last and in name order, as every
// transaction here writes them, so that concurrent ones cannot deadlock.
func (b Backfills) settle(ctx context.Context, tx store.Tx, s store.Settlement) error {
	keys := make([]string, len(s.Outcomes))
	for i, o := range s.Outcomes {
		keys[i] = o.Key
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	items, err := b.readItems(ctx, txQuery(tx), b.sql["lock_items"], s.Backfill, string(list))
	if err != nil {
		return err
	}
	byKey := make(map[string]store.Item, len(items))
	for _, it := range items {
		byKey[it.Key] = it
	}
	var changed []settledItem
	var saved []string
	c := counts{}
	progress := false
	for _, o := range s.Outcomes {
		it, ok := byKey[o.Key]
		if !ok {
			return fmt.Errorf("no item %s", quote(o.Key))
		}
		after, ok := settled(it, o, s)
		if !ok {
			continue
		}
		c[it.State]--
		c[after.State]++
		changed = append(changed, settledItem{Key: after.Key, State: after.State, EligibleAt: after.EligibleAt.UnixMilli(),
			ProcessedAt: nullMillis(after.ProcessedAt), Rejects: after.Rejects, Reason: after.Reason, RetryAt: nullMillis(after.RetryAt),
			ActiveAt: s.At.UnixMilli()})
		switch after.State {
		case store.ItemSaved:
			saved = append(saved, after.Key)
			progress = true
		case store.ItemParked:
			progress = true
		}
	}
	if len(changed) == 0 {
		return nil
	}
	rows, err := json.Marshal(changed)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, b.sql["settle_items"], s.Backfill, string(rows), s.RunID, s.RequestID); err != nil {
		return err
	}
	jobs := map[string]counts{s.Backfill: c}
	if len(saved) > 0 {
		for _, then := range s.Then {
			n, err := b.addItems(ctx, tx, then, saved, s.At, "")
			if err != nil {
				return err
			}
			if jobs[then] == nil {
				jobs[then] = counts{}
			}
			jobs[then][store.ItemPending] += n
		}
	}
	for _, job := range slices.SortedFunc(maps.Keys(jobs), strings.Compare) {
		var at time.Time
		if job == s.Backfill && progress {
			at = s.At
		}
		if err := b.countJobItems(ctx, tx, job, s.At, s.Shard, jobs[job], at); err != nil {
			return err
		}
	}
	return nil
}

// settledItem is an item's new record as settle_items reads it from JSON.
type settledItem struct {
	Key         string          `json:"key"`
	State       store.ItemState `json:"state"`
	EligibleAt  int64           `json:"eligible_at"`  // as read: it never changes
	ProcessedAt any             `json:"processed_at"` // Unix ms, or nil
	Rejects     int             `json:"rejects"`
	Reason      string          `json:"reason"`
	RetryAt     any             `json:"retry_at"`  // Unix ms, or nil
	ActiveAt    int64           `json:"active_at"` // the settlement's time: the item's latest activity
}

// settled returns it after outcome o of s, a settlement checkSettlement
// returned, and whether o changes it. An item saved or parked is final,
// and one that records s's run and request ID has had its outcome of s.
func settled(it store.Item, o store.Outcome, s store.Settlement) (store.Item, bool) {
	if it.State == store.ItemSaved || it.State == store.ItemParked || (it.RunID == s.RunID && it.RequestID == s.RequestID) {
		return it, false
	}
	it.RunID, it.RequestID = s.RunID, s.RequestID
	if o.Saved {
		it.State, it.ProcessedAt, it.RetryAt = store.ItemSaved, s.At, time.Time{}
		return it, true
	}
	it.Rejects++
	it.Reason = o.Reason
	if it.Rejects >= s.MaxRejects {
		it.State, it.ProcessedAt, it.RetryAt = store.ItemParked, s.At, time.Time{}
	} else {
		it.State, it.RetryAt = store.ItemRejected, Millis(s.At.Add(s.RetryAfter))
	}
	return it, true
}

// StartJob implements store.Store.
func (b Backfills) StartJob(ctx context.Context, name string, at time.Time) error {
	op, err := named("start job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	if err := checkTime("time", at); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := b.conn.Exec(ctx, b.sql["start_job"], name, at.UnixMilli()); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// Job implements store.Store.
func (b Backfills) Job(ctx context.Context, name string) (store.Job, error) {
	op, err := named("read job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return store.Job{}, err
	}
	jobs, err := b.readJobs(ctx, b.sql["job"], name)
	if err != nil {
		return store.Job{}, fmt.Errorf("%s: %w", op, err)
	}
	if len(jobs) == 0 {
		return store.Job{}, fmt.Errorf("%s: %w", op, store.ErrNoJob)
	}
	return jobs[0], nil
}

// Jobs implements store.Store.
func (b Backfills) Jobs(ctx context.Context) ([]store.Job, error) {
	jobs, err := b.readJobs(ctx, b.sql["jobs"])
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// readJobs returns the jobs q selects: the columns of name,
// monitoring_since, last_progress_at, last_run_at, last_status,
// consecutive_failures, last_error, pending, rejected, saved, parked,
// alert.
func (b Backfills) readJobs(ctx context.Context, q string, args ...any) ([]store.Job, error) {
	out := []store.Job{}
	err := b.conn.Query(ctx, q, args, func(r Row) error {
		var j store.Job
		var since int64
		var progress, run sql.NullInt64
		if err := r.Scan(&j.Name, &since, &progress, &run, &j.LastStatus, &j.ConsecutiveFailures, &j.LastError,
			&j.Pending, &j.Rejected, &j.Saved, &j.Parked, &j.Alert); err != nil {
			return err
		}
		j.MonitoringSince, j.LastProgressAt, j.LastRunAt = time.UnixMilli(since).UTC(), fromNull(progress), fromNull(run)
		out = append(out, j)
		return nil
	})
	return out, err
}

// RecordJobRun implements store.Store.
func (b Backfills) RecordJobRun(ctx context.Context, name string, at time.Time, failure string) error {
	op, err := named("record run of job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	if err := checkTime("time", at); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	status := "ok"
	if failure != "" {
		status = "failed"
	}
	if err := b.conn.Exec(ctx, b.sql["record_job_run"], name, at.UnixMilli(), status, text(failure, store.MaxReasonBytes)); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// SetJobAlert implements store.Store.
func (b Backfills) SetJobAlert(ctx context.Context, name, from, to string) (bool, error) {
	op, err := named("set alert of job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return false, err
	}
	for _, a := range []string{from, to} {
		if a == "" {
			continue // no alert
		}
		if err := checkName("alert", a, store.MaxKeyBytes); err != nil {
			return false, fmt.Errorf("%s: %w", op, err)
		}
	}
	set := false
	err = b.conn.Query(ctx, b.sql["set_job_alert"], []any{name, from, to}, func(Row) error {
		set = true
		return nil
	})
	if err == nil && !set {
		// Another alert than from, or no job at all?
		var jobs []store.Job
		if jobs, err = b.readJobs(ctx, b.sql["job"], name); err == nil && len(jobs) == 0 {
			err = store.ErrNoJob
		}
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	return set, nil
}

// RecordBackfillRun implements store.Store.
func (b Backfills) RecordBackfillRun(ctx context.Context, r store.BackfillRun) error {
	op, err := named("record backfill run", " ", "run ID", r.RunID, store.MaxRunIDBytes)
	if err != nil {
		return err
	}
	rejected, err := checkRun(r)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	err = b.conn.Exec(ctx, b.sql["record_backfill_run"], r.RunID, r.Backfill, nullMillis(r.StartedAt), r.EndedAt.UnixMilli(),
		r.Selected, r.Retried, r.Saved, r.Parked, rejected, text(r.Stopped, store.MaxReasonBytes))
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// checkRun checks r and returns its Rejected as stored: a JSON object of
// reasons, cut, to counts.
func checkRun(r store.BackfillRun) (string, error) {
	if err := checkName("backfill name", r.Backfill, store.MaxKeyBytes); err != nil {
		return "", err
	}
	if err := checkTime("end", r.EndedAt); err != nil {
		return "", err
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"Selected", r.Selected}, {"Retried", r.Retried}, {"Saved", r.Saved}, {"Parked", r.Parked}} {
		if f.n < 0 {
			return "", fmt.Errorf("%s %d is negative", f.name, f.n)
		}
	}
	rejected := make(map[string]int, len(r.Rejected))
	for reason, n := range r.Rejected {
		if n < 0 {
			return "", fmt.Errorf("count %d of Rejected[%s] is negative", n, quote(reason))
		}
		k := text(reason, store.MaxReasonBytes)
		rejected[k] += min(n, math.MaxInt-rejected[k]) // saturates
	}
	b, err := json.Marshal(rejected)
	return string(b), err
}

// BackfillRuns implements store.Store.
func (b Backfills) BackfillRuns(ctx context.Context, backfill string, limit int) ([]store.BackfillRun, error) {
	op := "list backfill runs"
	if backfill != "" {
		if err := checkName("backfill name", backfill, store.MaxKeyBytes); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		op += " of " + backfill
	}
	if limit < 1 {
		return nil, fmt.Errorf("%s: limit %d is under 1", op, limit)
	}
	var out []store.BackfillRun
	err := b.conn.Query(ctx, b.sql["backfill_runs"], []any{backfill, limit}, func(row Row) error {
		var r store.BackfillRun
		var started sql.NullInt64
		var ended int64
		var rejected string
		if err := row.Scan(&r.RunID, &r.Backfill, &started, &ended, &r.Selected, &r.Retried, &r.Saved, &r.Parked, &rejected, &r.Stopped); err != nil {
			return err
		}
		r.StartedAt, r.EndedAt = fromNull(started), time.UnixMilli(ended).UTC()
		if err := json.Unmarshal([]byte(rejected), &r.Rejected); err != nil {
			return fmt.Errorf("run %s: rejected: %w", r.RunID, err)
		}
		if len(r.Rejected) == 0 {
			r.Rejected = nil
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
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
