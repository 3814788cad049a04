// Package sqlite is the store driver for SQLite, sluice's default: one file
// (e.g. sluice.db) that DBOS shares through Handle, so that both write
// through one handle and never fight over the file's lock. The package links
// in DBOS's SQLite support, without which DBOS refuses an SQLite handle.
//
// The handle is set up the way DBOS sets up its own SQLite handles: WAL
// journal, synchronous=NORMAL, foreign keys on, a 5 s busy timeout, and every
// transaction begun with BEGIN IMMEDIATE, so a transaction that reads and then
// writes takes the write lock up front instead of failing with SQLITE_BUSY
// when it upgrades. Times are stored as integer Unix milliseconds.
//
// # Another process holding the file
//
// SQLite lets one process write at a time. Open takes the write lock to
// apply its migrations, so when another process holds a lock on the file (a
// second sluice, or an sqlite3 shell with a transaction open) Open waits for
// it at most the busy timeout (BusyTimeout, or the busy_timeout the path
// sets) and then returns a *LockedError naming the file: a process never
// starts on a file it could not write. A write of the Store that meets a
// lock taken later waits the same busy timeout and then returns a
// *LockedError too. Several processes on one database is what PostgreSQL is
// for.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite" // also registers the "sqlite" database/sql driver

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"
)

func init() {
	store.Register(store.DriverSQLite, func(ctx context.Context, path string) (store.Store, error) {
		s, err := Open(ctx, path)
		if err != nil {
			return nil, err // not a nil *Store in a non-nil interface
		}
		return s, nil
	})
}

var (
	//go:embed migrations/*.sql
	migrationFS embed.FS

	//go:embed sql/create_migrations.sql
	createMigrationsSQL string
	//go:embed sql/migrations.sql
	migrationsSQL string
	//go:embed sql/record_migration.sql
	recordMigrationSQL string
	//go:embed sql/upsert_charges.sql
	upsertChargesSQL string
	//go:embed sql/charges.sql
	chargesSQL string
	//go:embed sql/prune_charges.sql
	pruneChargesSQL string
)

// Memory is the path of a private in-memory database, for tests. It is served
// by a single connection (each connection to ":memory:" would be a database of
// its own), so it is no handle to give DBOS, which needs several at once.
const Memory = ":memory:"

// BusyTimeout is how long a statement waits for a lock another process holds
// on the file before it fails, unless the path sets busy_timeout itself. It
// bounds how long Open takes to report a file locked by another process.
const BusyTimeout = 5 * time.Second

// pragmas are applied by the driver to every new connection of the pool
// (database/sql has no per-connection hook); they match what DBOS applies to
// the SQLite handles it opens itself, since it uses ours as given. The busy
// timeout comes first so that the journal mode, which needs the lock when it
// changes, waits for it too.
var pragmas = []string{
	"busy_timeout(" + strconv.FormatInt(BusyTimeout.Milliseconds(), 10) + ")",
	"foreign_keys(ON)", "journal_mode(WAL)", "synchronous(NORMAL)",
}

// LockedError is the error of a statement that waited the whole busy timeout
// for a lock another process holds on the database file: another sluice
// process, or an sqlite3 shell with a transaction open.
type LockedError struct {
	Path string        // the database file, as given to Open without DSN parameters
	Wait time.Duration // the busy timeout the statement waited
	Err  error         // the driver's SQLITE_BUSY or SQLITE_LOCKED error
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("database file %s is locked by another process (waited the %s busy timeout): "+
		"stop the other process (another sluice, or an sqlite3 shell with a transaction open) and try again, "+
		"or use PostgreSQL (postgres://…) to run several processes on one database", e.Path, e.Wait)
}

func (e *LockedError) Unwrap() error { return e.Err }

// The primary result codes of SQLite's lock errors; extended codes
// (SQLITE_BUSY_SNAPSHOT, …) carry them in the low byte.
const (
	codeBusy   = 5 // SQLITE_BUSY: another connection holds the lock
	codeLocked = 6 // SQLITE_LOCKED: a conflict within one connection's cache
)

