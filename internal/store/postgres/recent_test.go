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
// latest activity, backwards from the cursor: no sort of the backfill's
// items, before the table is analyzed and after.
func TestRecentItemsReadsTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := postgres.Open(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 200,000 items of one backfill, 1,000 a minute, written straight to
	// the table, which autovacuum must not analyze behind the test's back.
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []string{
		"ALTER TABLE sluice_backfill_items SET (autovacuum_enabled = false)",
		`INSERT INTO sluice_backfill_items (backfill, item_key, state, eligible_at, processed_at, rejects, reason, retry_at, lane, active_at)
		 SELECT 'bench', 'item-' || lpad(i::text, 6, '0'), 'pending', $1::bigint + (i / 1000) * 60000, NULL, 0, '', NULL, i % 1024, $1::bigint + (i / 1000) * 60000
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
			reads := 0
			for n := range plan[0].Plan.all {
				if n.Type == "Sort" || n.Type == "Incremental Sort" {
					t.Errorf("analyzed %v, cursor %v: the plan sorts (%s)", analyzed, cursor, n.Type)
				}
				if n.Relation != "sluice_backfill_items" {
					continue
				}
				reads++
				if n.Type != "Index Scan" || n.Index != "sluice_backfill_items_recent" || n.Direction != "Backward" {
					t.Errorf("analyzed %v, cursor %v: reads sluice_backfill_items by %s %s of %q (condition %q): want a backward index scan of sluice_backfill_items_recent",
						analyzed, cursor, n.Direction, n.Type, n.Index, n.IndexCond)
				}
			}
			if reads != 1 {
				t.Errorf("analyzed %v, cursor %v: %d reads of sluice_backfill_items, want 1", analyzed, cursor, reads)
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

// all yields n and every node below it.
func (n indexedNode) all(yield func(indexedNode) bool) {
	if !yield(n) {
		return
	}
	for _, c := range n.Plans {
		c.all(yield)
	}
}

// pgArgs is args for a statement with parameters, none for one without.
func pgArgs(q string, args ...any) []any {
	if strings.Contains(q, "$1") {
		return args
	}
	return nil
}
