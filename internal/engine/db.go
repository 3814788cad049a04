package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	// Registers the "sqlite" database/sql driver and tells DBOS how to read
	// its error codes; DBOS refuses an SQLite handle without it.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
)

// db is the one database sluice shares with DBOS: an SQLite file or a
// PostgreSQL database. Its own tables (rate-limit counters, dropped events)
// sit next to DBOS's. Queries use $N placeholders, which both drivers accept.
type db struct {
	sqlite *sql.DB       // set for SQLite
	pg     *pgxpool.Pool // set for PostgreSQL
	owned  bool          // closed by Close
	name   string        // for errors, without secrets
}

// openDB opens the database named by url: "postgres://…" / "postgresql://…",
// "sqlite:PATH", "sqlite::memory:", or a bare path (an SQLite file).
func openDB(ctx context.Context, dbURL string) (*db, error) {
	if isPostgresURL(dbURL) {
		pcfg, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			return nil, fmt.Errorf("open postgres %s: %w", redactURL(dbURL), scrub(err, dbURL))
		}
		if !strings.Contains(dbURL, "pool_max_conns") {
			// Workers, queue pollers and the API share the pool; pgx's default
			// (4 on a small machine) starves them. DBOS uses 20 for its own.
			pcfg.MaxConns = 20
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("open postgres %s: %w", redactURL(dbURL), err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("connect to postgres %s: %w", redactURL(dbURL), scrub(err, dbURL))
		}
		return &db{pg: pool, owned: true, name: redactURL(dbURL)}, nil
	}
	path := strings.TrimPrefix(strings.TrimPrefix(dbURL, "sqlite://"), "sqlite:")
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	if path != ":memory:" {
		if dir := filepath.Dir(path); dir != "." && dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("open sqlite %s: %w", path, err)
			}
		}
	}
	// The same settings DBOS applies to the handles it opens itself: every
	// transaction takes the write lock up front (no deadlocked upgrades),
	// writers wait for each other, WAL lets readers run beside a writer.
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=foreign_keys(ON)&_pragma=synchronous(NORMAL)&_pragma=journal_mode(WAL)"
	if path == ":memory:" {
		dsn = "file::memory:?cache=shared&_txlock=immediate&_pragma=busy_timeout(10000)"
	}
	h, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	h.SetMaxOpenConns(8)
	if err := h.PingContext(ctx); err != nil {
		h.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return &db{sqlite: h, owned: true, name: "sqlite:" + path}, nil
}

func isPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// redactURL hides the password of a database URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// scrub removes a URL's password from an error message.
func scrub(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(err.Error(), pw) {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

func (d *db) postgres() bool { return d.pg != nil }

func (d *db) exec(ctx context.Context, q string, args ...any) (int64, error) {
	if d.pg != nil {
		tag, err := d.pg.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
	res, err := d.sqlite.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// scanner is what both drivers' rows offer.
type scanner interface{ Scan(dest ...any) error }

func (d *db) queryRow(ctx context.Context, q string, args ...any) scanner {
	if d.pg != nil {
		return d.pg.QueryRow(ctx, q, args...)
	}
	return d.sqlite.QueryRowContext(ctx, q, args...)
}

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

func isNoRows(err error) bool {
	return errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows)
}

func (d *db) close() {
	if !d.owned {
		return
	}
	if d.pg != nil {
		d.pg.Close()
	}
	if d.sqlite != nil {
		d.sqlite.Close()
	}
}

// migrations create sluice's engine tables. Each statement is idempotent, so
// running them at every start (and from two processes at once) is safe.
var migrations = []string{
	// Rate limit (drops excess): events admitted per function, key and fixed
	// period. A row per window; old windows are pruned as new ones open.
	`CREATE TABLE IF NOT EXISTS sluice_rate_counts (
		function TEXT NOT NULL,
		rate_key TEXT NOT NULL,
		window_start BIGINT NOT NULL,
		count BIGINT NOT NULL,
		PRIMARY KEY (function, rate_key, window_start))`,
	// Events a rate limit dropped, so "why did nothing run" has an answer.
	`CREATE TABLE IF NOT EXISTS sluice_dropped_events (
		function TEXT NOT NULL,
		event_id TEXT NOT NULL,
		event_name TEXT NOT NULL,
		rate_key TEXT NOT NULL,
		reason TEXT NOT NULL,
		dropped_at BIGINT NOT NULL,
		PRIMARY KEY (function, event_id))`,
	// The save target of examples/summarize and the crash bench: one row per
	// idempotency key; writes counts how often a save reached the table.
	`CREATE TABLE IF NOT EXISTS sluice_summaries (
		idempotency_key TEXT PRIMARY KEY,
		document_id TEXT NOT NULL,
		summary TEXT NOT NULL,
		category TEXT NOT NULL,
		saved_at BIGINT NOT NULL,
		writes BIGINT NOT NULL)`,
}

func (d *db) migrate(ctx context.Context) error {
	for _, m := range migrations {
		if _, err := d.exec(ctx, m); err != nil {
			return fmt.Errorf("migrate engine tables: %w", err)
		}
	}
	return nil
}

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
