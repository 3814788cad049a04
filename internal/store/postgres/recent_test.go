package postgres_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// RecentItems reads a page of a backfill's items from the index on their
// latest activity and one of the pending items from theirs, backwards from
// the cursor: no sort of the backfill's items, before the table is
// analyzed and after.
func TestRecentItemsReadsTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := postgres.Open(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 200,000 items of one backfill, 1,000 a minute (half of them saved 30 s
	// later, half pending), written straight to
	// the table, which autovacuum must not analyze behind the test's back.
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []string{
		"ALTER TABLE sluice_backfill_items SET (autovacuum_enabled = false)",
		`INSERT INTO sluice_backfill_items (backfill, item_key, state, eligible_at, processed_at, rejects, reason, retry_at, lane, active_at)
		 SELECT 'bench', 'item-' || lpad(i::text, 6, '0'), CASE WHEN i % 2 = 0 THEN 'saved' ELSE 'pending' END,
		   $1::bigint + (i / 1000) * 60000, CASE WHEN i % 2 = 0 THEN $1::bigint + (i / 1000) * 60000 + 30000 END, 0, '', NULL, i % 1024,
		   $1::bigint + (i / 1000) * 60000 + CASE WHEN i % 2 = 0 THEN 30000 ELSE 0 END
		 FROM generate_series(0, 199999) AS i`,
	} {
		if _, err := s.Pool().Exec(ctx, q, pgArgs(q, at.UnixMilli())...); err != nil {
			t.Fatal(err)
		}
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.Pool().Exec(ctx, "ANALYZE sluice_backfill_items"); err != nil {
				t.Fatal(err)
			}
		}
		for _, cursor := range [][2]any{{int64(math.MaxInt64), ""}, {at.Add(100 * time.Minute).UnixMilli(), "item-100500"}} {
			var plan []struct{ Plan indexedNode }
			err := s.Pool().QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+postgres.Statement("recent_items"), "bench", 50, cursor[0], cursor[1]).Scan(&plan)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan) != 1 {
				t.Fatalf("%d plans", len(plan))
			}
			// Each read of the items is a backward scan of its index cut
			// at the page's limit: whatever sorts above it sorts at most
			// two pages, never the backfill's items.
			read := map[string]int{}
			var check func(n, parent indexedNode)
			check = func(n, parent indexedNode) {
				if n.Relation == "sluice_backfill_items" {
					read[n.Index]++
					if n.Type != "Index Scan" || n.Direction != "Backward" || parent.Type != "Limit" {
						t.Errorf("analyzed %v, cursor %v: reads sluice_backfill_items by %s %s of %q (condition %q) under %s: want a backward index scan under a limit",
							analyzed, cursor, n.Direction, n.Type, n.Index, n.IndexCond, parent.Type)
					}
				}
				for _, c := range n.Plans {
					check(c, n)
				}
			}
			check(plan[0].Plan, indexedNode{})
			if len(read) != 2 || read["sluice_backfill_items_recent"] != 1 || read["sluice_backfill_items_pending"] != 1 {
				t.Errorf("analyzed %v, cursor %v: reads of sluice_backfill_items by index %v: want one of sluice_backfill_items_recent and one of sluice_backfill_items_pending", analyzed, cursor, read)
			}
		}
	}
}

// indexedNode is a node of a plan EXPLAIN (FORMAT JSON) gives, with the
// index it scans and which way.
type indexedNode struct {
	Type      string        `json:"Node Type"`
	Relation  string        `json:"Relation Name"`
	Index     string        `json:"Index Name"`
	Direction string        `json:"Scan Direction"`
	IndexCond string        `json:"Index Cond"`
	Plans     []indexedNode `json:"Plans"`
}

// pgArgs is args for a statement with parameters, none for one without.
func pgArgs(q string, args ...any) []any {
	if strings.Contains(q, "$1") {
		return args
	}
	return nil
}
