package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseRecentItems checks RecentItems: a backfill's items by their
// latest activity, newest first, page by page.
func exerciseRecentItems(t *testing.T, newDB NewDatabase) {
	ctx := context.Background()
	open := func(t *testing.T) store.Store {
		t.Helper()
		return openOn(t, newDB(t))
	}

	t.Run("RecentItemsNewestFirst", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// Byte order within a millisecond, reversed: "Äpfel" (0xC3 0x84)
		// after every ASCII key, upper case before lower.
		mustAdd(t, s, "titles", base, "", "a", "b", "Zebra", "apple", "Äpfel", "c")
		mustAdd(t, s, "titles", base.Add(time.Minute), "", "d")
		mustAdd(t, s, "other", base.Add(time.Hour), "", "x")
		first := settlement("titles", "run-1", "req-1", base.Add(2*time.Minute), saved("a"), rejected("b", "too long"))
		first.Then = []string{"summaries"}
		mustSettle(t, s, first)
		parkB := settlement("titles", "run-2", "req-2", base.Add(3*time.Minute), rejected("b", "still too long"))
		parkB.MaxRejects = 2
		mustSettle(t, s, parkB)
		// Settling the first batch again, later, changes nothing: not the
		// items, nor when they were last active.
		again := first
		again.At = base.Add(10 * time.Minute)
		mustSettle(t, s, again)

		pending := func(key string, at time.Time) store.RecentItem {
			return store.RecentItem{Item: store.Item{Backfill: "titles", Key: key, State: store.ItemPending, EligibleAt: utcMillis(at)}, ActiveAt: utcMillis(at)}
		}
		all := []store.RecentItem{
			{Item: store.Item{Backfill: "titles", Key: "b", State: store.ItemParked, EligibleAt: utcMillis(base), ProcessedAt: utcMillis(base.Add(3 * time.Minute)),
				RunID: "run-2", RequestID: "req-2", Rejects: 2, Reason: "still too long"}, ActiveAt: utcMillis(base.Add(3 * time.Minute))},
			{Item: store.Item{Backfill: "titles", Key: "a", State: store.ItemSaved, EligibleAt: utcMillis(base), ProcessedAt: utcMillis(base.Add(2 * time.Minute)),
				RunID: "run-1", RequestID: "req-1"}, ActiveAt: utcMillis(base.Add(2 * time.Minute))},
			pending("d", base.Add(time.Minute)),
			pending("Äpfel", base), pending("c", base), pending("apple", base), pending("Zebra", base),
		}
		assertRecent(t, mustRecent(t, s, "titles", 100, store.RecentCursor{}), all...)
		assertRecent(t, mustRecent(t, s, "titles", 3, store.RecentCursor{}), all[:3]...)
		// A rejected item is active when it was rejected.
		rejectedOnce := settlement("titles", "run-3", "req-3", base.Add(4*time.Minute), rejected("c", "wrong language"))
		mustSettle(t, s, rejectedOnce)
		c := store.RecentItem{Item: store.Item{Backfill: "titles", Key: "c", State: store.ItemRejected, EligibleAt: utcMillis(base),
			RunID: "run-3", RequestID: "req-3", Rejects: 1, Reason: "wrong language", RetryAt: utcMillis(base.Add(5 * time.Minute))},
			ActiveAt: utcMillis(base.Add(4 * time.Minute))}
		all = append([]store.RecentItem{c}, append(all[:4:4], all[5:]...)...)
		assertRecent(t, mustRecent(t, s, "titles", 100, store.RecentCursor{}), all...)

		// Each cursor returns what comes after it, whether the next item
		// shares its millisecond or not.
		for i, it := range all {
			assertRecent(t, mustRecent(t, s, "titles", 2, it.Before()), all[i+1:min(i+3, len(all))]...)
		}
		// A time without a key: the items active before it. A cursor
		// between two keys of one millisecond, and one at a time no item has.
		assertRecent(t, mustRecent(t, s, "titles", 10, store.RecentCursor{At: base.Add(time.Minute)}), all[4:]...)
		assertRecent(t, mustRecent(t, s, "titles", 10, store.RecentCursor{At: base, Key: "b"}), all[5:]...)
		assertRecent(t, mustRecent(t, s, "titles", 10, store.RecentCursor{At: base.Add(30 * time.Second), Key: "a"}), all[4:]...)
		assertRecent(t, mustRecent(t, s, "titles", 10, store.RecentCursor{At: base.Add(-time.Hour)}))

		// The next backfill's item is active from when it became eligible there.
		assertRecent(t, mustRecent(t, s, "summaries", 10, store.RecentCursor{}), store.RecentItem{
			Item:     store.Item{Backfill: "summaries", Key: "a", State: store.ItemPending, EligibleAt: utcMillis(base.Add(2 * time.Minute))},
			ActiveAt: utcMillis(base.Add(2 * time.Minute))})
		assertRecent(t, mustRecent(t, s, "other", 10, store.RecentCursor{}), store.RecentItem{
			Item: store.Item{Backfill: "other", Key: "x", State: store.ItemPending, EligibleAt: utcMillis(base.Add(time.Hour))}, ActiveAt: utcMillis(base.Add(time.Hour))})
	})

	t.Run("RecentItemsPagesThroughOneMillisecond", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// A backfill's first scan adds many keys at one time: pages of the
		// largest limit go through them by key.
		const n = store.MaxRecentItems + 200
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("item-%05d", i)
		}
		mustAdd(t, s, "titles", base, "", keys...)
		var walked []string
		pages := 0
		for before := (store.RecentCursor{}); ; pages++ {
			page := mustRecent(t, s, "titles", store.MaxRecentItems, before)
			if len(page) == 0 {
				break
			}
			for _, it := range page {
				walked = append(walked, it.Key)
			}
			before = page[len(page)-1].Before()
		}
		if pages != 2 || len(walked) != n || walked[0] != keys[n-1] || walked[n-1] != keys[0] {
			t.Fatalf("walked %d keys in %d pages (first %q, last %q), want %d in 2 from %q to %q",
				len(walked), pages, walked[0], walked[len(walked)-1], n, keys[n-1], keys[0])
		}
		for i, k := range walked {
			if k != keys[n-1-i] {
				t.Fatalf("key %d of the walk is %q, want %q", i, k, keys[n-1-i])
			}
		}
	})

	t.Run("RecentItemsOfUnknownAndEmptyBackfills", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustStartJob(t, s, "empty", base)
		if got := mustRecent(t, s, "empty", 10, store.RecentCursor{}); len(got) != 0 {
			t.Errorf("RecentItems of a job without items = %+v, want none", got)
		}
		mustAdd(t, s, "titles", base, "", "k1")
		if got := mustRecent(t, s, "titles", 10, store.RecentCursor{At: base}); len(got) != 0 {
			t.Errorf("RecentItems past the last item = %+v, want none", got)
		}
		_, err := s.RecentItems(ctx, "nobody", 10, store.RecentCursor{})
		const want = `list recent items of nobody: backfill "nobody" is not recorded: no such job`
		if !errors.Is(err, store.ErrNoJob) || err.Error() != want {
			t.Errorf("RecentItems of an unknown backfill: error = %v, want %q wrapping ErrNoJob", err, want)
		}
	})

	t.Run("RecentItemsRejectBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "k1")
		long, longKey := strings.Repeat("n", store.MaxKeyBytes+1), strings.Repeat("k", store.MaxKeyBytes+1)
		recent := func(backfill string, limit int, before store.RecentCursor) error {
			_, err := s.RecentItems(ctx, backfill, limit, before)
			return err
		}
		// The words are part of the contract: both drivers say the same.
		for _, tc := range []struct {
			call string
			err  error
			want string
		}{
			{"without backfill", recent("", 10, store.RecentCursor{}), "list recent items: empty backfill name"},
			{"of a long backfill", recent(long, 10, store.RecentCursor{}),
				`list recent items: backfill name of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"of a backfill not UTF-8", recent("\xff", 10, store.RecentCursor{}), `list recent items: backfill name "\xff" is not UTF-8 without NUL`},
			{"with a limit of 0", recent("titles", 0, store.RecentCursor{}), "list recent items of titles: limit 0: want 1 to 1000"},
			{"with a negative limit", recent("titles", -1, store.RecentCursor{}), "list recent items of titles: limit -1: want 1 to 1000"},
			{"with a limit over the maximum", recent("titles", store.MaxRecentItems+1, store.RecentCursor{}), "list recent items of titles: limit 1001: want 1 to 1000"},
			{"before a cursor without a time", recent("titles", 10, store.RecentCursor{Key: "k1"}), "list recent items of titles: zero cursor time"},
			{"before a cursor with a NUL", recent("titles", 10, store.RecentCursor{At: base, Key: "a\x00b"}),
				`list recent items of titles: cursor key "a\x00b" is not UTF-8 without NUL`},
			{"before a cursor with a long key", recent("titles", 10, store.RecentCursor{At: base, Key: longKey}),
				`list recent items of titles: cursor key of 257 bytes is over the limit of 256: "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…`},
		} {
			if tc.err == nil || tc.err.Error() != tc.want {
				t.Errorf("RecentItems %s: error = %v, want %q", tc.call, tc.err, tc.want)
			}
		}
		if got := mustRecent(t, s, "titles", store.MaxRecentItems, store.RecentCursor{}); len(got) != 1 {
			t.Errorf("RecentItems with the largest limit = %+v, want k1", got)
		}
	})

	t.Run("RecentItemsOfItemsRecordedBefore", func(t *testing.T) {
		t.Parallel()
		openDB := newDB(t)
		s := openOn(t, openDB)
		mustAdd(t, s, "titles", base, "", "p", "r", "s")
		mustSettle(t, s, settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("s")))
		mustSettle(t, s, settlement("titles", "run-1", "req-2", base.Add(2*time.Minute), rejected("r", "too long")))
		// Back to the schema before items kept their latest activity.
		mustExec(t, mustHandle(t, s),
			"DROP INDEX sluice_backfill_items_recent",
			"ALTER TABLE sluice_backfill_items DROP COLUMN active_at",
			"DELETE FROM sluice_migrations WHERE name = 'item_activity'")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Migrated again, an item counts when it was processed, or else
		// when it became eligible: when r was rejected was not kept.
		s = openOn(t, openDB)
		got := mustRecent(t, s, "titles", 10, store.RecentCursor{})
		if len(got) != 3 || got[0].Key != "s" || !got[0].ActiveAt.Equal(utcMillis(base.Add(time.Minute))) ||
			got[1].Key != "r" || !got[1].ActiveAt.Equal(utcMillis(base)) || got[2].Key != "p" || !got[2].ActiveAt.Equal(utcMillis(base)) {
			t.Fatalf("recent items after the migration: %+v; want s active at %s, then r and p at %s", got, showTime(utcMillis(base.Add(time.Minute))), showTime(utcMillis(base)))
		}
		// From then on a settlement moves its items up.
		mustSettle(t, s, settlement("titles", "run-1", "req-3", base.Add(3*time.Minute), saved("p")))
		if got := mustRecent(t, s, "titles", 1, store.RecentCursor{}); len(got) != 1 || got[0].Key != "p" {
			t.Fatalf("latest item after settling p: %+v, want p", got)
		}
	})

	t.Run("ItemsRecordedBeforeCallsWereKeptOnce", func(t *testing.T) {
		t.Parallel()
		openDB := newDB(t)
		s := openOn(t, openDB)
		mustAdd(t, s, "titles", base, "", "p", "r", "s", "t")
		mustSettle(t, s, settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("s"), saved("t")))
		mustSettle(t, s, settlement("titles", "run-1", "req-2", base.Add(2*time.Minute), rejected("r", "too long")))
		// Back to the schema before, where each item kept its call's run
		// and request ID.
		mustExec(t, mustHandle(t, s),
			"ALTER TABLE sluice_backfill_items ADD COLUMN run_id TEXT NOT NULL DEFAULT ''",
			"ALTER TABLE sluice_backfill_items ADD COLUMN request_id TEXT NOT NULL DEFAULT ''",
			`UPDATE sluice_backfill_items SET
				run_id = (SELECT c.run_id FROM sluice_backfill_calls AS c WHERE c.id = call_id),
				request_id = (SELECT c.request_id FROM sluice_backfill_calls AS c WHERE c.id = call_id)
			WHERE call_id <> 0`,
			"ALTER TABLE sluice_backfill_items DROP COLUMN call_id",
			"DROP TABLE sluice_backfill_calls",
			"DELETE FROM sluice_migrations WHERE name = 'item_calls'")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Migrated again, every item names the call it had, and the two
		// calls are kept once each.
		s = openOn(t, openDB)
		want := map[string][2]string{"p": {"", ""}, "r": {"run-1", "req-2"}, "s": {"run-1", "req-1"}, "t": {"run-1", "req-1"}}
		for _, it := range mustItems(t, s, "titles", "p", "r", "s", "t") {
			if w := want[it.Key]; it.RunID != w[0] || it.RequestID != w[1] {
				t.Errorf("item %s after the migration: run %q request %q, want %q %q", it.Key, it.RunID, it.RequestID, w[0], w[1])
			}
		}
		var calls int64
		if err := scanRow(mustHandle(t, s), "SELECT COUNT(*) FROM sluice_backfill_calls", nil, &calls); err != nil || calls != 2 {
			t.Fatalf("calls after the migration: %d (%v), want 2", calls, err)
		}
		// The same batch settled again changes nothing; another call does.
		mustSettle(t, s, settlement("titles", "run-1", "req-2", base.Add(3*time.Minute), rejected("r", "too long")))
		if got := mustItems(t, s, "titles", "r"); got[0].Rejects != 1 {
			t.Fatalf("r after its batch was settled again: %+v, want 1 reject", got[0])
		}
		mustSettle(t, s, settlement("titles", "run-2", "req-3", base.Add(4*time.Minute), saved("r")))
		if got := mustItems(t, s, "titles", "r"); got[0].State != store.ItemSaved || got[0].RunID != "run-2" || got[0].RequestID != "req-3" {
			t.Fatalf("r after a new call saved it: %+v, want saved by run-2, req-3", got[0])
		}
		assertCounts(t, s, "titles")
	})
}

