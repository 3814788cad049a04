package backfill

import (
	"context"
	"fmt"
	"sort"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/engine"
)

// discover pages through the source and records the items not known yet,
// each page in two steps: listing it (in a transaction on the app's
// database for PendingSQL), and recording it.
func (b *backfill) discover(r *engine.Run, i int) error {
	after := ""
	for page := 0; ; page++ {
		name := fmt.Sprintf("discover-%d-%d", i, page)
		var keys []string
		var err error
		if b.Pending != nil {
			keys, err = engine.Step(r, name, func(ctx context.Context) ([]string, error) { return b.Pending(ctx, after, b.DiscoverPage) })
		} else {
			keys, err = engine.Transaction(r, name, func(ctx context.Context, tx dbos.Tx) ([]string, error) {
				return queryKeys(ctx, tx, b.PendingSQL, after, b.DiscoverPage)
			})
		}
		if err != nil {
			return fmt.Errorf("list pending items: %w", err)
		}
		if len(keys) > b.DiscoverPage {
			return engine.NonRetriable(fmt.Errorf("list pending items: asked for %d keys, got %d", b.DiscoverPage, len(keys)))
		}
		if len(keys) == 0 {
			return nil
		}
		if last := keys[len(keys)-1]; last <= after || !sort.StringsAreSorted(keys) {
			return engine.NonRetriable(fmt.Errorf("list pending items: the page after %q is not in increasing key order", after))
		}
		_, err = engine.Step(r, fmt.Sprintf("add-%d-%d", i, page), func(ctx context.Context) (int, error) {
			return b.set.rec.AddItems(ctx, b.ID, keys, b.set.now(), b.After)
		})
		if err != nil || len(keys) < b.DiscoverPage {
			return err
		}
		after = keys[len(keys)-1]
	}
}

// queryKeys runs a PendingSQL query: $1 after, $2 limit, one column.
func queryKeys(ctx context.Context, tx dbos.Tx, q, after string, limit int) ([]string, error) {
	rows, err := tx.Query(ctx, q, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}
