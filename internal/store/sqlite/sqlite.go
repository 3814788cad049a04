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
// changes, waits for it too. Each connection keeps a page cache of 512 kB
// rather than SQLite's 2 MB: the pool's caches filled as a database grew
// past them and were most of what a long backfill's memory grew by, and the
// pages they miss are in the OS's cache (a million-item backfill went as
// fast, docs/benchmarks.md).
var pragmas = []string{
	"busy_timeout(" + strconv.FormatInt(BusyTimeout.Milliseconds(), 10) + ")",
	"foreign_keys(ON)", "journal_mode(WAL)", "synchronous(NORMAL)", "cache_size(-512)",
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

// Is reports that a *LockedError is store.ErrLocked.
func (e *LockedError) Is(target error) bool { return target == store.ErrLocked }

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
	// Tables gives every method of store.Store but Handle, String,
	// Close and the locks, and Migrations.
	driver.Tables

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
	db, err := OpenDB(path)
	if err != nil {
		return nil, err
	}
	name, _, _ := strings.Cut(path, "?")
	s := &Store{db: db, path: path, name: name, memory: isMemory(name), busyTimeout: busyTimeout(path), txTurn: make(chan struct{}, 1)}
	if s.Tables, err = driver.NewTables(conn{s}, sqlFS, dialect); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		var le *LockedError
		if errors.As(s.Locked(err), &le) {
			return nil, fmt.Errorf("open sqlite: %w", le)
		}
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return s, nil
}

// OpenDB opens the handle Open's Store uses, without its tables: the
// connections with the default pragmas, BEGIN IMMEDIATE and each its cache
// of statements (see stmtcache.go), creating the file's folder if missing.
// Path is as for Open.
func OpenDB(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	name, _, _ := strings.Cut(path, "?")
	memory := isMemory(name)
	if !memory {
		if dir := filepath.Dir(strings.TrimPrefix(name, "file:")); dir != "." {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, fmt.Errorf("open sqlite %s: create folder: %w", path, err)
			}
		}
	}
	db := sql.OpenDB(Connector(dsn(path)))
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
	return db, nil
}

func isMemory(name string) bool { return name == Memory || strings.HasPrefix(name, "file::memory:") }

// sqliteDriver is modernc.org/sqlite's driver as it registered itself with
// database/sql (opening a handle connects nothing).
var sqliteDriver = func() *sqlitedrv.Driver {
	db, err := sql.Open("sqlite", "")
	if err != nil {
		panic(err) // only if the driver did not register
	}
	defer db.Close()
	return db.Driver().(*sqlitedrv.Driver)
}()

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
