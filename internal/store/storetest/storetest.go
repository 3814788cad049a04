// Package storetest is the conformance suite every store driver must pass:
// the behaviour the governor, the engine and the rest of sluice rely on,
// checked the same way on SQLite and on PostgreSQL, bad input and error
// messages included, and DBOS running on the store's own handle. A driver's
// test runs it with a function that makes an empty database:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T) storetest.OpenFunc {
//			path := filepath.Join(t.TempDir(), "sluice.db")
//			return func(ctx context.Context) (store.Store, error) {
//				s, err := sqlite.Open(ctx, path)
//				if err != nil {
//					return nil, err // not a nil *sqlite.Store in a non-nil interface
//				}
//				return s, nil
//			}
//		})
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// OpenFunc opens a new Store on one database; each call is a new handle on
// the same data, as a restarted process or a second node would have.
type OpenFunc func(ctx context.Context) (store.Store, error)

// NewDatabase makes an empty database for the test t (removed when t ends)
// and returns how to open it.
type NewDatabase func(t *testing.T) OpenFunc

// Migrator is what every driver's Store offers beyond store.Store, so the
// suite can see that reopening a database does not migrate it again.
type Migrator interface {
	Migrations(ctx context.Context) ([]store.Migration, error)
}

// base is a fixed, non-round instant, so precision bugs cannot hide behind
// whole seconds.
var base = time.Date(2026, 10, 18, 7, 1, 49, 123_000_000, time.UTC)

