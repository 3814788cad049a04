package sqlite_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// RecentItems reads a page of a backfill's items from the index on their
// latest activity and one of the pending items from theirs, backwards from
// the cursor: no sort of the backfill's items, whatever their number.
func TestRecentItemsReadsTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for page := range 10 {
		keys := make([]string, 1000)
		for i := range keys {
			keys[i] = fmt.Sprintf("item-%06d", page*1000+i)
		}
		if _, err := s.AddItems(ctx, "bench", keys, at.Add(time.Duration(page)*time.Minute), ""); err != nil {
			t.Fatal(err)
		}
		// Half of each page saved 30 s later: both indexes hold items.
		var saved []store.Outcome
		for _, k := range keys[:500] {
			saved = append(saved, store.Outcome{Key: k, Saved: true})
		}
		err := s.Settle(ctx, nil, store.Settlement{Backfill: "bench", RunID: "run", RequestID: fmt.Sprintf("req-%d", page),
			At: at.Add(time.Duration(page)*time.Minute + 30*time.Second), MaxRejects: 1, Outcomes: saved})
		if err != nil {
			t.Fatal(err)
		}
	}
	q, err := os.ReadFile("sql/recent_items.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := s.DB().ExecContext(ctx, "ANALYZE"); err != nil {
				t.Fatal(err)
			}
		}
		for _, cursor := range [][2]any{{int64(math.MaxInt64), ""}, {at.Add(5 * time.Minute).UnixMilli(), "item-005500"}} {
			all := testenv.QueryPlan(t, s.DB(), string(q), "bench", 50, cursor[0], cursor[1])
			// Each page is read in its index's order and cut at the
			// limit in a subquery of its own; what sorts above them
			// sorts at most the two pages, never the backfill's items.
			for _, read := range []*regexp.Regexp{pageOf("sluice_backfill_items_recent", "active_at"), pageOf("sluice_backfill_items_pending", "eligible_at")} {
				if !read.MatchString(all) {
					t.Errorf("analyzed %v, cursor %v: plan %q: want %s", analyzed, cursor, all, read)
				}
			}
		}
	}
}

// pageOf matches the plan of a subquery that reads a range of index in
// order, by col and key backwards from the cursor, without a sort.
func pageOf(index, col string) *regexp.Regexp {
	return regexp.MustCompile(regexp.QuoteMeta("CO-ROUTINE (subquery-") + `\d+\); ` +
		regexp.QuoteMeta("SEARCH sluice_backfill_items USING INDEX "+index+" (backfill=? AND ("+col+",item_key)<(?,?)); SCAN (subquery-"))
}
