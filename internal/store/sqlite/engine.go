package sqlite

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"

	// DBOS accepts an SQLite handle (Handle, DB) only with its SQLite
	// support linked in. It is linked here, with the handle it is for, so
	// that no program sharing the handle can forget it.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
)

// sqlFS holds the statements on the engine's tables (see
// driver.NewEngineTables), among the others.
//
//go:embed sql/*.sql
var sqlFS embed.FS

// engineTables returns the engine's tables on s.
func engineTables(s *Store) (driver.EngineTables, error) {
	return driver.NewEngineTables(conn{s}, sqlFS, func(ids []string) (any, error) {
		// One JSON array, so that any number of run IDs is one parameter.
		b, err := json.Marshal(ids)
		return string(b), err
	})
}

// conn runs the engine's statements on the store's handle, with a lock
// another process holds explained (see Locked).
type conn struct{ s *Store }

func (c conn) Exec(ctx context.Context, q string, args ...any) error {
	_, err := c.s.db.ExecContext(ctx, q, args...)
	return c.s.Locked(err)
}

func (c conn) Query(ctx context.Context, q string, args []any, each func(driver.Row) error) error {
	rows, err := c.s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return c.s.Locked(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return c.s.Locked(rows.Err())
}

// Handle implements store.Store. An in-memory database is refused: it lives
// in one connection, and DBOS needs several at once.
func (s *Store) Handle() (store.Handle, error) {
	if s.memory {
		return store.Handle{}, fmt.Errorf("open %s: an in-memory SQLite database lives in one connection and cannot be shared with DBOS; use a file", s)
	}
	return store.Handle{SQLite: s.db, File: strings.TrimPrefix(s.name, "file:")}, nil
}
