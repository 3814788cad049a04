package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// A backfill's statements find its items' calls by key however large the
// table of calls has grown since they first ran on a connection: as a join,
// the planner read the table whole for every batch (counting on more items
// than a batch holds, or keeping a generic plan made while the table was
// small), so a backfill of a million items went at half the rate of one of
// ten thousand. One connection runs every statement here, ten batches while
// the table is small (PostgreSQL may keep a generic plan after five), then
// the table grows, and the next selection, settlement and lookup at each
// size may not read it.
func TestBackfillCallsAreFoundByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, err := url.Parse(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Nothing analyzes the tables behind the test's back: the plans go by
	// what the statements are planned with, as on a server whose
	// autovacuum has not come round yet.
	for _, table := range []string{"sluice_backfill_items", "sluice_backfill_calls"} {
		if _, err := s.Pool().Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = fmt.Sprintf("item-%06d", i)
	}
	if _, err := s.AddItems(ctx, "bench", keys, at, ""); err != nil {
		t.Fatal(err)
	}
	// A backfill of 200,000 items, as large as the plans need to tell.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO sluice_backfill_items (backfill, item_key, state, eligible_at, processed_at, rejects, reason, retry_at, lane, active_at)
		SELECT 'bench', 'item-' || lpad(i::text, 6, '0'), 'pending', $1::bigint, NULL, 0, '', NULL, i % 1024, $1::bigint
		FROM generate_series(2000, 199999) AS i`, at.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	var after store.Cursor
	batch := func(i int) {
		t.Helper()
		items, err := s.NextItems(ctx, "bench", at, 20, after, store.Lane{})
		if err != nil || len(items) != 20 {
			t.Fatalf("batch %d: NextItems = %d items, %v; want 20", i, len(items), err)
		}
		after = items[len(items)-1].After()
		st := store.Settlement{Backfill: "bench", RunID: "run", RequestID: fmt.Sprintf("call-%d", i), At: at, MaxRejects: 3}
		for _, it := range items {
			st.Outcomes = append(st.Outcomes, store.Outcome{Key: it.Key, Saved: true})
		}
		if err := s.Settle(ctx, nil, st); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	for i := range 10 {
		batch(i)
	}
	// The statistics of the one connection's reads, flushed first (they
	// are written to where others read them when it is next idle).
	readCalls := func() (rows int64) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		err := s.Pool().QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) FROM pg_stat_user_tables WHERE relname = 'sluice_backfill_calls'`).Scan(&rows)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// The table of calls grows as a backfill goes (one call a batch), and
	// the plans with it: each size once.
	calls := 10
	for i, size := range []int{2000, 8000, 30000} {
		if _, err := s.Pool().Exec(ctx, `INSERT INTO sluice_backfill_calls (run_id, request_id)
			SELECT 'other', 'call-' || i FROM generate_series($1::int, $2::int) AS i`, calls, size-1); err != nil {
			t.Fatal(err)
		}
		calls = size
		before := readCalls()
		batch(10 + i)
		lookup, err := s.Items(ctx, "bench", keys[:20])
		if err != nil || len(lookup) != 20 || lookup[0].RequestID != "call-0" {
			t.Fatalf("Items = %+v, %v; want 20 items with the call that saved them", lookup, err)
		}
		read := readCalls() - before
		t.Logf("%d calls: a batch and a lookup read %d rows of them by scans", size, read)
		if read > 1000 {
			t.Errorf("with %d calls recorded, a batch's selection and settlement and a lookup read %d of them by scans of the table; want each found by its key", size, read)
		}
	}
}
