package driver

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// RecentItems implements store.Store.
func (b Backfills) RecentItems(ctx context.Context, backfill string, limit int, before store.RecentCursor) ([]store.RecentItem, error) {
	op, err := named("list recent items", " of ", "backfill name", backfill, store.MaxKeyBytes)
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > store.MaxRecentItems {
		return nil, fmt.Errorf("%s: limit %d: want 1 to %d", op, limit, store.MaxRecentItems)
	}
	// The zero cursor is before every item: after the latest time any item
	// can have. A cursor without a key is past every item of its
	// millisecond, since the empty key sorts before every other.
	beforeAt := int64(math.MaxInt64)
	if !before.IsZero() {
		if before.At.IsZero() {
			return nil, fmt.Errorf("%s: zero cursor time", op)
		}
		if before.Key != "" {
			if err := checkName("cursor key", before.Key, store.MaxKeyBytes); err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
		}
		beforeAt = before.At.UnixMilli()
	}
	items, err := b.readRecentItems(ctx, backfill, limit, beforeAt, before.Key)
	if err == nil && len(items) == 0 {
		// No items: is there a job at all? Only an empty page asks.
		var jobs []store.Job
		if jobs, err = b.readJobs(ctx, b.sql["job"], backfill); err == nil && len(jobs) == 0 {
			err = fmt.Errorf("backfill %s is not recorded: %w", quote(backfill), store.ErrNoJob)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return items, nil
}

// readRecentItems returns the page recent_items selects: the columns
// readItems scans, then active_at.
func (b Backfills) readRecentItems(ctx context.Context, backfill string, limit int, beforeAt int64, beforeKey string) ([]store.RecentItem, error) {
	var out []store.RecentItem
	err := b.conn.Query(ctx, b.sql["recent_items"], []any{backfill, limit, beforeAt, beforeKey}, func(r Row) error {
		var it store.RecentItem
		var state string
		var eligible, active int64
		var processed, retry sql.NullInt64
		if err := r.Scan(&it.Backfill, &it.Key, &state, &eligible, &processed, &it.RunID, &it.RequestID, &it.Rejects, &it.Reason, &retry, &active); err != nil {
			return err
		}
		it.State = store.ItemState(state)
		it.EligibleAt, it.ProcessedAt, it.RetryAt = time.UnixMilli(eligible).UTC(), fromNull(processed), fromNull(retry)
		it.ActiveAt = time.UnixMilli(active).UTC()
		out = append(out, it)
		return nil
	})
	return out, err
}
