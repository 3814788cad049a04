package postgres

import (
	"context"
	"embed"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"
)

// sqlFS holds the migrations and the statements of the store (see
// driver.NewTables), among the others.
//
//go:embed sql/*.sql migrations/*.sql
var sqlFS embed.FS

// dialect is how the shared code passes values to PostgreSQL's
// statements: the charges' and the migrations' times as timestamptz,
// truncated to the millisecond (the other tables' are BIGINT Unix
// milliseconds), lists as arrays.
var dialect = driver.Dialect{
	Time:    func(t time.Time) any { return driver.Millis(t) },
	Charges: chargeBatch,
	RunIDs:  func(ids []string) (any, error) { return ids, nil }, // a text[]
}

// chargeBatch is the parameters of upsert_charges.sql after the key: the
// charges as parallel arrays, so the batch goes to the server as one
// statement whatever its size.
func chargeBatch(charges []store.Charge) ([]any, error) {
	n := len(charges)
	ids, flows := make([]string, n), make([]string, n)
	ats := make([]time.Time, n)
	requests, inputs, outputs, money := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, c := range charges {
		ids[i], flows[i], ats[i] = c.ID, c.Flow, driver.Millis(c.At)
		requests[i], inputs[i], outputs[i], money[i] = c.Cost.Requests, c.Cost.Input, c.Cost.Output, c.Cost.Money
	}
	return []any{ids, flows, ats, requests, inputs, outputs, money}, nil
}

// conn runs the store's statements on its pool.
type conn struct{ pool *pgxpool.Pool }

func (c conn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := c.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
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
