// Package driver holds what the two store drivers must do identically:
// everything about the schema's migrations, the governor's charges, the
// engine's tables, the backfills', the history's and the leases' but the
// statements themselves, how they run and how a time or a batch goes to
// them (Schema, QuotaCharges, EngineTables, Backfills, History, Leases),
// and the keys of the locks both take (ExecutorLockKey). What the drivers
// do differently stays in each: how a lock is held, and how the migrating
// transaction keeps several processes from migrating at once (SQLite's
// BEGIN IMMEDIATE, PostgreSQL's lock_migrations.sql).
package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// Schema is a driver's numbered migrations (see File) and the
// sluice_migrations table that records those applied, the same for both
// drivers but for their statements, how they run them and how a time goes
// to them. A driver makes it with NewSchema.
type Schema struct {
	conn  Conn
	fsys  fs.FS
	sql   map[string]string // by file name without .sql
	stamp func(time.Time) any
}

// schemaStatements are the files of a driver's sql folder that NewSchema
// reads, each in the driver's dialect, with the parameters listed.
var schemaStatements = []string{
	"create_migrations", // creates sluice_migrations if missing
	"migrations",        // returns version, name, applied at, by version
	"record_migration",  // version, name, applied at
}

// NewSchema returns the schema of a driver's database: conn runs the
// statements in the sql folder of fsys (see schemaStatements) and the
// migrations in its migrations folder, and stamp turns a time into a
// parameter for the column of times of sluice_migrations. A driver whose
// transactions do not keep two processes from migrating at once has a
// lock_migrations statement besides, run first in the migrating
// transaction to take a lock held until it ends.
func NewSchema(conn Conn, fsys fs.FS, stamp func(time.Time) any) (Schema, error) {
	q, err := readStatements(fsys, schemaStatements)
	if err != nil {
		return Schema{}, fmt.Errorf("read the migrations' statements: %w", err)
	}
	switch lock, err := fs.ReadFile(fsys, "sql/lock_migrations.sql"); {
	case err == nil:
		q["lock_migrations"] = string(lock)
	case !errors.Is(err, fs.ErrNotExist):
		return Schema{}, fmt.Errorf("read the migrations' statements: %w", err)
	}
	return Schema{conn: conn, fsys: fsys, sql: q, stamp: stamp}, nil
}

// Migrate applies the migrations the database lacks in one transaction: a
// second process opening the same database waits for the first to finish
// (BEGIN IMMEDIATE on SQLite, lock_migrations on PostgreSQL, where CREATE
// TABLE IF NOT EXISTS alone races), then finds every migration recorded
// and applies none.
func (s Schema) Migrate(ctx context.Context) error {
	files, err := load(s.fsys, "migrations")
	if err != nil {
		return err
	}
	err = s.conn.InTx(ctx, func(tx store.Tx) error {
		if lock, ok := s.sql["lock_migrations"]; ok {
			if _, err := tx.Exec(ctx, lock); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, s.sql["create_migrations"]); err != nil {
			return fmt.Errorf("create sluice_migrations: %w", err)
		}
		applied, err := s.applied(ctx, txQuery(tx))
		if err != nil {
			return err
		}
		done := make(map[int]bool, len(applied))
		for _, m := range applied {
			done[m.Version] = true
		}
		if err := checkApplied(files, done); err != nil {
			return err
		}
		now := s.stamp(time.Now())
		for _, f := range files {
			if done[f.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, f.SQL); err != nil {
				return fmt.Errorf("apply %03d_%s: %w", f.Version, f.Name, err)
			}
			if _, err := tx.Exec(ctx, s.sql["record_migration"], f.Version, f.Name, now); err != nil {
				return fmt.Errorf("record %03d_%s: %w", f.Version, f.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Migrations returns the schema migrations applied to the database, in
// order.
func (s Schema) Migrations(ctx context.Context) ([]store.Migration, error) {
	ms, err := s.applied(ctx, s.conn.Query)
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	return ms, nil
}

// applied reads the migrations recorded in sluice_migrations.
func (s Schema) applied(ctx context.Context, query queryFunc) ([]store.Migration, error) {
	var ms []store.Migration
	err := query(ctx, s.sql["migrations"], nil, func(r Row) error {
		var m store.Migration
		if err := r.Scan(&m.Version, &m.Name, timestamp{&m.AppliedAt}); err != nil {
			return err
		}
		ms = append(ms, m)
		return nil
	})
	return ms, err
}

// Migration files: one per schema change.

// File is one migration: NNN_name.sql, applied once, in Version order.
type File struct {
	Version int
	Name    string
	SQL     string
}

var fileName = regexp.MustCompile(`^([0-9]+)_([a-z0-9_]+)\.sql$`)

// load reads the migrations in dir of fsys. Every .sql file there must be
// named NNN_name.sql, and the versions must run 1, 2, 3… without gaps or
// repeats, so a missing or duplicated file fails every test instead of
// leaving a database half-migrated.
func load(fsys fs.FS, dir string) ([]File, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var files []File
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration %s: name must be NNN_name.sql (lowercase)", e.Name())
		}
		v, err := strconv.Atoi(m[1])
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: version must be a positive number", e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		files = append(files, File{Version: v, Name: m[2], SQL: string(body)})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Version < files[j].Version })
	for i, f := range files {
		if f.Version != i+1 {
			return nil, fmt.Errorf("migration %03d_%s: want version %d (versions run 1, 2, 3… without gaps or repeats)", f.Version, f.Name, i+1)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	return files, nil
}

// checkApplied returns an error when the database records a migration this
// program does not know: a newer sluice has migrated it, and this one must not
// write to a schema it does not understand.
func checkApplied(known []File, applied map[int]bool) error {
	for v := range applied {
		if v > len(known) {
			return fmt.Errorf("database has schema migration %d, this sluice knows only up to %d: upgrade sluice", v, len(known))
		}
	}
	return nil
}
