package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"

	// DBOS accepts an SQLite handle (Handle, DB) only with its SQLite
	// support linked in. It is linked here, with the handle it is for, so
	// that no program sharing the handle can forget it.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
)

// sqlFS holds the migrations and the statements of the store (see
// driver.NewTables).
//
//go:embed sql/*.sql migrations/*.sql
var sqlFS embed.FS

// dialect is how the shared code passes values to SQLite's statements:
// times as INTEGER Unix milliseconds, lists as one JSON text parameter.
var dialect = driver.Dialect{
	Time:    func(t time.Time) any { return t.UnixMilli() },
	Charges: chargeBatch,
	RunIDs: func(ids []string) (any, error) {
		// One JSON array, so that any number of run IDs is one parameter.
		b, err := json.Marshal(ids)
		return string(b), err
	},
}

// chargeBatch is the parameter of upsert_charges.sql after the key: the
// charges as one JSON array of [id, flow, at, requests, input, output]
// rows, so the statement is parsed once per batch rather than once per
// charge.
func chargeBatch(charges []store.Charge) ([]any, error) {
	rows := make([][7]any, len(charges))
	for i, c := range charges {
		rows[i] = [7]any{c.ID, c.Flow, c.At.UnixMilli(), c.Cost.Requests, c.Cost.Input, c.Cost.Output, c.Cost.Money}
	}
	batch, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	return []any{string(batch)}, nil
}

// conn runs the store's statements on its handle, with a lock another
// process holds explained (see Locked).
type conn struct{ s *Store }

func (c conn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := c.s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, c.s.Locked(err)
	}
	return res.RowsAffected()
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
	return store.Handle{SQLite: s.db, File: s.file()}, nil
}

// file is the database's file, without the "file:" prefix or DSN
// parameters.
func (s *Store) file() string { return strings.TrimPrefix(s.name, "file:") }
