package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseBackfills checks the backfills' items, jobs and runs.
func exerciseBackfills(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()

	t.Run("AddItemsRecordsEachKeyOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if n := mustAdd(t, s, "titles", base, "", "b", "a", "b", "c"); n != 3 {
			t.Fatalf("AddItems of a, b, c with b twice added %d, want 3", n)
		}
		// c has a record already: it stays eligible from base.
		if n := mustAdd(t, s, "titles", base.Add(time.Hour), "", "c", "d"); n != 1 {
			t.Fatalf("AddItems of c again and d added %d, want 1", n)
		}
		pending := func(key string, at time.Time) store.Item {
			return store.Item{Backfill: "titles", Key: key, State: store.ItemPending, EligibleAt: utcMillis(at)}
		}
		assertItems(t, mustItems(t, s, "titles", "d", "c", "zz", "a", "b", "a"),
			pending("a", base), pending("b", base), pending("c", base), pending("d", base.Add(time.Hour)))
		// The job was created by the first call, monitored from then.
		assertJob(t, mustJob(t, s, "titles"), store.Job{Name: "titles", MonitoringSince: utcMillis(base), Pending: 4})
		if n := mustAdd(t, s, "titles", base.Add(2*time.Hour), ""); n != 0 {
			t.Fatalf("AddItems of no keys added %d", n)
		}
		assertJob(t, mustJob(t, s, "titles"), store.Job{Name: "titles", MonitoringSince: utcMillis(base), Pending: 4})
		// No keys still makes the job: a backfill that finds nothing yet
		// is monitored from then.
		mustAdd(t, s, "empty", base.Add(time.Minute), "")
		assertJob(t, mustJob(t, s, "empty"), store.Job{Name: "empty", MonitoringSince: utcMillis(base.Add(time.Minute))})
		if got := mustItems(t, s, "titles"); got != nil {
			t.Errorf("Items of no keys = %+v, want none", got)
		}
		if got := mustItems(t, s, "nobody", "a"); got != nil {
			t.Errorf("Items of an unknown backfill = %+v, want none", got)
		}
		assertCounts(t, s, "titles", "empty")
	})

	t.Run("NextItemsInEligibleThenByteOrder", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// Byte order: upper case before lower, and "Ä" (0xC3 0x84) after
		// every ASCII letter, whatever the database's collation.
		mustAdd(t, s, "titles", base, "", "b", "apple2", "Äpfel", "apple", "Zebra")
		mustAdd(t, s, "titles", base.Add(-time.Minute), "", "early")
		mustAdd(t, s, "titles", base.Add(time.Minute), "", "late")
		mustAdd(t, s, "summaries", base.Add(-time.Hour), "", "other")
		now := base.Add(time.Hour)
		assertKeys(t, mustNext(t, s, "titles", now, 100), "early", "Zebra", "apple", "apple2", "b", "Äpfel", "late")
		assertKeys(t, mustNext(t, s, "titles", now, 2), "early", "Zebra")
		// Pending items are eligible whatever now is: EligibleAt orders them.
		assertKeys(t, mustNext(t, s, "titles", base.Add(-24*time.Hour), 1), "early")
		assertKeys(t, mustNext(t, s, "nobody", now, 10))
		// Selecting changes nothing.
		assertKeys(t, mustNext(t, s, "titles", now, 2), "early", "Zebra")
	})

	t.Run("NextItemsAfterCursor", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "b", "apple", "Äpfel", "Zebra")
		mustAdd(t, s, "titles", base.Add(-time.Minute), "", "early")
		mustAdd(t, s, "titles", base.Add(time.Minute), "", "late", "a")
		now := base.Add(time.Hour)
		all := mustNext(t, s, "titles", now, 100)
		assertKeys(t, all, "early", "Zebra", "apple", "b", "Äpfel", "a", "late")
		// Each cursor returns what comes after it in that order, whether
		// the next item shares its time or not.
		for i, it := range all {
			assertKeys(t, mustNextAfter(t, s, "titles", now, 2, it.After()), keysOf(all[i+1:min(i+3, len(all))])...)
		}
		// A cursor between two keys of one time, and one at a time no item has.
		assertKeys(t, mustNextAfter(t, s, "titles", now, 10, store.Cursor{EligibleAt: base, Key: "apple2"}), "b", "Äpfel", "a", "late")
		assertKeys(t, mustNextAfter(t, s, "titles", now, 10, store.Cursor{EligibleAt: base.Add(30 * time.Second), Key: "zzz"}), "a", "late")
		assertKeys(t, mustNextAfter(t, s, "titles", now, 10, store.Cursor{EligibleAt: base.Add(-time.Hour), Key: "~"}), keysOf(all)...)

		// A rejected item due again comes back wherever the cursor is: it
		// keeps its place by EligibleAt among the pending ones after it.
		st := settlement("titles", "run-1", "req-1", base.Add(2*time.Minute), rejected("early", "too long"), saved("Zebra"))
		st.MaxRejects, st.RetryAfter = 3, time.Minute
		mustSettle(t, s, st)
		assertKeys(t, mustNextAfter(t, s, "titles", now, 10, all[4].After()), "early", "a", "late")
		// Not before it is due.
		assertKeys(t, mustNextAfter(t, s, "titles", base.Add(2*time.Minute), 10, all[4].After()), "a", "late")
	})

	t.Run("NextItemsOfLanes", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var keys []string
		for i := range 200 {
			keys = append(keys, fmt.Sprintf("k%03d", i))
		}
		mustAdd(t, s, "titles", base, "", keys...)
		now := base.Add(time.Hour)
		all := keysOf(mustNext(t, s, "titles", now, 1000))
		for _, of := range []int{1, 3, 7} {
			// The lanes of one Of share no item and hold every one, each
			// in the order the whole is returned in; each, going through
			// its items by cursor, finds the same.
			seen := map[string]int{}
			var empty int
			for j := range of {
				lane := store.Lane{Of: of, Index: j}
				items, err := s.NextItems(context.Background(), "titles", now, 1000, store.Cursor{}, lane)
				if err != nil {
					t.Fatal(err)
				}
				got := keysOf(items)
				if !slices.IsSorted(got) {
					t.Fatalf("lane %+v: %q out of order", lane, got)
				}
				if len(got) == 0 {
					empty++
				}
				var walked []string
				for after := (store.Cursor{}); ; {
					page, err := s.NextItems(context.Background(), "titles", now, 7, after, lane)
					if err != nil {
						t.Fatal(err)
					}
					if len(page) == 0 {
						break
					}
					walked = append(walked, keysOf(page)...)
					after = page[len(page)-1].After()
				}
				if !slices.Equal(walked, got) {
					t.Fatalf("lane %+v walked by cursor: %q, want %q", lane, walked, got)
				}
				for _, k := range got {
					seen[k]++
				}
			}
			if len(seen) != len(all) || empty > 0 && of > 1 {
				t.Fatalf("%d lanes hold %d of %d items (%d lanes empty)", of, len(seen), len(all), empty)
			}
			for k, n := range seen {
				if n != 1 {
					t.Fatalf("%d lanes: item %s in %d of them", of, k, n)
				}
			}
		}
		// A rejected item due again comes back in its own lane only.
		st := settlement("titles", "run-1", "req-1", base.Add(2*time.Minute), rejected("k000", "too long"))
		st.MaxRejects, st.RetryAfter = 3, time.Minute
		mustSettle(t, s, st)
		var in int
		for j := range 3 {
			items, err := s.NextItems(context.Background(), "titles", now, 1000, store.Cursor{EligibleAt: base, Key: "k999"}, store.Lane{Of: 3, Index: j})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				if it.Key != "k000" || it.State != store.ItemRejected {
					t.Fatalf("lane %d past every pending item: %+v", j, it)
				}
				in++
			}
		}
		if in != 1 {
			t.Fatalf("the rejected item came back in %d lanes, want 1", in)
		}
	})

	t.Run("SettleInShards", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "a", "b", "c", "d")
		// Settlements in different shards add up to one job, its last
		// progress the latest of theirs, in Job and in Jobs alike.
		first := settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("a"), rejected("b", "too long"))
		first.MaxRejects, first.RetryAfter, first.Shard = 3, time.Minute, 0
		mustSettle(t, s, first)
		second := settlement("titles", "run-1", "req-2", base.Add(2*time.Minute), saved("c"))
		second.Shard = 5
		mustSettle(t, s, second)
		third := settlement("titles", "run-1", "req-3", base.Add(90*time.Second), saved("d"))
		third.Shard = store.MaxLanes - 1
		mustSettle(t, s, third)
		want := store.Job{Name: "titles", MonitoringSince: utcMillis(base), LastProgressAt: utcMillis(base.Add(2 * time.Minute)), Rejected: 1, Saved: 3}
		assertJob(t, mustJob(t, s, "titles"), want)
		jobs, err := s.Jobs(context.Background())
		if err != nil || len(jobs) != 1 {
			t.Fatalf("Jobs = %+v, %v", jobs, err)
		}
		assertJob(t, jobs[0], want)
	})

	t.Run("SettleRecordsOutcomes", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "k1", "k2", "k3", "k4")
		first := settlement("titles", "run-1", "req-1", base.Add(time.Minute),
			saved("k1"), rejected("k2", "too long"), rejected("k3", "wrong language"))
		first.MaxRejects, first.RetryAfter = 2, 10*time.Minute
		mustSettle(t, s, first)
		t1, retry := utcMillis(first.At), utcMillis(first.At.Add(10*time.Minute))
		k1 := store.Item{Backfill: "titles", Key: "k1", State: store.ItemSaved, EligibleAt: utcMillis(base), ProcessedAt: t1, RunID: "run-1", RequestID: "req-1"}
		k2 := store.Item{Backfill: "titles", Key: "k2", State: store.ItemRejected, EligibleAt: utcMillis(base), RunID: "run-1", RequestID: "req-1",
			Rejects: 1, Reason: "too long", RetryAt: retry}
		k3 := k2
		k3.Key, k3.Reason = "k3", "wrong language"
		k4 := store.Item{Backfill: "titles", Key: "k4", State: store.ItemPending, EligibleAt: utcMillis(base)}
		assertItems(t, mustItems(t, s, "titles", "k1", "k2", "k3", "k4"), k1, k2, k3, k4)
		assertJob(t, mustJob(t, s, "titles"), store.Job{Name: "titles", MonitoringSince: utcMillis(base), LastProgressAt: t1,
			Pending: 1, Rejected: 2, Saved: 1})
		assertCounts(t, s, "titles")

		// A rejected item comes back at its RetryAt, not a millisecond before.
		assertKeys(t, mustNext(t, s, "titles", retry.Add(-time.Millisecond), 10), "k4")
		assertKeys(t, mustNext(t, s, "titles", retry, 10), "k2", "k3", "k4")

		// A second rejection reaches MaxRejects: k2 is parked.
		second := settlement("titles", "run-1", "req-2", base.Add(12*time.Minute), rejected("k2", "still too long"), saved("k3"))
		second.MaxRejects, second.RetryAfter = 2, 10*time.Minute
		mustSettle(t, s, second)
		t2 := utcMillis(second.At)
		k2.State, k2.Rejects, k2.Reason, k2.ProcessedAt, k2.RetryAt, k2.RequestID = store.ItemParked, 2, "still too long", t2, time.Time{}, "req-2"
		k3.State, k3.ProcessedAt, k3.RetryAt, k3.RequestID = store.ItemSaved, t2, time.Time{}, "req-2"
		assertItems(t, mustItems(t, s, "titles", "k1", "k2", "k3", "k4"), k1, k2, k3, k4)
		assertJob(t, mustJob(t, s, "titles"), store.Job{Name: "titles", MonitoringSince: utcMillis(base), LastProgressAt: t2,
			Pending: 1, Saved: 2, Parked: 1})
		assertKeys(t, mustNext(t, s, "titles", base.Add(24*time.Hour), 10), "k4")

		// Saved and parked items are final: a later batch changes neither.
		third := settlement("titles", "run-2", "req-3", base.Add(13*time.Minute), rejected("k1", "late"), saved("k2"), saved("k4"))
		mustSettle(t, s, third)
		k4.State, k4.ProcessedAt, k4.RunID, k4.RequestID = store.ItemSaved, utcMillis(third.At), "run-2", "req-3"
		assertItems(t, mustItems(t, s, "titles", "k1", "k2", "k3", "k4"), k1, k2, k3, k4)
		assertJob(t, mustJob(t, s, "titles"), store.Job{Name: "titles", MonitoringSince: utcMillis(base), LastProgressAt: utcMillis(third.At),
			Saved: 3, Parked: 1})

		// A batch settled late, at an earlier At, keeps the later progress.
		mustAdd(t, s, "titles", base, "", "k5")
		mustSettle(t, s, settlement("titles", "run-0", "req-0", base.Add(5*time.Minute), saved("k5")))
		if j := mustJob(t, s, "titles"); !j.LastProgressAt.Equal(third.At.Truncate(time.Millisecond)) {
			t.Errorf("LastProgressAt = %s after a batch settled at an earlier time, want the later %s", j.LastProgressAt, third.At)
		}
		assertCounts(t, s, "titles")
	})

	t.Run("SettleTwiceChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "k1", "k2", "k3")
		earlier := settlement("titles", "run-1", "req-0", base, rejected("k3", "empty"))
		earlier.MaxRejects = 2
		mustSettle(t, s, earlier)
		// k1 is saved, k2 rejected, k3 rejected a second time: parked.
		st := settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("k1"), rejected("k2", "too long"), rejected("k3", "empty again"))
		st.Then, st.MaxRejects = []string{"summaries"}, 2
		mustSettle(t, s, st)
		items := mustItems(t, s, "titles", "k1", "k2", "k3")
		job, then := mustJob(t, s, "titles"), mustJob(t, s, "summaries")
		// Settled again, as a step retried after its transaction committed
		// would, and with the outcomes in another order.
		st.Outcomes[0], st.Outcomes[2] = st.Outcomes[2], st.Outcomes[0]
		mustSettle(t, s, st)
		assertItems(t, mustItems(t, s, "titles", "k1", "k2", "k3"), items...)
		assertJob(t, mustJob(t, s, "titles"), job)
		assertJob(t, mustJob(t, s, "summaries"), then)
		if job.Saved != 1 || job.Rejected != 1 || job.Parked != 1 || then.Pending != 1 {
			t.Fatalf("after one batch: %+v and %+v, want one saved, rejected and parked, and one pending after", job, then)
		}
		assertCounts(t, s, "titles", "summaries")
	})

	t.Run("SettleMakesSavedItemsEligibleThen", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "a1", "a2", "a3")
		mustAdd(t, s, "summaries", base.Add(-time.Hour), "", "a3") // already has a record
		st := settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("a1"), rejected("a2", "bad"), saved("a3"))
		st.Then = []string{"summaries", "tags", "summaries"}
		mustSettle(t, s, st)
		at := utcMillis(st.At)
		pending := func(backfill, key string, at time.Time) store.Item {
			return store.Item{Backfill: backfill, Key: key, State: store.ItemPending, EligibleAt: at}
		}
		assertItems(t, mustItems(t, s, "summaries", "a1", "a2", "a3"), pending("summaries", "a1", at), pending("summaries", "a3", utcMillis(base.Add(-time.Hour))))
		assertItems(t, mustItems(t, s, "tags", "a1", "a2", "a3"), pending("tags", "a1", at), pending("tags", "a3", at))
		assertJob(t, mustJob(t, s, "tags"), store.Job{Name: "tags", MonitoringSince: at, Pending: 2})
		assertJob(t, mustJob(t, s, "summaries"), store.Job{Name: "summaries", MonitoringSince: utcMillis(base.Add(-time.Hour)), Pending: 2})
		assertCounts(t, s, "titles", "summaries", "tags")
	})

	t.Run("AddItemsAfterAnotherBackfill", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "t1", "t2", "t3", "t4")
		st := settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("t1"), rejected("t2", "bad"), saved("t4"))
		mustSettle(t, s, st)
		// Only what titles saved: not t2 (rejected), t3 (pending), t5 (unknown).
		if n := mustAdd(t, s, "summaries", base.Add(time.Hour), "titles", "t1", "t2", "t3", "t4", "t5"); n != 2 {
			t.Fatalf("AddItems after titles added %d, want 2", n)
		}
		assertKeys(t, mustItems(t, s, "summaries", "t1", "t2", "t3", "t4", "t5"), "t1", "t4")
		if n := mustAdd(t, s, "summaries", base.Add(time.Hour), "titles", "t1", "t4"); n != 0 {
			t.Fatalf("AddItems after titles again added %d, want 0", n)
		}
		if n := mustAdd(t, s, "summaries", base.Add(time.Hour), "nobody", "t2"); n != 0 {
			t.Fatalf("AddItems after an unknown backfill added %d, want 0", n)
		}
		assertJob(t, mustJob(t, s, "summaries"), store.Job{Name: "summaries", MonitoringSince: utcMillis(base.Add(time.Hour)), Pending: 2})
		assertCounts(t, s, "titles", "summaries")
	})

	t.Run("SettleRefusesUnknownKeysAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "k1", "k2")
		items, job := mustItems(t, s, "titles", "k1", "k2"), mustJob(t, s, "titles")
		st := settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("k1"), saved("ghost"), rejected("k2", "bad"))
		st.Then = []string{"summaries"}
		err := s.Settle(ctx, nil, st)
		if err == nil || err.Error() != `settle batch of titles: no item "ghost"` {
			t.Fatalf("Settle with an unknown key: error = %v, want one naming it", err)
		}
		assertItems(t, mustItems(t, s, "titles", "k1", "k2"), items...)
		assertJob(t, mustJob(t, s, "titles"), job)
		if _, err := s.Job(ctx, "summaries"); !errors.Is(err, store.ErrNoJob) {
			t.Errorf("a refused batch made the job of its Then: %v", err)
		}
		st.Backfill = "nobody"
		if err := s.Settle(ctx, nil, st); err == nil || err.Error() != `settle batch of nobody: no item "ghost"` {
			t.Fatalf("Settle on an unknown backfill: error = %v", err)
		}
		// No outcomes is nothing to do.
		if err := s.Settle(ctx, nil, settlement("titles", "run-1", "req-9", base)); err != nil {
			t.Fatalf("Settle of no outcomes: %v", err)
		}
		assertJob(t, mustJob(t, s, "titles"), job)
	})

	t.Run("Jobs", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if jobs, err := s.Jobs(ctx); err != nil || jobs == nil || len(jobs) != 0 {
			t.Fatalf("Jobs of a new database = %#v, %v; want an empty list", jobs, err)
		}
		mustStartJob(t, s, "b-job", base)
		mustStartJob(t, s, "b-job", base.Add(time.Hour)) // recorded already
		mustStartJob(t, s, "A-job", base.Add(time.Minute))
		mustStartJob(t, s, "ä-job", base.Add(time.Minute))
		_, err := s.Job(ctx, "nobody")
		if !errors.Is(err, store.ErrNoJob) || err.Error() != "read job nobody: no such job" {
			t.Fatalf("Job of an unknown job: error = %v, want ErrNoJob", err)
		}

		at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
		mustRecordJobRun(t, s, "b-job", at(1), "provider down")
		mustRecordJobRun(t, s, "b-job", at(2), "provider still down")
		assertJob(t, mustJob(t, s, "b-job"), store.Job{Name: "b-job", MonitoringSince: utcMillis(base), LastRunAt: utcMillis(at(2)),
			LastStatus: "failed", ConsecutiveFailures: 2, LastError: "provider still down"})
		mustRecordJobRun(t, s, "b-job", at(3), "")
		// A success keeps the last failure's reason.
		assertJob(t, mustJob(t, s, "b-job"), store.Job{Name: "b-job", MonitoringSince: utcMillis(base), LastRunAt: utcMillis(at(3)),
			LastStatus: "ok", LastError: "provider still down"})
		mustRecordJobRun(t, s, "b-job", at(4), "again")
		if j := mustJob(t, s, "b-job"); j.ConsecutiveFailures != 1 || j.LastStatus != "failed" {
			t.Errorf("after ok then failed: %+v, want 1 consecutive failure", j)
		}
		// A run of a new job makes it, monitored from the run's end.
		mustRecordJobRun(t, s, "fresh", at(5), "")
		assertJob(t, mustJob(t, s, "fresh"), store.Job{Name: "fresh", MonitoringSince: utcMillis(at(5)), LastRunAt: utcMillis(at(5)), LastStatus: "ok"})
		mustRecordJobRun(t, s, "broken", at(6), "boom")
		assertJob(t, mustJob(t, s, "broken"), store.Job{Name: "broken", MonitoringSince: utcMillis(at(6)), LastRunAt: utcMillis(at(6)),
			LastStatus: "failed", ConsecutiveFailures: 1, LastError: "boom"})

		jobs, err := s.Jobs(ctx)
		if err != nil {
			t.Fatalf("Jobs: %v", err)
		}
		var names []string
		for _, j := range jobs {
			names = append(names, j.Name)
		}
		if want := []string{"A-job", "b-job", "broken", "fresh", "ä-job"}; !reflect.DeepEqual(names, want) {
			t.Fatalf("Jobs = %v, want %v (byte order)", names, want)
		}
		assertJob(t, jobs[2], mustJob(t, s, "broken"))
	})

	t.Run("RecordJobRunBoundsTheError", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for _, tc := range []struct{ failure, want string }{
			// 1 + 2×600 bytes: the cut falls inside an "é".
			{"a" + strings.Repeat("é", 600), "a" + strings.Repeat("é", 511)},
			{strings.Repeat("x", store.MaxReasonBytes), strings.Repeat("x", store.MaxReasonBytes)},
			{"bad\x00utf\xff8", "bad\uFFFDutf\uFFFD8"},
		} {
			mustRecordJobRun(t, s, "j", base, tc.failure)
			if got := mustJob(t, s, "j").LastError; got != tc.want {
				t.Errorf("LastError of failure %.20q… = %.20q… (%d bytes), want %.20q… (%d bytes)", tc.failure, got, len(got), tc.want, len(tc.want))
			}
		}
	})

	t.Run("SetJobAlert", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustStartJob(t, s, "titles", base)
		for i, step := range []struct {
			from, to string
			want     bool
		}{
			{"", "stalled", true},
			{"", "stalled", false}, // someone else sent it
			{"failing", "", false},
			{"stalled", "", true},
			{"", "failing", true},
		} {
			got, err := s.SetJobAlert(ctx, "titles", step.from, step.to)
			if err != nil || got != step.want {
				t.Fatalf("step %d: SetJobAlert(%q, %q) = %v, %v; want %v", i, step.from, step.to, got, err, step.want)
			}
		}
		if a := mustJob(t, s, "titles").Alert; a != "failing" {
			t.Fatalf("Alert = %q, want failing", a)
		}
		if _, err := s.SetJobAlert(ctx, "nobody", "", "stalled"); !errors.Is(err, store.ErrNoJob) ||
			err.Error() != "set alert of job nobody: no such job" {
			t.Fatalf("SetJobAlert of an unknown job: error = %v, want ErrNoJob", err)
		}
	})

	t.Run("SetJobAlertConcurrentSucceedsOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustStartJob(t, s, "titles", base)
		const workers = 8
		var set atomic.Int32
		together(t, workers, func(int) error {
			ok, err := s.SetJobAlert(ctx, "titles", "", "stalled")
			if ok {
				set.Add(1)
			}
			return err
		})
		if n := set.Load(); n != 1 {
			t.Fatalf("%d of %d processes were told to send the alert, want exactly 1", n, workers)
		}
	})

	t.Run("ConcurrentAddItemsAddEachKeyOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const workers, keys = 6, 300
		var added atomic.Int64
		together(t, workers, func(w int) error {
			// Overlapping ranges, in batches, each worker in its own order.
			var batch []string
			for i := range keys {
				batch = append(batch, fmt.Sprintf("k%04d", (i*(w+1)+w*37)%keys))
				if len(batch) == 50 {
					n, err := s.AddItems(ctx, "titles", batch, base, "")
					if err != nil {
						return err
					}
					added.Add(int64(n))
					batch = batch[:0]
				}
			}
			return nil
		})
		all := make([]string, keys)
		for i := range all {
			all[i] = fmt.Sprintf("k%04d", i)
		}
		n := int64(len(mustItems(t, s, "titles", all...)))
		if added.Load() != n {
			t.Fatalf("concurrent AddItems said they added %d keys; %d are recorded", added.Load(), n)
		}
		if j := mustJob(t, s, "titles"); j.Pending != n {
			t.Fatalf("job counts %d pending, %d items are recorded", j.Pending, n)
		}
		assertCounts(t, s, "titles")
	})

	t.Run("CountersFollowConcurrentChanges", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const workers, batches, size = 4, 5, 10
		var keys []string
		for i := range workers * batches * size {
			keys = append(keys, fmt.Sprintf("k%04d", i))
		}
		mustAdd(t, s, "titles", base, "", keys...)
		// Settle disjoint batches, twice each, with outcomes of every kind
		// and a backfill after this one…
		settle := func(w int) error {
			for b := range batches {
				var out []store.Outcome
				for i := range size {
					k := keys[(w*batches+b)*size+i]
					if i%3 == 0 {
						out = append(out, rejected(k, "bad"))
					} else {
						out = append(out, saved(k))
					}
				}
				st := settlement("titles", fmt.Sprintf("run-%d", w), fmt.Sprintf("req-%d", b), base.Add(time.Duration(b)*time.Minute), out...)
				st.MaxRejects, st.Then = 1+b%2, []string{"summaries"}
				for range 2 {
					if err := s.Settle(ctx, nil, st); err != nil {
						return fmt.Errorf("batch %d: %w", b, err)
					}
				}
			}
			return nil
		}
		// …while others add to both backfills, some keys new.
		add := func(w int) error {
			for b := range batches {
				batch := []string{fmt.Sprintf("new-%d-%d", w, b), keys[(w*batches+b)*size], keys[len(keys)-1-w]}
				for _, backfill := range []string{"titles", "summaries"} {
					if _, err := s.AddItems(ctx, backfill, batch, base, ""); err != nil {
						return fmt.Errorf("batch %d: %w", b, err)
					}
				}
			}
			return nil
		}
		together(t, 2*workers, func(w int) error {
			if w%2 == 0 {
				return settle(w / 2)
			}
			return add(w / 2)
		})
		assertCounts(t, s, "titles", "summaries")
		if j := mustJob(t, s, "titles"); j.Saved == 0 || j.Parked == 0 || j.Rejected == 0 || j.Pending == 0 {
			t.Fatalf("titles' counts %+v: want items in every state", j)
		}
	})

	t.Run("BackfillRuns", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		run := func(id, backfill string, ended time.Time) store.BackfillRun {
			return store.BackfillRun{RunID: id, Backfill: backfill, StartedAt: ended.Add(-time.Minute), EndedAt: ended,
				Selected: 50, Retried: 3, Saved: 45, Rejected: map[string]int{"too long": 3, "wrong language": 1}, Parked: 1, Stopped: "continued"}
		}
		r1 := run("r1", "titles", base)
		r2 := run("r2", "titles", base.Add(time.Minute))
		r0 := run("r0", "titles", base.Add(time.Minute)) // ends with r2: by run ID
		r3 := run("r3", "summaries", base.Add(30*time.Second))
		r3.StartedAt, r3.Rejected, r3.Stopped = time.Time{}, map[string]int{}, "aborted=quota TPD"
		for _, r := range []store.BackfillRun{r1, r2, r0, r3} {
			mustRecordBackfillRun(t, s, r)
		}
		// Recording a run again replaces it.
		r1.Saved, r1.Selected, r1.Stopped, r1.EndedAt = 50, 51, "done", base.Add(2*time.Minute)
		mustRecordBackfillRun(t, s, r1)
		r3.Rejected = nil // an empty map comes back as nil
		for _, tc := range []struct {
			backfill string
			limit    int
			want     []store.BackfillRun
		}{
			{"", 10, []store.BackfillRun{r1, r0, r2, r3}},
			{"", 2, []store.BackfillRun{r1, r0}},
			{"titles", 10, []store.BackfillRun{r1, r0, r2}},
			{"summaries", 10, []store.BackfillRun{r3}},
			{"nobody", 10, nil},
		} {
			got, err := s.BackfillRuns(ctx, tc.backfill, tc.limit)
			if err != nil {
				t.Fatalf("BackfillRuns(%q, %d): %v", tc.backfill, tc.limit, err)
			}
			assertRuns(t, got, tc.want)
		}
		// Reasons are cut like every text, and those cut alike add up.
		long := strings.Repeat("r", store.MaxReasonBytes)
		r4 := run("r4", "titles", base.Add(time.Hour))
		r4.Rejected = map[string]int{long + "a": 2, long + "b": 3, "short": 1}
		r4.Stopped = "aborted=" + strings.Repeat("x", 2000)
		mustRecordBackfillRun(t, s, r4)
		got, err := s.BackfillRuns(ctx, "titles", 1)
		if err != nil {
			t.Fatal(err)
		}
		r4.Rejected = map[string]int{long: 5, "short": 1}
		r4.Stopped = r4.Stopped[:store.MaxReasonBytes]
		assertRuns(t, got, []store.BackfillRun{r4})
	})

	t.Run("BackfillsRejectBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustAdd(t, s, "titles", base, "", "k1")
		long, longKey := strings.Repeat("n", store.MaxKeyBytes+1), strings.Repeat("k", store.MaxKeyBytes+1)
		good := settlement("titles", "run-1", "req-1", base, saved("k1"))
		bad := func(change func(*store.Settlement)) store.Settlement {
			st := good
			st.Outcomes = append([]store.Outcome(nil), good.Outcomes...)
			change(&st)
			return st
		}
		okRun := store.BackfillRun{RunID: "r1", Backfill: "titles", EndedAt: base}
		badRun := func(change func(*store.BackfillRun)) store.BackfillRun {
			r := okRun
			change(&r)
			return r
		}
		// The words are part of the contract: both drivers say the same.
		for _, tc := range []struct {
			call string
			err  error
			want string
		}{
			{"AddItems without backfill", second(s.AddItems(ctx, "", []string{"a"}, base, "")), "add items: empty backfill name"},
			{"AddItems with a long backfill", second(s.AddItems(ctx, long, []string{"a"}, base, "")),
				`add items: backfill name of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"AddItems with an empty key", second(s.AddItems(ctx, "titles", []string{"a", ""}, base, "")), "add items to titles: empty key"},
			{"AddItems with a long key", second(s.AddItems(ctx, "titles", []string{"a", longKey}, base, "")),
				`add items to titles: key of 257 bytes is over the limit of 256: "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…`},
			{"AddItems with a NUL in a key", second(s.AddItems(ctx, "titles", []string{"a\x00b"}, base, "")), `add items to titles: key "a\x00b" is not UTF-8 without NUL`},
			{"AddItems with a key not UTF-8", second(s.AddItems(ctx, "titles", []string{"\xff"}, base, "")), `add items to titles: key "\xff" is not UTF-8 without NUL`},
			{"AddItems at the zero time", second(s.AddItems(ctx, "titles", []string{"a"}, time.Time{}, "")), "add items to titles: zero time"},
			{"AddItems after a bad name", second(s.AddItems(ctx, "titles", []string{"a"}, base, "\xff")), `add items to titles: after "\xff" is not UTF-8 without NUL`},
			{"NextItems without backfill", second(s.NextItems(ctx, "", base, 10, store.Cursor{}, store.Lane{})), "list next items: empty backfill name"},
			{"NextItems with a limit of 0", second(s.NextItems(ctx, "titles", base, 0, store.Cursor{}, store.Lane{})), "list next items of titles: limit 0 is under 1"},
			{"NextItems with a negative limit", second(s.NextItems(ctx, "titles", base, -1, store.Cursor{}, store.Lane{})), "list next items of titles: limit -1 is under 1"},
			{"NextItems after a cursor without a key", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{EligibleAt: base}, store.Lane{})), "list next items of titles: empty cursor key"},
			{"NextItems after a cursor without a time", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{Key: "k"}, store.Lane{})), "list next items of titles: zero cursor time"},
			{"NextItems after a cursor with a NUL", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{EligibleAt: base, Key: "a\x00b"}, store.Lane{})), "list next items of titles: cursor key \"a\\x00b\" is not UTF-8 without NUL"},
			{"NextItems of too many lanes", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{}, store.Lane{Of: 1025})), "list next items of titles: 1025 lanes: want 0 (all) to 1024"},
			{"NextItems of negative lanes", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{}, store.Lane{Of: -1})), "list next items of titles: -1 lanes: want 0 (all) to 1024"},
			{"NextItems of a lane past Of", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{}, store.Lane{Of: 4, Index: 4})), "list next items of titles: lane 4 of 4: want 0 to 3"},
			{"NextItems of a lane of all", second(s.NextItems(ctx, "titles", base, 10, store.Cursor{}, store.Lane{Index: 1})), "list next items of titles: lane 1 of all lanes: want 0"},
			{"Items without backfill", second(s.Items(ctx, "", []string{"a"})), "read items: empty backfill name"},
			{"Items with a long key", second(s.Items(ctx, "titles", []string{longKey})),
				`read items of titles: key of 257 bytes is over the limit of 256: "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…`},
			{"Settle without backfill", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.Backfill = "" })), "settle batch: empty backfill name"},
			{"Settle without run ID", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.RunID = "" })), "settle batch of titles: empty run ID"},
			{"Settle with a long run ID", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.RunID = strings.Repeat("r", store.MaxRunIDBytes+1) })),
				`settle batch of titles: run ID of 513 bytes is over the limit of 512: "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"…`},
			{"Settle without request ID", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.RequestID = "" })), "settle batch of titles: empty request ID"},
			{"Settle with MaxRejects 0", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.MaxRejects = 0 })), "settle batch of titles: MaxRejects 0 is under 1"},
			{"Settle in a negative shard", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.Shard = -1 })), "settle batch of titles: shard -1: want 0 to 1023"},
			{"Settle in a shard past the lanes", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.Shard = store.MaxLanes })), "settle batch of titles: shard 1024: want 0 to 1023"},
			{"Settle with a negative RetryAfter", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.RetryAfter = -time.Second })),
				"settle batch of titles: RetryAfter -1s is negative"},
			{"Settle at the zero time", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.At = time.Time{} })), "settle batch of titles: zero time"},
			{"Settle with a key twice", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.Outcomes = append(st.Outcomes, rejected("k1", "x")) })),
				`settle batch of titles: key "k1" is in the batch twice`},
			{"Settle with a long key", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.Outcomes[0].Key = longKey })),
				`settle batch of titles: key of 257 bytes is over the limit of 256: "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"…`},
			{"Settle of a rejection without reason", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.Outcomes[0] = store.Outcome{Key: "k1"} })),
				`settle batch of titles: rejected key "k1" has no reason`},
			{"Settle with an empty Then", s.Settle(ctx, nil, bad(func(st *store.Settlement) { st.Then = []string{"summaries", ""} })),
				"settle batch of titles: empty backfill name in Then"},
			{"StartJob without name", s.StartJob(ctx, "", base), "start job: empty job name"},
			{"StartJob at the zero time", s.StartJob(ctx, "j", time.Time{}), "start job j: zero time"},
			{"Job without name", second(s.Job(ctx, "")), "read job: empty job name"},
			{"Job with a long name", second(s.Job(ctx, long)),
				`read job: job name of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"RecordJobRun without name", s.RecordJobRun(ctx, "", base, ""), "record run of job: empty job name"},
			{"RecordJobRun at the zero time", s.RecordJobRun(ctx, "j", time.Time{}, ""), "record run of job j: zero time"},
			{"SetJobAlert without name", second(s.SetJobAlert(ctx, "", "", "stalled")), "set alert of job: empty job name"},
			{"SetJobAlert to a long alert", second(s.SetJobAlert(ctx, "titles", "", long)),
				`set alert of job titles: alert of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"RecordBackfillRun without run ID", s.RecordBackfillRun(ctx, badRun(func(r *store.BackfillRun) { r.RunID = "" })), "record backfill run: empty run ID"},
			{"RecordBackfillRun without backfill", s.RecordBackfillRun(ctx, badRun(func(r *store.BackfillRun) { r.Backfill = "" })),
				"record backfill run r1: empty backfill name"},
			{"RecordBackfillRun without end", s.RecordBackfillRun(ctx, badRun(func(r *store.BackfillRun) { r.EndedAt = time.Time{} })),
				"record backfill run r1: zero end"},
			{"RecordBackfillRun with a negative figure", s.RecordBackfillRun(ctx, badRun(func(r *store.BackfillRun) { r.Saved = -1 })),
				"record backfill run r1: Saved -1 is negative"},
			{"RecordBackfillRun with a negative rejection count", s.RecordBackfillRun(ctx, badRun(func(r *store.BackfillRun) { r.Rejected = map[string]int{"x": -1} })),
				`record backfill run r1: count -1 of Rejected["x"] is negative`},
			{"BackfillRuns with a limit of 0", second(s.BackfillRuns(ctx, "", 0)), "list backfill runs: limit 0 is under 1"},
			{"BackfillRuns of a bad name", second(s.BackfillRuns(ctx, "\xff", 1)), `list backfill runs: backfill name "\xff" is not UTF-8 without NUL`},
		} {
			if tc.err == nil || tc.err.Error() != tc.want {
				t.Errorf("%s: error = %v, want %q", tc.call, tc.err, tc.want)
			}
		}
		// Nothing refused was written.
		assertItems(t, mustItems(t, s, "titles", "k1", "a"), store.Item{Backfill: "titles", Key: "k1", State: store.ItemPending, EligibleAt: utcMillis(base)})
		jobs, err := s.Jobs(ctx)
		if err != nil || len(jobs) != 1 || jobs[0].Name != "titles" || jobs[0].Alert != "" {
			t.Errorf("jobs after refused calls = %+v, %v; want titles alone, as it was", jobs, err)
		}
		if runs, err := s.BackfillRuns(ctx, "", 10); err != nil || len(runs) != 0 {
			t.Errorf("runs after refused calls = %+v, %v", runs, err)
		}
	})
}

