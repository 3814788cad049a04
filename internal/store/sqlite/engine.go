package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"

	// DBOS accepts an SQLite handle (Handle, DB) only with its SQLite
	// support linked in. It is linked here, with the handle it is for, so
	// that no program sharing the handle can forget it.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
)

// sqlFS holds the statements on the engine's tables, the backfills' and
// the history's (see driver.NewEngineTables, driver.NewBackfills and
// driver.NewHistory), among the others.
//
//go:embed sql/*.sql
var sqlFS embed.FS

// tables returns the engine's, the backfills' and the history's tables on
// s.
func tables(s *Store) (e driver.EngineTables, b driver.Backfills, h driver.History, err error) {
	e, err = driver.NewEngineTables(conn{s}, sqlFS, func(ids []string) (any, error) {
		// One JSON array, so that any number of run IDs is one parameter.
		b, err := json.Marshal(ids)
		return string(b), err
	})
	if err == nil {
		b, err = driver.NewBackfills(conn{s}, sqlFS)
	}
	if err == nil {
		h, err = driver.NewHistory(conn{s}, sqlFS)
	}
	return e, b, h, err
}

// conn runs the store's statements on its handle, with a lock another
// process holds explained (see Locked).
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
	return c.s.Locked(driver.Each(rows, each))
}

// InTx begins with BEGIN IMMEDIATE (see dsn): the transaction holds the
// write lock from its first statement. Before that, the store's own
// transactions take turns in the process: SQLite's busy handler polls and
// lets in whichever writer polls first, so under a steady stream of
// writers one could wait out the busy timeout; in line, each waits only
// for those before it.
func (c conn) InTx(ctx context.Context, fn func(store.Tx) error) error {
	select {
	case c.s.txTurn <- struct{}{}:
		defer func() { <-c.s.txTurn }()
	case <-ctx.Done():
		return ctx.Err()
	}
	tx, err := c.s.db.BeginTx(ctx, nil)
	if err != nil {
		return c.s.Locked(err)
	}
	defer tx.Rollback()
	if err := fn(sqlTx{tx: tx, s: c.s}); err != nil {
		return err
	}
	return c.s.Locked(tx.Commit())
}

// sqlTx is a transaction of the store's as store.Tx.
type sqlTx struct {
	tx *sql.Tx
	s  *Store
}

func (t sqlTx) Exec(ctx context.Context, q string, args ...any) (dbos.Result, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return nil, t.s.Locked(err)
	}
	return res, nil
}

func (t sqlTx) Query(ctx context.Context, q string, args ...any) (dbos.Rows, error) {
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, t.s.Locked(err)
	}
	return rows, nil
}

// Handle implements store.Store. An in-memory database is refused: it lives
// in one connection, and DBOS needs several at once.
func (s *Store) Handle() (store.Handle, error) {
	if s.memory {
		return store.Handle{}, fmt.Errorf("open %s: an in-memory SQLite database lives in one connection and cannot be shared with DBOS; use a file", s)
	}
	return store.Handle{SQLite: s.db, File: strings.TrimPrefix(s.name, "file:")}, nil
}
