package sqlite_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// RecentItems reads a page of a backfill's items from the index on their
// latest activity, backwards from the cursor: no sort of the backfill's
// items, whatever their number.
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
			if !strings.Contains(all, "USING INDEX sluice_backfill_items_recent (backfill=? AND") || strings.Contains(all, "TEMP B-TREE") {
				t.Errorf("analyzed %v, cursor %v: plan %q: want a range of sluice_backfill_items_recent, and no sort", analyzed, cursor, all)
			}
		}
	}
}