// together calls fn(0) … fn(n-1) in goroutines released at once, and
// fails t with their errors once all have returned.
func together(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if err := fn(i); err != nil {
				errs <- fmt.Errorf("goroutine %d: %w", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func settlement(backfill, runID, requestID string, at time.Time, outcomes ...store.Outcome) store.Settlement {
	return store.Settlement{Backfill: backfill, RunID: runID, RequestID: requestID, At: at, Outcomes: outcomes,
		MaxRejects: 3, RetryAfter: time.Minute}
}

func saved(key string) store.Outcome { return store.Outcome{Key: key, Saved: true} }

func rejected(key, reason string) store.Outcome { return store.Outcome{Key: key, Reason: reason} }

func mustAdd(t *testing.T, s store.Store, backfill string, at time.Time, after string, keys ...string) int {
	t.Helper()
	n, err := s.AddItems(context.Background(), backfill, keys, at, after)
	if err != nil {
		t.Fatalf("AddItems(%q, %d keys, after %q): %v", backfill, len(keys), after, err)
	}
	return n
}

func mustSettle(t *testing.T, s store.Store, st store.Settlement) {
	t.Helper()
	if err := s.Settle(context.Background(), nil, st); err != nil {
		t.Fatalf("Settle(%s, %s): %v", st.RunID, st.RequestID, err)
	}
}

func mustItems(t *testing.T, s store.Store, backfill string, keys ...string) []store.Item {
	t.Helper()
	items, err := s.Items(context.Background(), backfill, keys)
	if err != nil {
		t.Fatalf("Items(%q): %v", backfill, err)
	}
	return items
}

func mustNext(t *testing.T, s store.Store, backfill string, now time.Time, limit int) []store.Item {
	t.Helper()
	return mustNextAfter(t, s, backfill, now, limit, store.Cursor{})
}

func mustNextAfter(t *testing.T, s store.Store, backfill string, now time.Time, limit int, after store.Cursor) []store.Item {
	t.Helper()
	items, err := s.NextItems(context.Background(), backfill, now, limit, after, store.Lane{})
	if err != nil {
		t.Fatalf("NextItems(%q, %s, %d, %+v): %v", backfill, now, limit, after, err)
	}
	return items
}

func mustJob(t *testing.T, s store.Store, name string) store.Job {
	t.Helper()
	j, err := s.Job(context.Background(), name)
	if err != nil {
		t.Fatalf("Job(%q): %v", name, err)
	}
	return j
}

func mustStartJob(t *testing.T, s store.Store, name string, at time.Time) {
	t.Helper()
	if err := s.StartJob(context.Background(), name, at); err != nil {
		t.Fatalf("StartJob(%q): %v", name, err)
	}
}

func mustRecordJobRun(t *testing.T, s store.Store, name string, at time.Time, failure string) {
	t.Helper()
	if err := s.RecordJobRun(context.Background(), name, at, failure); err != nil {
		t.Fatalf("RecordJobRun(%q, %q): %v", name, failure, err)
	}
}

func mustRecordBackfillRun(t *testing.T, s store.Store, r store.BackfillRun) {
	t.Helper()
	if err := s.RecordBackfillRun(context.Background(), r); err != nil {
		t.Fatalf("RecordBackfillRun(%s): %v", r.RunID, err)
	}
}

// assertCounts checks that each backfill's job counts its items as they
// are: the counts kept with every change against a COUNT of the rows.
func assertCounts(t *testing.T, s store.Store, backfills ...string) {
	t.Helper()
	h := mustHandle(t, s)
	for _, b := range backfills {
		counted, err := countStates(context.Background(), h, b)
		if err != nil {
			t.Fatalf("count the items of %s: %v", b, err)
		}
		j := mustJob(t, s, b)
		kept := map[store.ItemState]int64{store.ItemPending: j.Pending, store.ItemRejected: j.Rejected, store.ItemSaved: j.Saved, store.ItemParked: j.Parked}
		for _, st := range []store.ItemState{store.ItemPending, store.ItemRejected, store.ItemSaved, store.ItemParked} {
			if kept[st] != counted[st] {
				t.Fatalf("job %s counts %v, its items are %v", b, kept, counted)
			}
		}
	}
}

// countStates counts the items of backfill in each state, through the
// store's handle.
func countStates(ctx context.Context, h store.Handle, backfill string) (map[store.ItemState]int64, error) {
	const q = `SELECT state, COUNT(*) FROM sluice_backfill_items WHERE backfill = $1 GROUP BY state`
	var rows interface {
		Next() bool
		Scan(dest ...any) error
		Err() error
	}
	if h.SQLite != nil {
		r, err := h.SQLite.QueryContext(ctx, q, backfill)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		rows = r
	} else {
		r, err := h.Postgres.Query(ctx, q, backfill)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		rows = r
	}
	counted := map[store.ItemState]int64{}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, err
		}
		counted[store.ItemState(state)] = n
	}
	return counted, rows.Err()
}

func keysOf(items []store.Item) []string {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys
}

func assertKeys(t *testing.T, items []store.Item, want ...string) {
	t.Helper()
	got := keysOf(items)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("items %q, want %q", got, want)
	}
}

