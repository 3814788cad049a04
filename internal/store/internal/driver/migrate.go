// Package driver holds what the two store drivers must do identically: read
// their embedded migrations, check a batch of charges, scrub secrets from
// errors, and everything about the engine's tables, the backfills', the
// history's and the leases' but the statements themselves and how they run
// (EngineTables, Backfills, History, Leases). Running migrations and SQL
// stay in each driver, because the locking that makes migration safe for
// several processes differs between SQLite and PostgreSQL.
package driver

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
)

// Migration files: one per schema change.

// File is one migration: NNN_name.sql, applied once, in Version order.
type File struct {
	Version int
	Name    string
	SQL     string
}

var fileName = regexp.MustCompile(`^([0-9]+)_([a-z0-9_]+)\.sql$`)

// Load reads the migrations in dir of fsys. Every .sql file there must be
// named NNN_name.sql, and the versions must run 1, 2, 3… without gaps or
// repeats, so a missing or duplicated file fails every test instead of
// leaving a database half-migrated.
func Load(fsys fs.FS, dir string) ([]File, error) {
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

// CheckApplied returns an error when the database records a migration this
// program does not know: a newer sluice has migrated it, and this one must not
// write to a schema it does not understand.
func CheckApplied(known []File, applied map[int]bool) error {
	for v := range applied {
		if v > len(known) {
			return fmt.Errorf("database has schema migration %d, this sluice knows only up to %d: upgrade sluice", v, len(known))
		}
	}
	return nil
}