// Locked returns err as a *LockedError naming the store's file when err is
// SQLite's busy or locked error, and err unchanged otherwise. It is for the
// error of a statement run on DB, as the driver returned it: the
// *LockedError says what happened in full, so a context wrapped around err
// before would be dropped; wrap the result instead.
func (s *Store) Locked(err error) error {
	var se *sqlitedrv.Error
	var le *LockedError
	if err == nil || errors.As(err, &le) || !errors.As(err, &se) {
		return err
	}
	if c := se.Code() & 0xff; c != codeBusy && c != codeLocked {
		return err
	}
	return &LockedError{Path: s.name, Wait: s.busyTimeout, Err: err}
}

// Store is a store.Store on one SQLite database. It is safe for simultaneous
// use by multiple goroutines, and by several processes on the same file.
type Store struct {
	// EngineTables gives CountStart, RecordDroppedEvent, DroppedEvents,
	// RecordCancel, RecordRunEnd and RunEnds.
	driver.EngineTables
	// Backfills gives the methods on backfills' items, jobs and runs.
	driver.Backfills
	// History gives the methods on config versions and flows' samples.
	driver.History
	// Leases gives the methods on leases of a provider key's capacity.
	driver.Leases

	db          *sql.DB
	path        string
	name        string        // path without DSN parameters
	memory      bool          // a private in-memory database (see Memory)
	busyTimeout time.Duration // the connections' busy_timeout
	txTurn      chan struct{} // held by the transaction of the store's that runs (see conn.InTx)

	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// Open opens the SQLite database at path, creating the file and its folder
// if missing, and applies the migrations it lacks. Path Memory opens a
// private in-memory database that lives as long as the Store. A path may
// carry modernc.org/sqlite DSN parameters after "?"; pragmas given there take
// precedence over the defaults.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	name, _, _ := strings.Cut(path, "?")
	memory := name == Memory || strings.HasPrefix(name, "file::memory:")
	if !memory {
		if dir := filepath.Dir(strings.TrimPrefix(name, "file:")); dir != "." {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("open sqlite %s: create folder: %w", path, err)
			}
		}
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if memory {
		// Keep the one connection forever: closing it drops the database.
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
	} else {
		// SQLite has one writer at a time; a few connections serve readers.
		db.SetMaxOpenConns(8)
		db.SetMaxIdleConns(4)
		db.SetConnMaxLifetime(time.Hour)
	}
	s := &Store{db: db, path: path, name: name, memory: memory, busyTimeout: busyTimeout(path), txTurn: make(chan struct{}, 1)}
	if s.EngineTables, s.Backfills, s.History, err = tables(s); err == nil {
		s.Leases, err = driver.NewLeases(conn{s}, sqlFS)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		var le *LockedError
		if errors.As(s.Locked(err), &le) {
			return nil, fmt.Errorf("open sqlite: %w", le)
		}
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return s, nil
}

// busyTimeout returns the busy timeout the connections of path get: the
// path's own busy_timeout pragma, or BusyTimeout.
func busyTimeout(path string) time.Duration {
	_, v, ok := strings.Cut(path, "_pragma=busy_timeout(")
	if !ok {
		return BusyTimeout
	}
	v, _, _ = strings.Cut(v, ")")
	ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || ms < 0 {
		return BusyTimeout // the driver refuses it when it connects
	}
	return time.Duration(min(ms, math.MaxInt32)) * time.Millisecond // SQLite's is an int
}

// dsn adds the default pragmas and BEGIN IMMEDIATE to path, leaving out any
// the caller set already.
func dsn(path string) string {
	var params []string
	for _, p := range pragmas {
		name, _, _ := strings.Cut(p, "(")
		if !strings.Contains(path, "_pragma="+name+"(") {
			params = append(params, "_pragma="+p)
		}
	}
	if !strings.Contains(path, "_txlock=") {
		params = append(params, "_txlock=immediate")
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + strings.Join(params, "&")
}

// DB returns the handle the store uses: the one Handle gives DBOS to share,
// so that one pool of connections serializes all writes to the file. DBOS
// closes the handle it is given when it shuts down: shut DBOS down after the
// last call on the Store, then Close the Store (a no-op by then). Close
// closes the handle too.
func (s *Store) DB() *sql.DB { return s.db }

// String returns "sqlite:PATH".
func (s *Store) String() string { return "sqlite:" + s.path }

// Close closes the database handle. Calls after the first return nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}

// migrate applies the migrations the database lacks in one BEGIN IMMEDIATE
// transaction: a second process opening the same file waits for the first to
// finish, then finds every migration recorded and applies none.
func (s *Store) migrate(ctx context.Context) error {
	files, err := driver.Load(migrationFS, "migrations")
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, createMigrationsSQL); err != nil {
		return fmt.Errorf("migrate: create sluice_migrations: %w", err)
	}
	applied, err := queryMigrations(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	done := make(map[int]bool, len(applied))
	for _, m := range applied {
		done[m.Version] = true
	}
	if err := driver.CheckApplied(files, done); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	now := time.Now().UnixMilli()
	for _, f := range files {
		if done[f.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, f.SQL); err != nil {
			return fmt.Errorf("migrate: apply %03d_%s: %w", f.Version, f.Name, err)
		}
		if _, err := tx.ExecContext(ctx, recordMigrationSQL, f.Version, f.Name, now); err != nil {
			return fmt.Errorf("migrate: record %03d_%s: %w", f.Version, f.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// Migrations returns the schema migrations applied to the database, in order.
func (s *Store) Migrations(ctx context.Context) ([]store.Migration, error) {
	ms, err := queryMigrations(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	return ms, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryMigrations(ctx context.Context, q querier) ([]store.Migration, error) {
	rows, err := q.QueryContext(ctx, migrationsSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ms []store.Migration
	for rows.Next() {
		var m store.Migration
		var at int64
		if err := rows.Scan(&m.Version, &m.Name, &at); err != nil {
			return nil, err
		}
		m.AppliedAt = time.UnixMilli(at).UTC()
		ms = append(ms, m)
	}
	return ms, rows.Err()
}

// UpsertCharges implements store.Store.
func (s *Store) UpsertCharges(ctx context.Context, key string, charges []store.Charge) error {
	if err := driver.CheckCharges(key, charges); err != nil {
		return fmt.Errorf("upsert charges: %w", err)
	}
	if len(charges) == 0 {
		return nil
	}
	if err := s.upsertCharges(ctx, key, driver.LastByID(charges)); err != nil {
		return fmt.Errorf("upsert charges: %w", s.Locked(err))
	}
	return nil
}

func (s *Store) upsertCharges(ctx context.Context, key string, charges []store.Charge) error {
	rows := make([][6]any, len(charges))
	for i, c := range charges {
		rows[i] = [6]any{c.ID, c.Flow, c.At.UnixMilli(), c.Cost.Requests, c.Cost.Input, c.Cost.Output}
	}
	batch, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, upsertChargesSQL, key, string(batch))
	return err
}

// Charges implements store.Store.
func (s *Store) Charges(ctx context.Context, key string, since time.Time) ([]store.Charge, error) {
	rows, err := s.db.QueryContext(ctx, chargesSQL, key, since.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("read charges: %w", s.Locked(err))
	}
	defer rows.Close()
	var out []store.Charge
	for rows.Next() {
		var c store.Charge
		var at int64
		if err := rows.Scan(&c.ID, &c.Flow, &at, &c.Cost.Requests, &c.Cost.Input, &c.Cost.Output); err != nil {
			return nil, fmt.Errorf("read charges: %w", err)
		}
		c.At = time.UnixMilli(at).UTC()
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read charges: %w", err)
	}
	return out, nil
}

// PruneCharges implements store.Store.
func (s *Store) PruneCharges(ctx context.Context, key string, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, pruneChargesSQL, key, before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("prune charges: %w", s.Locked(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune charges: %w", err)
	}
	return n, nil
}
