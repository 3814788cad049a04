package sqlite_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
)

// The full-text index of the runs' reasons (migration 020) holds every
// reason sluice_run_ends takes, a new record's and a cancel's that the run
// completes with where it stopped: a search by reason finds its candidates
// there, so a reason the index missed would never be found.
func TestRunEndTextFollowsTheReasons(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.RecordRunEnd(ctx, store.RunEnd{RunID: "f:e1", Status: "failed", Reason: "table orders is missing", Step: "save", Attempt: 1, EndedAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordCancel(ctx, store.RunEnd{RunID: "f:e2", Status: "cancelled", Reason: "cancelled on request", EndedAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRunEnd(ctx, store.RunEnd{RunID: "f:e2", Status: "cancelled", Reason: "cancelled in step wait, attempt 1", Step: "wait", Attempt: 1, EndedAt: at}); err != nil {
		t.Fatal(err)
	}
	find := func(text string) []string {
		rows, err := s.DB().QueryContext(ctx, `SELECT run_id FROM sluice_run_end_text WHERE sluice_run_end_text MATCH ?1 ORDER BY run_id`, `"`+text+`"`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for text, want := range map[string][]string{
		"orders is":    {"f:e1"},
		"in step wait": {"f:e2"},
		"Orders":       nil,              // case counts, as in the search
		"cancelled":    {"f:e2", "f:e2"}, // the cancel's reason and the run's, which the search's exact match tells apart
	} {
		if got := find(text); !slices.Equal(got, want) {
			t.Errorf("index search for %q: %v, want %v", text, got, want)
		}
	}
}