// mustExec runs each statement of qs on the store's database, in order.
func mustExec(t *testing.T, h store.Handle, qs ...string) {
	t.Helper()
	for _, q := range qs {
		var err error
		if h.SQLite != nil {
			_, err = h.SQLite.ExecContext(context.Background(), q)
		} else {
			_, err = h.Postgres.Exec(context.Background(), q)
		}
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func mustRecent(t *testing.T, s store.Store, backfill string, limit int, before store.RecentCursor) []store.RecentItem {
	t.Helper()
	items, err := s.RecentItems(context.Background(), backfill, limit, before)
	if err != nil {
		t.Fatalf("RecentItems(%q, %d, %+v): %v", backfill, limit, before, err)
	}
	return items
}

// assertRecent checks got against want, times compared as instants and
// required in UTC.
func assertRecent(t *testing.T, got []store.RecentItem, want ...store.RecentItem) {
	t.Helper()
	show := func(items []store.RecentItem) string {
		var b strings.Builder
		for _, it := range items {
			fmt.Fprintf(&b, "\n  %s/%s active %s: %s eligible %s processed %s run %q request %q rejects %d reason %q retry %s",
				it.Backfill, it.Key, showTime(it.ActiveAt), it.State, showTime(it.EligibleAt), showTime(it.ProcessedAt), it.RunID, it.RequestID,
				it.Rejects, it.Reason, showTime(it.RetryAt))
		}
		return b.String()
	}
	if g, w := show(got), show(want); g != w {
		t.Fatalf("recent items:%s\nwant:%s", g, w)
	}
}