// assertItems checks got against want, times compared as instants and
// required in UTC.
func assertItems(t *testing.T, got []store.Item, want ...store.Item) {
	t.Helper()
	show := func(items []store.Item) string {
		var b strings.Builder
		for _, it := range items {
			fmt.Fprintf(&b, "\n  %s/%s %s eligible %s processed %s run %q request %q rejects %d reason %q retry %s",
				it.Backfill, it.Key, it.State, showTime(it.EligibleAt), showTime(it.ProcessedAt), it.RunID, it.RequestID, it.Rejects, it.Reason, showTime(it.RetryAt))
		}
		return b.String()
	}
	if g, w := show(got), show(want); g != w {
		t.Fatalf("items:%s\nwant:%s", g, w)
	}
}

func assertJob(t *testing.T, got, want store.Job) {
	t.Helper()
	show := func(j store.Job) string {
		return fmt.Sprintf("%s since %s progress %s run %s status %q failures %d error %q pending %d rejected %d saved %d parked %d alert %q",
			j.Name, showTime(j.MonitoringSince), showTime(j.LastProgressAt), showTime(j.LastRunAt), j.LastStatus, j.ConsecutiveFailures, j.LastError,
			j.Pending, j.Rejected, j.Saved, j.Parked, j.Alert)
	}
	if g, w := show(got), show(want); g != w {
		t.Fatalf("job:  %s\nwant: %s", g, w)
	}
}

func assertRuns(t *testing.T, got, want []store.BackfillRun) {
	t.Helper()
	show := func(runs []store.BackfillRun) string {
		var b strings.Builder
		for _, r := range runs {
			fmt.Fprintf(&b, "\n  %s %s started %s ended %s selected %d retried %d saved %d rejected %v parked %d stopped %.40q (%d bytes)",
				r.RunID, r.Backfill, showTime(r.StartedAt), showTime(r.EndedAt), r.Selected, r.Retried, r.Saved, r.Rejected, r.Parked, r.Stopped, len(r.Stopped))
		}
		return b.String()
	}
	if g, w := show(got), show(want); g != w {
		t.Fatalf("runs:%s\nwant:%s", g, w)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].Rejected, want[i].Rejected) {
			t.Fatalf("run %s rejected %#v, want %#v", got[i].RunID, got[i].Rejected, want[i].Rejected)
		}
	}
}

// showTime shows t at millisecond precision with its location, which must
// be UTC, or "-" for the zero time.
func showTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("2006-01-02T15:04:05.000000000 MST")
}
