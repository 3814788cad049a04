package backfill

import (
	"context"
	"fmt"
	"sort"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/store"
)

// discover pages through the source and records the items not known yet,
// each page in one step that lists it and records it: for PendingSQL in
// one transaction on the app's database, so the page is recorded once with
// the step; for Pending, whose list comes from elsewhere, in a step that
// may record a page again after a crash, which adds nothing (AddItems keeps
// every key it has). The step records the page's last key, not its keys.
func (b *backfill) discover(r *engine.Run, i int) error {
	after := ""
	for page := 0; ; page++ {
		name := fmt.Sprintf("list-%d-%d", i, page)
		var got listed
		var err error
		if b.Pending != nil {
			got, err = engine.Step(r, name, func(ctx context.Context) (listed, error) {
				keys, err := b.Pending(ctx, after, b.DiscoverPage)
				if err != nil {
					return listed{}, fmt.Errorf("list pending items: %w", err)
				}
				return b.recordPage(ctx, nil, keys, after)
			})
		} else {
			got, err = engine.Transaction(r, name, func(ctx context.Context, tx dbos.Tx) (listed, error) {
				keys, err := queryKeys(ctx, tx, b.PendingSQL, after, b.DiscoverPage)
				if err != nil {
					return listed{}, fmt.Errorf("list pending items: %w", err)
				}
				return b.recordPage(ctx, tx, keys, after)
			})
		}
		if err != nil || got.Keys < b.DiscoverPage {
			return err
		}
		after = got.Last
	}
}

// listed is what a step of discover records of a page: how many keys it
// listed, the last of them, and how many were new.
type listed struct {
	Keys  int    `json:"keys"`
	Last  string `json:"last,omitempty"`
	Added int    `json:"added"`
}

// recordPage checks a page of keys listed after after and records those not
// known yet, in tx (nil: a transaction of its own).
func (b *backfill) recordPage(ctx context.Context, tx store.Tx, keys []string, after string) (listed, error) {
	if len(keys) > b.DiscoverPage {
		return listed{}, engine.NonRetriable(fmt.Errorf("list pending items: asked for %d keys, got %d", b.DiscoverPage, len(keys)))
	}
	if len(keys) == 0 {
		return listed{}, nil
	}
	last := keys[len(keys)-1]
	if last <= after || !sort.StringsAreSorted(keys) {
		return listed{}, engine.NonRetriable(fmt.Errorf("list pending items: the page after %q is not in increasing key order", after))
	}
	n, err := b.set.rec.AddItemsIn(ctx, tx, b.ID, keys, b.set.now(), b.After)
	if err != nil {
		return listed{}, err
	}
	return listed{Keys: len(keys), Last: last, Added: n}, nil
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
