package engine

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	// Tells DBOS how to read the SQLite driver's error codes; DBOS refuses
	// an SQLite handle without it.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
)

// db is the one database sluice shares with DBOS: an SQLite file or a
// PostgreSQL database, opened by sluice's store, whose handle DBOS and the
// engine's own tables (rate-limit counters, dropped events) use too.
// Queries use $N placeholders, which both drivers accept.
type db struct {
	st     store.Store
	sqlite *sql.DB       // set for SQLite
	pg     *pgxpool.Pool // set for PostgreSQL
	name   string        // for errors, without secrets
}

// openDB opens the store named by dbURL (see store.Open) and takes its handle.
func openDB(ctx context.Context, dbURL string) (*db, error) {
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	switch s := st.(type) {
	case *sqlite.Store:
		if name := strings.TrimPrefix(s.String(), "sqlite:"); strings.HasPrefix(name, sqlite.Memory) || strings.HasPrefix(name, "file::memory:") {
			s.Close()
			return nil, fmt.Errorf("open %s: an in-memory SQLite database lives in one connection and cannot be shared with DBOS; use a file", s)
		}
		return &db{st: s, sqlite: s.DB(), name: s.String()}, nil
	case *postgres.Store:
		return &db{st: s, pg: s.Pool(), name: s.String()}, nil
	}
	st.Close()
	return nil, fmt.Errorf("open %s: the store gives no handle DBOS can share", store.Redact(dbURL))
}

func (d *db) postgres() bool { return d.pg != nil }

func (d *db) exec(ctx context.Context, q string, args ...any) (int64, error) {
	if d.pg != nil {
		tag, err := d.pg.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
	res, err := d.sqlite.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, d.explain(err)
	}
	return res.RowsAffected()
}

// scanner is what both drivers' rows offer.
type scanner interface{ Scan(dest ...any) error }

func (d *db) queryRow(ctx context.Context, q string, args ...any) scanner {
	if d.pg != nil {
		return d.pg.QueryRow(ctx, q, args...)
	}
	return explained{d.sqlite.QueryRowContext(ctx, q, args...), d}
}

// explained gives an SQLite row's error in words a user can act on.
type explained struct {
	row scanner
	d   *db
}

func (e explained) Scan(dest ...any) error { return e.d.explain(e.row.Scan(dest...)) }

func (d *db) query(ctx context.Context, q string, args []any, each func(scanner) error) error {
	if d.pg != nil {
		rows, err := d.pg.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	rows, err := d.sqlite.QueryContext(ctx, q, args...)
	if err != nil {
		return d.explain(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return d.explain(rows.Err())
}

// close closes the store. DBOS closes the handle when it shuts down, so by
// then this only marks the store closed.
func (d *db) close() { _ = d.st.Close() }

// countStart records one event start for (fn, key) in the fixed window that
// contains now and reports whether it is within limit. The increment and the
// check are one statement so concurrent senders cannot both take the last slot.
func (d *db) countStart(ctx context.Context, fn, key string, period time.Duration, limit int, now time.Time) (bool, error) {
	win := now.UnixMilli() - now.UnixMilli()%period.Milliseconds()
	var n int64
	err := d.queryRow(ctx, `INSERT INTO sluice_rate_counts (function, rate_key, window_start, count)
		VALUES ($1, $2, $3, 1)
		ON CONFLICT (function, rate_key, window_start) DO UPDATE SET count = sluice_rate_counts.count + 1
		RETURNING count`, fn, key, win).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("count rate limit of %s: %w", fn, err)
	}
	if n == 1 {
		// A new window opened: forget the old ones of this key.
		if _, err := d.exec(ctx, `DELETE FROM sluice_rate_counts WHERE function = $1 AND rate_key = $2 AND window_start < $3`, fn, key, win); err != nil {
			return false, fmt.Errorf("prune rate limit of %s: %w", fn, err)
		}
	}
	return n <= int64(limit), nil
}

func (d *db) recordDrop(ctx context.Context, fn string, ev Event, key, reason string, now time.Time) error {
	_, err := d.exec(ctx, `INSERT INTO sluice_dropped_events (function, event_id, event_name, rate_key, reason, dropped_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (function, event_id) DO NOTHING`,
		fn, ev.ID, ev.Name, key, reason, now.UnixMilli())
	if err != nil {
		return fmt.Errorf("record dropped event %s: %w", ev.ID, err)
	}
	return nil
}

// DroppedEvent is an event a function's rate limit dropped.
type DroppedEvent struct {
	Function  string    `json:"function"`
	EventID   string    `json:"event_id"`
	EventName string    `json:"event_name"`
	Key       string    `json:"key,omitempty"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

func (d *db) dropped(ctx context.Context, fn string, limit int) ([]DroppedEvent, error) {
	var out []DroppedEvent
	err := d.query(ctx, `SELECT function, event_id, event_name, rate_key, reason, dropped_at FROM sluice_dropped_events
		WHERE ($1 = '' OR function = $1) ORDER BY dropped_at DESC LIMIT $2`, []any{fn, limit}, func(s scanner) error {
		var e DroppedEvent
		var at int64
		if err := s.Scan(&e.Function, &e.EventID, &e.EventName, &e.Key, &e.Reason, &at); err != nil {
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
