package postgres

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"
)

// sqlFS holds the statements on the engine's tables (see
// driver.NewEngineTables), among the others.
//
//go:embed sql/*.sql
var sqlFS embed.FS

// engineTables returns the engine's tables on pool.
func engineTables(pool *pgxpool.Pool) (driver.EngineTables, error) {
	return driver.NewEngineTables(conn{pool}, sqlFS, func(ids []string) (any, error) { return ids, nil }) // a text[]
}

// conn runs the engine's statements on the store's pool.
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
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Handle implements store.Store.
func (s *Store) Handle() (store.Handle, error) {
	return store.Handle{Postgres: s.pool}, nil
}
