package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// EngineTables is the part of store.Store on the engine's tables (rate-limit
// counts, dropped events, run ends), the same for both drivers but for their
// statements and how they run them. Times are BIGINT Unix milliseconds on
// both. A driver's Store embeds it, made by NewEngineTables.
type EngineTables struct {
	conn   Conn
	sql    map[string]string // by file name without .sql
	runIDs func(ids []string) (any, error)
}

// engineStatements are the files of a driver's sql folder that NewEngineTables
// reads, each in the driver's dialect, with the parameters listed.
var engineStatements = []string{
	"count_start",          // function, key, window start; returns the count
	"prune_rate_windows",   // function, key, window start
	"record_dropped_event", // function, event ID, event name, key, reason, dropped at
	"dropped_events",       // function or "", limit
	"record_cancel",        // run ID, status, reason, step, attempt, started at, ended at
	"record_run_end",       // as record_cancel
	"run_ends",             // the run IDs, as runIDs gives them
}

// NewEngineTables returns the engine's tables on a driver's database: conn
// runs the statements in the sql folder of fsys (see engineStatements), and
// runIDs turns a list of run IDs into the one parameter of run_ends.sql.
func NewEngineTables(conn Conn, fsys fs.FS, runIDs func(ids []string) (any, error)) (EngineTables, error) {
	q, err := readStatements(fsys, engineStatements)
	if err != nil {
		return EngineTables{}, fmt.Errorf("read the engine's statements: %w", err)
	}
	return EngineTables{conn: conn, sql: q, runIDs: runIDs}, nil
}

// CountStart implements store.Store.
func (t EngineTables) CountStart(ctx context.Context, function, key string, period time.Duration, limit int, now time.Time) (bool, error) {
	switch {
	case function == "":
		return false, errors.New("count rate limit: empty function")
	case period < time.Millisecond:
		return false, fmt.Errorf("count rate limit: period %s is under a millisecond", period)
	case limit < 1:
		return false, fmt.Errorf("count rate limit: limit %d is under 1", limit)
	}
	ms := now.UnixMilli()
	win := ms - ms%period.Milliseconds()
	var n int64
	err := t.conn.Query(ctx, t.sql["count_start"], []any{function, key, win}, func(r Row) error { return r.Scan(&n) })
	if err != nil {
		return false, fmt.Errorf("count rate limit of %s: %w", function, err)
	}
	if n == 1 {
		// A new window opened: forget the old ones of this key.
		if _, err := t.conn.Exec(ctx, t.sql["prune_rate_windows"], function, key, win); err != nil {
			return false, fmt.Errorf("prune rate limit of %s: %w", function, err)
		}
	}
	return n <= int64(limit), nil
}

// RecordDroppedEvent implements store.Store.
func (t EngineTables) RecordDroppedEvent(ctx context.Context, ev store.DroppedEvent) error {
	switch {
	case ev.Function == "":
		return errors.New("record dropped event: empty function")
	case ev.EventID == "":
		return errors.New("record dropped event: empty event ID")
	}
	_, err := t.conn.Exec(ctx, t.sql["record_dropped_event"], ev.Function, ev.EventID, ev.EventName, ev.Key, ev.Reason, ev.At.UnixMilli())
	if err != nil {
		return fmt.Errorf("record dropped event %s: %w", ev.EventID, err)
	}
	return nil
}

// DroppedEvents implements store.Store.
func (t EngineTables) DroppedEvents(ctx context.Context, function string, limit int) ([]store.DroppedEvent, error) {
	if limit < 1 {
		// SQLite would read it as no limit, PostgreSQL refuse it.
		return nil, fmt.Errorf("list dropped events: limit %d is under 1", limit)
	}
	var out []store.DroppedEvent
	err := t.conn.Query(ctx, t.sql["dropped_events"], []any{function, limit}, func(r Row) error {
		var e store.DroppedEvent
		var at int64
		if err := r.Scan(&e.Function, &e.EventID, &e.EventName, &e.Key, &e.Reason, &at); err != nil {
			return err
		}
		e.At = time.UnixMilli(at).UTC()
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list dropped events: %w", err)
	}
	return out, nil
}

// RecordCancel implements store.Store.
func (t EngineTables) RecordCancel(ctx context.Context, end store.RunEnd) error {
	return t.recordRunEnd(ctx, t.sql["record_cancel"], "cancel", end)
}

// RecordRunEnd implements store.Store.
func (t EngineTables) RecordRunEnd(ctx context.Context, end store.RunEnd) error {
	return t.recordRunEnd(ctx, t.sql["record_run_end"], "end", end)
}

// recordRunEnd runs q, one of the statements that record the end of a run,
// the cancel or the end as what says.
func (t EngineTables) recordRunEnd(ctx context.Context, q, what string, end store.RunEnd) error {
	switch {
	case end.RunID == "":
		return fmt.Errorf("record the %s of a run: empty run ID", what)
	case end.Status == "":
		return fmt.Errorf("record the %s of run %s: empty status", what, end.RunID)
	}
	started := int64(0) // not known, or never started
	if !end.StartedAt.IsZero() {
		started = end.StartedAt.UnixMilli()
	}
	_, err := t.conn.Exec(ctx, q, end.RunID, end.Status, end.Reason, end.Step, end.Attempt, started, end.EndedAt.UnixMilli())
	if err != nil {
		return fmt.Errorf("record the %s of run %s: %w", what, end.RunID, err)
	}
	return nil
}

// RunEnds implements store.Store.
func (t EngineTables) RunEnds(ctx context.Context, runIDs []string) (map[string]store.RunEnd, error) {
	out := make(map[string]store.RunEnd, len(runIDs))
	if len(runIDs) == 0 {
		return out, nil
	}
	ids, err := t.runIDs(runIDs)
	if err != nil {
		return nil, fmt.Errorf("read why runs ended: %w", err)
	}
	err = t.conn.Query(ctx, t.sql["run_ends"], []any{ids}, func(r Row) error {
		var e store.RunEnd
		var started, ended int64
		if err := r.Scan(&e.RunID, &e.Status, &e.Reason, &e.Step, &e.Attempt, &started, &ended); err != nil {
			return err
		}
		if started > 0 {
			e.StartedAt = time.UnixMilli(started).UTC()
		}
		e.EndedAt = time.UnixMilli(ended).UTC()
		out[e.RunID] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read why runs ended: %w", err)
	}
	return out, nil
}
