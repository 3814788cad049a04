package driver

import (
	"context"
	"io/fs"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/store"
)

// Row is a row of either driver's results.
type Row interface{ Scan(dest ...any) error }

// Conn is how a driver runs statements on its database, with errors
// explained the way the driver explains them (an SQLite file locked by
// another process, say).
type Conn interface {
	// Exec runs q and returns how many rows it changed.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
	// Query calls each for every row of q's results.
	Query(ctx context.Context, q string, args []any, each func(Row) error) error
	// InTx calls fn in a transaction of its own, committed if fn returns
	// nil and rolled back otherwise.
	InTx(ctx context.Context, fn func(tx store.Tx) error) error
}

// queryFunc is Conn.Query, or the same on a transaction (txQuery).
type queryFunc func(ctx context.Context, q string, args []any, each func(Row) error) error

// txQuery returns the queryFunc of tx.
func txQuery(tx store.Tx) queryFunc {
	return func(ctx context.Context, q string, args []any, each func(Row) error) error {
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		return Each(rows, each)
	}
}

// Each calls each for every row of rows, then closes them.
func Each(rows dbos.Rows, each func(Row) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// readStatements returns the statements names, files of the sql folder of
// fsys without .sql, by name.
func readStatements(fsys fs.FS, names []string) (map[string]string, error) {
	q := make(map[string]string, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(fsys, "sql/"+name+".sql")
		if err != nil {
			return nil, err
		}
		q[name] = string(b)
	}
	return q, nil
}
