package postgres

import (
	"context"
	"embed"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"
)

// sqlFS holds the statements on the engine's tables, the backfills' and
// the history's (see driver.NewEngineTables, driver.NewBackfills and
// driver.NewHistory), among the others.
//
//go:embed sql/*.sql
var sqlFS embed.FS

// tables returns the engine's, the backfills' and the history's tables on
// pool.
func tables(pool *pgxpool.Pool) (e driver.EngineTables, b driver.Backfills, h driver.History, err error) {
	e, err = driver.NewEngineTables(conn{pool}, sqlFS, func(ids []string) (any, error) { return ids, nil }) // a text[]
	if err == nil {
		b, err = driver.NewBackfills(conn{pool}, sqlFS)
	}
	if err == nil {
		h, err = driver.NewHistory(conn{pool}, sqlFS)
	}
	return e, b, h, err
}

// conn runs the store's statements on its pool.
type conn struct{ pool *pgxpool.Pool }

func (c conn) Exec(ctx context.Context, q string, args ...any) error {
	_, err := c.pool.Exec(ctx, q, args...)
	return err
}

func (c conn) Query(ctx context.Context, q string, args []any, each func(driver.Row) error) error {
	rows, err := c.pool.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	return driver.Each(pgRows{rows}, each)
}

func (c conn) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return fn(pgTx{tx}) })
}

// pgTx is a transaction of the store's as store.Tx.
type pgTx struct{ tx pgx.Tx }

func (t pgTx) Exec(ctx context.Context, q string, args ...any) (dbos.Result, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rowsAffected(tag.RowsAffected()), nil
}

func (t pgTx) Query(ctx context.Context, q string, args ...any) (dbos.Rows, error) {
	rows, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgRows{rows}, nil
}

// pgRows are pgx's rows as dbos.Rows, whose Close returns an error.
type pgRows struct{ pgx.Rows }

func (r pgRows) Close() error {
	r.Rows.Close()
	return nil
}

// rowsAffected is a statement's count of rows as dbos.Result.
type rowsAffected int64

func (n rowsAffected) RowsAffected() (int64, error) { return int64(n), nil }

// Handle implements store.Store.
func (s *Store) Handle() (store.Handle, error) {
	return store.Handle{Postgres: s.pool}, nil
}