// Exercise runs the conformance suite. Subtests run in parallel, each on a
// database of its own.
func Exercise(t *testing.T, newDB NewDatabase) {
	t.Helper()
	// open makes a fresh database and opens it once; the store closes when
	// the subtest ends.
	open := func(t *testing.T) store.Store {
		t.Helper()
		return openOn(t, newDB(t))
	}
	ctx := context.Background()

	t.Run("UpsertThenRead", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		in := []store.Charge{
			charge("c", "title", base.Add(2*time.Second), 1, 150, 400),
			charge("a", "summary", base, 1, 1100, 512),
			charge("b", "analysis", base.Add(time.Second), 1, 900, 0),
		}
		mustUpsert(t, s, "groq", in...)
		got := mustCharges(t, s, "groq", time.Time{})
		want := []store.Charge{in[1], in[2], in[0]}
		assertCharges(t, got, want)
	})

	t.Run("EmptyKeyIsEmpty", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if got := mustCharges(t, s, "nobody", time.Time{}); len(got) != 0 {
			t.Fatalf("Charges on a key never written = %v, want none", got)
		}
		if n, err := s.PruneCharges(ctx, "nobody", base); err != nil || n != 0 {
			t.Fatalf("PruneCharges on a key never written = %d, %v; want 0, nil", n, err)
		}
		if err := s.UpsertCharges(ctx, "groq", nil); err != nil {
			t.Fatalf("UpsertCharges with no charges: %v", err)
		}
	})

	t.Run("SettlementReplacesCharge", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		reserved := charge("r1", "summary", base, 1, 1100, 1024)
		other := charge("r2", "title", base.Add(time.Second), 1, 200, 100)
		mustUpsert(t, s, "groq", reserved, other)
		// The call finished: its real output was 310 tokens, not max_tokens.
		settled := charge("r1", "summary", base, 1, 1093, 310)
		mustUpsert(t, s, "groq", settled)
		assertCharges(t, mustCharges(t, s, "groq", time.Time{}), []store.Charge{settled, other})
	})

	t.Run("ReplaceUpdatesEveryField", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustUpsert(t, s, "groq", charge("r1", "summary", base, 1, 10, 20))
		moved := charge("r1", "title", base.Add(-time.Hour), 2, 30, 40)
		mustUpsert(t, s, "groq", moved)
		assertCharges(t, mustCharges(t, s, "groq", time.Time{}), []store.Charge{moved})
	})

	t.Run("LastOfRepeatedIDInOneBatchWins", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustUpsert(t, s, "groq",
			charge("r1", "summary", base, 1, 100, 1000),
			charge("r2", "title", base, 1, 5, 5),
			charge("r1", "summary", base, 1, 100, 250),
		)
		assertCharges(t, mustCharges(t, s, "groq", time.Time{}), []store.Charge{
			charge("r1", "summary", base, 1, 100, 250),
			charge("r2", "title", base, 1, 5, 5),
		})
	})

	t.Run("SameInstantOrderedByID", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustUpsert(t, s, "groq",
			charge("z", "f", base, 1, 1, 1),
			charge("m", "f", base, 1, 1, 1),
			charge("a", "f", base.Add(time.Millisecond), 1, 1, 1),
			charge("b", "f", base, 1, 1, 1),
		)
		assertIDs(t, mustCharges(t, s, "groq", time.Time{}), "b", "m", "z", "a")
	})

	t.Run("SinceIsInclusive", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for i := range 5 {
			mustUpsert(t, s, "groq", charge(fmt.Sprintf("r%d", i), "f", base.Add(time.Duration(i)*time.Minute), 1, 1, 1))
		}
		assertIDs(t, mustCharges(t, s, "groq", base.Add(2*time.Minute)), "r2", "r3", "r4")
		assertIDs(t, mustCharges(t, s, "groq", base.Add(2*time.Minute+time.Millisecond)), "r3", "r4")
		assertIDs(t, mustCharges(t, s, "groq", base.Add(time.Hour)))
		assertIDs(t, mustCharges(t, s, "groq", base.Add(-24*time.Hour)), "r0", "r1", "r2", "r3", "r4")
	})

	t.Run("PruneDeletesOnlyOlderOnThatKey", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for i := range 5 {
			at := base.Add(time.Duration(i) * time.Hour)
			mustUpsert(t, s, "groq", charge(fmt.Sprintf("r%d", i), "f", at, 1, 1, 1))
			mustUpsert(t, s, "openai", charge(fmt.Sprintf("r%d", i), "f", at, 1, 1, 1))
		}
		// before is exclusive: the charge at exactly base+2h stays.
		n, err := s.PruneCharges(ctx, "groq", base.Add(2*time.Hour))
		if err != nil {
			t.Fatalf("PruneCharges: %v", err)
		}
		if n != 2 {
			t.Fatalf("PruneCharges deleted %d charges, want 2", n)
		}
		assertIDs(t, mustCharges(t, s, "groq", time.Time{}), "r2", "r3", "r4")
		assertIDs(t, mustCharges(t, s, "openai", time.Time{}), "r0", "r1", "r2", "r3", "r4")
		if n, err := s.PruneCharges(ctx, "groq", base.Add(2*time.Hour)); err != nil || n != 0 {
			t.Fatalf("second PruneCharges = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("KeysAreIsolated", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const keys = 20
		for k := range keys {
			key := fmt.Sprintf("key-%02d", k)
			var cs []store.Charge
			for i := range 10 {
				// The same IDs on every key: IDs are unique per key only.
				cs = append(cs, charge(fmt.Sprintf("r%d", i), "f", base.Add(time.Duration(i)*time.Second), 1, int64(k), int64(i)))
			}
			mustUpsert(t, s, key, cs...)
		}
		mustUpsert(t, s, "key-07", charge("r3", "settled", base.Add(3*time.Second), 1, 7, 999))
		if _, err := s.PruneCharges(ctx, "key-11", base.Add(time.Hour)); err != nil {
			t.Fatalf("PruneCharges: %v", err)
		}
		for k := range keys {
			key := fmt.Sprintf("key-%02d", k)
			got := mustCharges(t, s, key, time.Time{})
			if k == 11 {
				assertCharges(t, got, nil)
				continue
			}
			if len(got) != 10 {
				t.Fatalf("key %s has %d charges, want 10", key, len(got))
			}
			for i, c := range got {
				wantOut := int64(i)
				if k == 7 && i == 3 {
					wantOut = 999
				}
				if c.Cost.Input != int64(k) || c.Cost.Output != wantOut {
					t.Fatalf("key %s charge %s = %+v, want input %d output %d", key, c.ID, c.Cost, k, wantOut)
				}
			}
		}
	})

	t.Run("LargeBatch", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const n = 10_000
		cs := make([]store.Charge, n)
		for i := range cs {
			cs[i] = charge(fmt.Sprintf("r%05d", i), "backfill", base.Add(time.Duration(i)*time.Millisecond), 1, int64(i), 512)
		}
		mustUpsert(t, s, "groq", cs...)
		assertCharges(t, mustCharges(t, s, "groq", time.Time{}), cs)
		// Settle them all at once.
		for i := range cs {
			cs[i].Cost.Output = int64(i % 512)
		}
		mustUpsert(t, s, "groq", cs...)
		assertCharges(t, mustCharges(t, s, "groq", time.Time{}), cs)
		deleted, err := s.PruneCharges(ctx, "groq", base.Add(n/2*time.Millisecond))
		if err != nil || deleted != n/2 {
			t.Fatalf("PruneCharges = %d, %v; want %d, nil", deleted, err, n/2)
		}
	})

	t.Run("ConcurrentUpserts", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const workers, batches, size = 6, 10, 20
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for b := range batches {
					var cs []store.Charge
					for i := range size {
						// Own IDs, plus one ID every worker writes.
						cs = append(cs, charge(fmt.Sprintf("w%d-b%d-%d", w, b, i), "f", base.Add(time.Duration(b)*time.Second), 1, int64(w), 1))
					}
					// Requests and Output both carry the write's identity, so
					// a row mixing two writes shows.
					id := int64(w*100 + b)
					cs = append(cs, charge("shared", "f", base, id, int64(w), id))
					if err := s.UpsertCharges(ctx, "groq", cs); err != nil {
						errs <- fmt.Errorf("worker %d batch %d: %w", w, b, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := mustCharges(t, s, "groq", time.Time{})
		if want := workers*batches*size + 1; len(got) != want {
			t.Fatalf("after concurrent upserts: %d charges, want %d", len(got), want)
		}
		for _, c := range got {
			if c.ID == "shared" && (c.Cost.Requests != c.Cost.Output || c.Cost.Input != c.Cost.Requests/100) {
				t.Fatalf("shared charge = %+v: fields from different writes", c.Cost)
			}
		}
	})

	t.Run("ConcurrentReadersAndWriters", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 2 {
			wg.Go(func() {
				for i := range 20 {
					if err := s.UpsertCharges(ctx, "groq", []store.Charge{charge(fmt.Sprintf("w%d-%d", w, i), "f", base, 1, 1, 1)}); err != nil {
						errs <- err
						return
					}
				}
			})
			wg.Go(func() {
				prev := 0
				for range 20 {
					got, err := s.Charges(ctx, "groq", time.Time{})
					if err != nil {
						errs <- err
						return
					}
					// Committed charges never disappear.
					if len(got) < prev {
						errs <- fmt.Errorf("a reader saw %d charges after %d", len(got), prev)
						return
					}
					prev = len(got)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := mustCharges(t, s, "groq", time.Time{}); len(got) != 40 {
			t.Fatalf("%d charges, want 40", len(got))
		}
	})

	t.Run("ReopenKeepsDataAndMigrations", func(t *testing.T) {
		t.Parallel()
		openDB := newDB(t)
		first := openOn(t, openDB)
		in := []store.Charge{charge("r1", "summary", base, 1, 1100, 310), charge("r2", "title", base.Add(time.Second), 1, 150, 80)}
		mustUpsert(t, first, "groq", in...)
		before := mustMigrations(t, first)
		if len(before) == 0 {
			t.Fatal("a new database records no migrations")
		}
		for i, m := range before {
			if m.Version != i+1 || m.Name == "" || m.AppliedAt.IsZero() {
				t.Fatalf("migration %d recorded as %+v: want version %d with a name and a time", i, m, i+1)
			}
		}
		if err := first.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		second := openOn(t, openDB)
		assertCharges(t, mustCharges(t, second, "groq", time.Time{}), in)
		if after := mustMigrations(t, second); !reflect.DeepEqual(after, before) {
			t.Fatalf("migrations after reopening = %+v, want unchanged %+v", after, before)
		}
	})

	t.Run("ConcurrentOpensMigrateOnce", func(t *testing.T) {
		t.Parallel()
		openDB := newDB(t)
		const openers = 4
		stores := make([]store.Store, openers)
		errs := make([]error, openers)
		var wg sync.WaitGroup
		for i := range openers {
			wg.Go(func() { stores[i], errs[i] = openDB(ctx) })
		}
		wg.Wait()
		for i, s := range stores {
			if s != nil {
				t.Cleanup(func() { s.Close() })
			}
			if errs[i] != nil {
				t.Fatalf("opener %d of %d opening a new database at once: %v", i, openers, errs[i])
			}
		}
		want := mustMigrations(t, stores[0])
		for i, s := range stores[1:] {
			if got := mustMigrations(t, s); !reflect.DeepEqual(got, want) {
				t.Fatalf("opener %d sees migrations %+v, opener 0 sees %+v", i+1, got, want)
			}
		}
		// Every handle works on the same tables.
		for i, s := range stores {
			mustUpsert(t, s, "groq", charge(fmt.Sprintf("r%d", i), "f", base, 1, 1, 1))
		}
		assertIDs(t, mustCharges(t, stores[0], "groq", time.Time{}), "r0", "r1", "r2", "r3")
	})

	t.Run("MillisecondPrecisionInUTC", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		tokyo := time.FixedZone("JST", 9*3600)
		cases := []time.Time{
			time.Date(2026, 10, 19, 8, 1, 0, 999_999_999, tokyo),
			time.Date(2026, 10, 19, 8, 1, 0, 1_000_001, time.UTC),
			time.Unix(0, 0).Add(-time.Millisecond),      // before 1970
			time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), // far future
		}
		var in []store.Charge
		for i, at := range cases {
			in = append(in, charge(fmt.Sprintf("r%d", i), "f", at, 1, 1, 1))
		}
		mustUpsert(t, s, "groq", in...)
		got := mustCharges(t, s, "groq", time.Unix(0, 0).Add(-time.Hour))
		if len(got) != len(cases) {
			t.Fatalf("got %d charges, want %d", len(got), len(cases))
		}
		byID := map[string]store.Charge{}
		for _, c := range got {
			byID[c.ID] = c
		}
		for i, at := range cases {
			c := byID[fmt.Sprintf("r%d", i)]
			want := at.Truncate(time.Millisecond).UTC()
			if !c.At.Equal(want) || c.At.Location() != time.UTC {
				t.Errorf("At %s came back as %s, want %s in UTC", at.Format(time.RFC3339Nano), c.At.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
			}
		}
		// since and before compare at the same precision: a charge stored at
		// .999 is at or after a since of .999999999, and not before it.
		sub := cases[0]
		assertIDs(t, mustCharges(t, s, "groq", sub), "r0", "r1", "r3")
		if n, err := s.PruneCharges(ctx, "groq", sub); err != nil || n != 1 {
			t.Fatalf("PruneCharges(%s) = %d, %v; want only the charge before 1970 deleted", sub, n, err)
		}
	})

	t.Run("ValuesRoundTrip", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		in := []store.Charge{
			{ID: "zero", At: base},
			{ID: "big", Flow: "backfill", At: base, Cost: governor.Cost{Requests: 1 << 40, Input: 1<<62 + 7, Output: 1<<62 + 9, Money: 1<<62 + 11}},
			{ID: "priced", Flow: "budget", At: base, Cost: governor.Cost{Requests: 1, Input: 1000, Output: 20, Money: 1_200_001}},
			{ID: `quote'"; DROP TABLE sluice_quota_charges; --`, Flow: "フロー ✓", At: base},
		}
		key := `k'ey "with" quotes ✓`
		mustUpsert(t, s, key, in...)
		got := mustCharges(t, s, key, time.Time{})
		sort.Slice(got, func(i, j int) bool { return got[i].ID < got[j].ID })
		want := append([]store.Charge(nil), in...)
		sort.Slice(want, func(i, j int) bool { return want[i].ID < want[j].ID })
		assertCharges(t, got, want)
	})

	t.Run("RejectsEmptyKeyAndID", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		err := s.UpsertCharges(ctx, "groq", []store.Charge{charge("ok", "f", base, 1, 1, 1), {Flow: "summary", At: base}})
		if err == nil || !strings.Contains(err.Error(), "upsert charges") || !strings.Contains(err.Error(), "ID") {
			t.Fatalf("upsert of a charge without ID: error = %v, want one saying upsert charges and ID", err)
		}
		if err := s.UpsertCharges(ctx, "", []store.Charge{charge("r1", "f", base, 1, 1, 1)}); err == nil || !strings.Contains(err.Error(), "key") {
			t.Fatalf("upsert with an empty key: error = %v, want one naming the key", err)
		}
		// Nothing of a rejected batch is stored.
		assertCharges(t, mustCharges(t, s, "groq", time.Time{}), nil)
	})

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.UpsertCharges(cctx, "groq", []store.Charge{charge("r1", "f", base, 1, 1, 1)}); !errors.Is(err, context.Canceled) {
			t.Errorf("UpsertCharges with a canceled context: error = %v, want context.Canceled", err)
		}
		if _, err := s.Charges(cctx, "groq", time.Time{}); !errors.Is(err, context.Canceled) {
			t.Errorf("Charges with a canceled context: error = %v, want context.Canceled", err)
		}
		if _, err := s.PruneCharges(cctx, "groq", base); !errors.Is(err, context.Canceled) {
			t.Errorf("PruneCharges with a canceled context: error = %v, want context.Canceled", err)
		}
		if _, err := s.CountStart(cctx, "f", "k", time.Minute, 1, base); !errors.Is(err, context.Canceled) {
			t.Errorf("CountStart with a canceled context: error = %v, want context.Canceled", err)
		}
		if err := s.RecordDroppedEvent(cctx, store.DroppedEvent{Function: "f", EventID: "e1", At: base}); !errors.Is(err, context.Canceled) {
			t.Errorf("RecordDroppedEvent with a canceled context: error = %v, want context.Canceled", err)
		}
		if _, err := s.DroppedEvents(cctx, "", 10); !errors.Is(err, context.Canceled) {
			t.Errorf("DroppedEvents with a canceled context: error = %v, want context.Canceled", err)
		}
		end := store.RunEnd{RunID: "f:e1", Status: "cancelled", EndedAt: base}
		if err := s.RecordCancel(cctx, end); !errors.Is(err, context.Canceled) {
			t.Errorf("RecordCancel with a canceled context: error = %v, want context.Canceled", err)
		}
		if err := s.RecordRunEnd(cctx, end); !errors.Is(err, context.Canceled) {
			t.Errorf("RecordRunEnd with a canceled context: error = %v, want context.Canceled", err)
		}
		if _, err := s.RunEnds(cctx, []string{"f:e1"}); !errors.Is(err, context.Canceled) {
			t.Errorf("RunEnds with a canceled context: error = %v, want context.Canceled", err)
		}
		for call, err := range concat(backfillCalls(cctx, s), historyCalls(cctx, s), leaseCalls(cctx, s)) {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a canceled context: error = %v, want context.Canceled", call, err)
			}
		}
		assertCharges(t, mustCharges(t, s, "groq", time.Time{}), nil)
		if jobs, err := s.Jobs(ctx); err != nil || len(jobs) != 0 {
			t.Errorf("jobs after canceled calls: %+v, %v", jobs, err)
		}
		if got, err := s.RunEnds(ctx, []string{"f:e1"}); err != nil || len(got) != 0 {
			t.Errorf("run ends after canceled records: %+v, %v", got, err)
		}
		if got, err := s.ConfigVersions(ctx, time.Time{}); err != nil || len(got) != 0 {
			t.Errorf("config versions after canceled records: %+v, %v", got, err)
		}
		if got, err := s.Samples(ctx, time.Time{}, base.Add(time.Hour), ""); err != nil || len(got) != 0 {
			t.Errorf("samples after canceled records: %+v, %v", got, err)
		}
		if minute, day, err := s.LeaseUse(ctx, "groq", base); err != nil || minute != (governor.Cost{}) || day != (governor.Cost{}) {
			t.Errorf("lease use after canceled calls: %+v, %+v, %v", minute, day, err)
		}
	})

	t.Run("ErrorsNameTheOperation", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		for _, tc := range []struct {
			op  string
			err error
		}{
			{"upsert charges", s.UpsertCharges(ctx, "groq", []store.Charge{charge("r1", "f", base, 1, 1, 1)})},
			{"read charges", second(s.Charges(ctx, "groq", base))},
			{"prune charges", second(s.PruneCharges(ctx, "groq", base))},
			{"count rate limit of f", second(s.CountStart(ctx, "f", "k", time.Minute, 1, base))},
			{"record dropped event e1", s.RecordDroppedEvent(ctx, store.DroppedEvent{Function: "f", EventID: "e1", At: base})},
			{"list dropped events", second(s.DroppedEvents(ctx, "f", 10))},
			{"record the cancel of run f:e1", s.RecordCancel(ctx, store.RunEnd{RunID: "f:e1", Status: "cancelled", EndedAt: base})},
			{"record the end of run f:e1", s.RecordRunEnd(ctx, store.RunEnd{RunID: "f:e1", Status: "timed_out", EndedAt: base})},
			{"read why runs ended", second(s.RunEnds(ctx, []string{"f:e1"}))},
		} {
			if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.op+": ") {
				t.Errorf("%s on a closed store: error = %v, want one starting %q", tc.op, tc.err, tc.op+": ")
			}
		}
		for op, err := range concat(backfillCalls(ctx, s), historyCalls(ctx, s), leaseCalls(ctx, s)) {
			if err == nil || !strings.HasPrefix(err.Error(), op+": ") {
				t.Errorf("%s on a closed store: error = %v, want one starting %q", op, err, op+": ")
			}
		}
	})

	exerciseEngineTables(t, open)
	exerciseBackfills(t, open)
	exerciseRecentItems(t, newDB)
	exerciseHistory(t, open)
	exerciseSampleMoney(t, newDB)
	exerciseLeases(t, newDB)
	exerciseDBOS(t, open)
	exerciseLocks(t, newDB)
}

// Benchmark measures UpsertCharges with batches of 100 new charges, the size
// of a busy governor's flush, so drivers and later changes compare side by side.
func Benchmark(b *testing.B, s store.Store) {
	ctx := context.Background()
	batch := make([]store.Charge, 100)
	n := 0
	for b.Loop() {
		for i := range batch {
			batch[i] = charge(fmt.Sprintf("r%09d", n), "bench", base.Add(time.Duration(n)*time.Millisecond), 1, 1000, 512)
			n++
		}
		if err := s.UpsertCharges(ctx, "bench", batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/charge")
}

// BenchmarkBackfills measures a backfill of size items. Fill adds them by
// AddItems of 1,000 new keys a call, as a backfill's first scan of its
// table would, once, and reports the time it took; then the first 2 % are
// settled, half of them rejected and waiting (1 % of the backfill: many
// more than a backfill keeps waiting, for NextItems to pass over), a
// quarter parked and a quarter saved. At that size it measures NextItems
// of 50 items, Job, RecentItems of 50 items (the first page and one from
// the middle), and AddItems of 1,000 more new keys. Run it with
// -benchtime 100x or so: each AddItems iteration grows the backfill.
func BenchmarkBackfills(b *testing.B, s store.Store, size int) {
	ctx := context.Background()
	const backfill, batch = "bench", 1000
	keys := make([]string, batch)
	added := 0
	add := func() {
		for i := range keys {
			keys[i] = fmt.Sprintf("item-%09d", added+i)
		}
		n, err := s.AddItems(ctx, backfill, keys, base, "")
		if err != nil || n != batch {
			b.Fatalf("AddItems of %d new keys = %d, %v", batch, n, err)
		}
		added += batch
	}
	var fill time.Duration
	b.Run(fmt.Sprintf("Fill%d", size), func(b *testing.B) {
		if added == 0 {
			start := time.Now()
			for added < size {
				add()
			}
			fill = time.Since(start)
			settleFirst(b, s, backfill, size/50)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(fill.Seconds(), "s/fill")
		b.ReportMetric(float64(fill.Nanoseconds())/float64(size), "ns/item")
	})
	b.Run("NextItems50", func(b *testing.B) {
		for b.Loop() {
			items, err := s.NextItems(ctx, backfill, base.Add(time.Minute), 50, store.Cursor{}, store.Lane{})
			if err != nil || len(items) != 50 {
				b.Fatalf("NextItems = %d items, %v", len(items), err)
			}
		}
	})
	b.Run("RecentItems50", func(b *testing.B) {
		// The dashboard's page of a backfill's latest items, the first and
		// one from the middle of the backfill.
		middle := store.RecentCursor{At: base, Key: fmt.Sprintf("item-%09d", size/2)}
		for b.Loop() {
			for _, before := range []store.RecentCursor{{}, middle} {
				items, err := s.RecentItems(ctx, backfill, 50, before)
				if err != nil || len(items) != 50 {
					b.Fatalf("RecentItems before %+v = %d items, %v", before, len(items), err)
				}
			}
		}
	})
	b.Run("Job", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Job(ctx, backfill); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AddItems1000", func(b *testing.B) {
		for b.Loop() {
			add()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/item")
	})
}

// settleFirst settles the first n items of backfill, 50 a batch: half of
// them rejected, due again in an hour, a quarter parked (rejected with a
// MaxRejects of 1), a quarter saved.
func settleFirst(b *testing.B, s store.Store, backfill string, n int) {
	for first := 0; first < n; first += 50 {
		parked := store.Settlement{Backfill: backfill, RunID: "bench", RequestID: fmt.Sprint(first, "p"), At: base, MaxRejects: 1}
		other := store.Settlement{Backfill: backfill, RunID: "bench", RequestID: fmt.Sprint(first), At: base, MaxRejects: 2, RetryAfter: time.Hour}
		for i := first; i < first+50; i++ {
			o := store.Outcome{Key: fmt.Sprintf("item-%09d", i), Reason: "too long"}
			switch i % 4 {
			case 0:
				o.Reason, o.Saved = "", true
				other.Outcomes = append(other.Outcomes, o)
			case 1:
				parked.Outcomes = append(parked.Outcomes, o)
			default:
				other.Outcomes = append(other.Outcomes, o)
			}
		}
		for _, st := range []store.Settlement{parked, other} {
			if err := s.Settle(context.Background(), nil, st); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func second[T any](_ T, err error) error { return err }

// concat yields what each of seqs yields, in turn.
func concat[K, V any](seqs ...iter.Seq2[K, V]) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for _, seq := range seqs {
			for k, v := range seq {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// backfillCalls calls every method on backfills once, with good input,
// and yields what each call does, as its error names it, with the error.
func backfillCalls(ctx context.Context, s store.Store) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		st := store.Settlement{Backfill: "titles", RunID: "r1", RequestID: "q1", At: base, MaxRejects: 1,
			Outcomes: []store.Outcome{{Key: "k1", Saved: true}}}
		for _, c := range []struct {
			op  string
			err error
		}{
			{"add items to titles", second(s.AddItems(ctx, "titles", []string{"k1"}, base, ""))},
			{"list next items of titles", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{}, store.Lane{}))},
			{"settle batch of titles", s.Settle(ctx, nil, st)},
			{"read items of titles", second(s.Items(ctx, "titles", []string{"k1"}))},
			{"start job titles", s.StartJob(ctx, "titles", base)},
			{"read job titles", second(s.Job(ctx, "titles"))},
			{"list jobs", second(s.Jobs(ctx))},
			{"record run of job titles", s.RecordJobRun(ctx, "titles", base, "")},
			{"set alert of job titles", second(s.SetJobAlert(ctx, "titles", "", "stalled"))},
			{"record backfill run r1", s.RecordBackfillRun(ctx, store.BackfillRun{RunID: "r1", Backfill: "titles", EndedAt: base})},
			{"list backfill runs", second(s.BackfillRuns(ctx, "", 10))},
			{"list recent items of titles", second(s.RecentItems(ctx, "titles", 10, store.RecentCursor{}))},
		} {
			if !yield(c.op, c.err) {
				return
			}
		}
	}
}

func openOn(t *testing.T, open OpenFunc) store.Store {
	t.Helper()
	s, err := open(context.Background())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

func charge(id, flow string, at time.Time, requests, input, output int64) store.Charge {
	return store.Charge{ID: id, Flow: flow, At: at, Cost: governor.Cost{Requests: requests, Input: input, Output: output}}
}

func mustUpsert(t *testing.T, s store.Store, key string, cs ...store.Charge) {
	t.Helper()
	if err := s.UpsertCharges(context.Background(), key, cs); err != nil {
		t.Fatalf("UpsertCharges(%q, %d charges): %v", key, len(cs), err)
	}
}

func mustCharges(t *testing.T, s store.Store, key string, since time.Time) []store.Charge {
	t.Helper()
	cs, err := s.Charges(context.Background(), key, since)
	if err != nil {
		t.Fatalf("Charges(%q, %s): %v", key, since, err)
	}
	return cs
}

func mustMigrations(t *testing.T, s store.Store) []store.Migration {
	t.Helper()
	m, ok := s.(Migrator)
	if !ok {
		t.Fatalf("%T has no Migrations method: every driver must list its applied migrations", s)
	}
	ms, err := m.Migrations(context.Background())
	if err != nil {
		t.Fatalf("Migrations: %v", err)
	}
	return ms
}

// assertCharges checks got against want, with times compared at the
// precision the store promises.
func assertCharges(t *testing.T, got, want []store.Charge) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d charges, want %d\ngot:  %s\nwant: %s", len(got), len(want), brief(got), brief(want))
	}
	for i := range want {
		w := want[i]
		w.At = w.At.Truncate(time.Millisecond).UTC()
		g := got[i]
		if g.ID != w.ID || g.Flow != w.Flow || g.Cost != w.Cost || !g.At.Equal(w.At) || g.At.Location() != time.UTC {
			t.Fatalf("charge %d = %+v, want %+v", i, g, w)
		}
	}
}

func assertIDs(t *testing.T, got []store.Charge, want ...string) {
	t.Helper()
	ids := make([]string, len(got))
	for i, c := range got {
		ids[i] = c.ID
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("charges %v, want %v", ids, want)
	}
}

// brief prints at most a few charges of a long list.
func brief(cs []store.Charge) string {
	if len(cs) > 6 {
		return fmt.Sprintf("%v … (%d more)", cs[:6], len(cs)-6)
	}
	return fmt.Sprint(cs)
}
