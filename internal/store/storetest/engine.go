package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseEngineTables checks the engine's tables: rate-limit counts,
// dropped events and run ends.
func exerciseEngineTables(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()

	t.Run("CountStartWithinLimitPerWindow", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// base is 07:01:49.123: its minute runs from 07:01:00 to 07:01:59.999.
		minute := base.Truncate(time.Minute)
		for i, tc := range []struct {
			function, key string
			at            time.Time
			want          bool
		}{
			{"summarize", "acme", base, true},
			{"summarize", "acme", minute, true},
			{"summarize", "acme", minute.Add(time.Minute - time.Millisecond), true},
			{"summarize", "acme", base, false}, // the fourth in the window
			{"summarize", "acme", base, false}, // still counted, still over
			{"summarize", "globex", base, true},
			{"summarize", "", base, true},
			{"classify", "acme", base, true},
			{"summarize", "acme", minute.Add(time.Minute), true}, // the next window
		} {
			got, err := s.CountStart(ctx, tc.function, tc.key, time.Minute, 3, tc.at)
			if err != nil {
				t.Fatalf("start %d: CountStart: %v", i, err)
			}
			if got != tc.want {
				t.Fatalf("start %d (%s, key %q, at %s): within = %v, want %v", i, tc.function, tc.key, tc.at.Format(time.RFC3339Nano), got, tc.want)
			}
		}
	})

	t.Run("CountStartForgetsOlderWindowsOfItsKey", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		count := func(function, key string, at time.Time) bool {
			t.Helper()
			ok, err := s.CountStart(ctx, function, key, time.Hour, 1, at)
			if err != nil {
				t.Fatalf("CountStart(%s, %q, %s): %v", function, key, at, err)
			}
			return ok
		}
		early, late := base, base.Add(2*time.Hour)
		for _, k := range []struct{ function, key string }{{"f", "a"}, {"f", "b"}, {"g", "a"}} {
			if !count(k.function, k.key, early) || count(k.function, k.key, early) {
				t.Fatalf("%s %q: the first start of a limit of 1 is not within, or the second is", k.function, k.key)
			}
		}
		// Opening a later window of f/a deletes f/a's earlier one: a start
		// back in it counts from zero. The other keys keep theirs.
		if !count("f", "a", late) {
			t.Fatal("the first start of a new window is not within the limit")
		}
		if !count("f", "a", early) {
			t.Error("a start in a window older than the newest opened counts on: its count was not deleted")
		}
		if count("f", "b", early) || count("g", "a", early) {
			t.Error("opening a window of one function and key deleted another's")
		}
	})

	t.Run("CountStartConcurrent", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const workers, each, limit = 6, 8, 20
		var within atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for range each {
					ok, err := s.CountStart(ctx, "f", "k", time.Minute, limit, base)
					if err != nil {
						errs <- fmt.Errorf("worker %d: %w", w, err)
						return
					}
					if ok {
						within.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := within.Load(); got != limit {
			t.Fatalf("%d of %d concurrent starts within a limit of %d, want exactly %d", got, workers*each, limit, limit)
		}
	})

	t.Run("DroppedEvents", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		drop := func(function, id string, at time.Time) store.DroppedEvent {
			return store.DroppedEvent{Function: function, EventID: id, EventName: "doc.uploaded", Key: "acme",
				Reason: `rate limit of 1 per 1m0s reached for tenant="acme"`, At: at}
		}
		in := []store.DroppedEvent{
			drop("summarize", "e1", base),
			drop("summarize", "e3", base.Add(time.Second+500*time.Microsecond)),
			drop("classify", "e2", base.Add(time.Second)),
			drop("summarize", "e2", base.Add(time.Second)),
			{Function: "summarize", EventID: "e4", EventName: "doc.uploaded", Reason: "rate limit of 1 per 1m0s reached", At: base.Add(-time.Hour)},
		}
		for _, ev := range in {
			if err := s.RecordDroppedEvent(ctx, ev); err != nil {
				t.Fatalf("RecordDroppedEvent(%+v): %v", ev, err)
			}
		}
		// The first record of an event stays.
		again := drop("summarize", "e1", base.Add(time.Hour))
		again.Reason = "another reason"
		if err := s.RecordDroppedEvent(ctx, again); err != nil {
			t.Fatalf("RecordDroppedEvent of an event recorded already: %v", err)
		}
		list := func(function string, limit int) []store.DroppedEvent {
			t.Helper()
			got, err := s.DroppedEvents(ctx, function, limit)
			if err != nil {
				t.Fatalf("DroppedEvents(%q, %d): %v", function, limit, err)
			}
			return got
		}
		ms := func(ev store.DroppedEvent) store.DroppedEvent {
			ev.At = ev.At.Truncate(time.Millisecond).UTC()
			return ev
		}
		// Newest first; e2 of classify and of summarize were dropped in the
		// same millisecond as e3.
		all := []store.DroppedEvent{ms(in[2]), ms(in[3]), ms(in[1]), ms(in[0]), ms(in[4])}
		for _, tc := range []struct {
			function string
			limit    int
			want     []store.DroppedEvent
		}{
			{"", 100, all},
			{"", 2, all[:2]},
			{"summarize", 100, []store.DroppedEvent{all[1], all[2], all[3], all[4]}},
			{"summarize", 1, all[1:2]},
			{"nobody", 100, nil},
		} {
			got := list(tc.function, tc.limit)
			if len(got) != len(tc.want) {
				t.Fatalf("DroppedEvents(%q, %d) = %+v, want %+v", tc.function, tc.limit, got, tc.want)
			}
			for i := range tc.want {
				g, w := got[i], tc.want[i]
				if g.Function != w.Function || g.EventID != w.EventID || g.EventName != w.EventName || g.Key != w.Key ||
					g.Reason != w.Reason || !g.At.Equal(w.At) || g.At.Location() != time.UTC {
					t.Fatalf("DroppedEvents(%q, %d)[%d] = %+v, want %+v in UTC", tc.function, tc.limit, i, got[i], tc.want[i])
				}
			}
		}
	})

	t.Run("RunEnds", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		started, ended := base.Add(-time.Minute), base
		// A deadline: the run records its own end.
		timedOut := store.RunEnd{RunID: "f:e1", Status: "timed_out", Reason: "run deadline of 1m0s passed in step fetch, attempt 2",
			Step: "fetch", Attempt: 2, StartedAt: started, EndedAt: ended}
		// A cancel on request, then the run stopping in a step: the run
		// completes the record, which keeps its status, start and end.
		cancel := store.RunEnd{RunID: "f:e2", Status: "cancelled", Reason: "cancelled on request", StartedAt: started, EndedAt: ended}
		stopped := store.RunEnd{RunID: "f:e2", Status: "cancelled", Reason: "cancelled in step save, attempt 1", Step: "save", Attempt: 1,
			StartedAt: started.Add(time.Second), EndedAt: ended.Add(time.Second)}
		// A cancel of a run that never started, completed by a run that
		// knows when it started.
		unstarted := store.RunEnd{RunID: "f:e3", Status: "cancelled", Reason: "cancelled on request", EndedAt: ended}
		stoppedBefore := store.RunEnd{RunID: "f:e3", Status: "timed_out", Reason: "cancelled before its first step", StartedAt: started, EndedAt: ended}
		// A cancel, then the run failing as it stops (DBOS refused the
		// record of its step): the cancel stays, to be completed by a stop.
		cancelThenFail := store.RunEnd{RunID: "f:e4", Status: "cancelled", Reason: "cancelled on request", StartedAt: started, EndedAt: ended}
		failed := store.RunEnd{RunID: "f:e4", Status: "failed", Reason: "no longer owned by this execution", Step: "call", Attempt: 1,
			StartedAt: started, EndedAt: ended.Add(time.Second)}
		// A failure no process saw, completed by the run that failed.
		unseen := store.RunEnd{RunID: "f:e5", Status: "failed", Reason: "failed", StartedAt: started, EndedAt: ended}
		seen := store.RunEnd{RunID: "f:e5", Status: "failed", Reason: "table orders is missing", Step: "save", Attempt: 2, StartedAt: started, EndedAt: ended}
		for _, step := range []struct {
			record func(context.Context, store.RunEnd) error
			end    store.RunEnd
		}{
			{s.RecordRunEnd, timedOut},
			{s.RecordCancel, cancel},
			{s.RecordRunEnd, stopped},
			{s.RecordCancel, unstarted},
			{s.RecordRunEnd, stoppedBefore},
			{s.RecordCancel, cancelThenFail},
			{s.RecordRunEnd, failed},
			{s.RecordRunEnd, unseen},
			{s.RecordRunEnd, seen},
			// Once a record has a step, nothing changes it.
			{s.RecordRunEnd, store.RunEnd{RunID: "f:e1", Status: "cancelled", Reason: "later", Step: "other", Attempt: 9, EndedAt: ended}},
			{s.RecordCancel, store.RunEnd{RunID: "f:e2", Status: "cancelled", Reason: "cancelled on request", EndedAt: ended.Add(time.Hour)}},
		} {
			if err := step.record(ctx, step.end); err != nil {
				t.Fatalf("recording %+v: %v", step.end, err)
			}
		}
		completed := cancel
		completed.Reason, completed.Step, completed.Attempt = stopped.Reason, stopped.Step, stopped.Attempt
		neverStarted := unstarted
		neverStarted.Reason, neverStarted.StartedAt = stoppedBefore.Reason, started
		completedFailure := unseen
		completedFailure.Reason, completedFailure.Step, completedFailure.Attempt = seen.Reason, seen.Step, seen.Attempt
		want := map[string]store.RunEnd{"f:e1": timedOut, "f:e2": completed, "f:e3": neverStarted, "f:e4": cancelThenFail, "f:e5": completedFailure}
		got, err := s.RunEnds(ctx, []string{"f:e1", "f:e2", "f:e3", "f:e4", "f:e5", "f:unknown"})
		if err != nil {
			t.Fatalf("RunEnds: %v", err)
		}
		assertRunEnds(t, got, want)
		if got, err := s.RunEnds(ctx, []string{"f:e2"}); err != nil || len(got) != 1 || got["f:e2"].Step != "save" {
			t.Fatalf("RunEnds of one run = %+v, %v", got, err)
		}
		if got, err := s.RunEnds(ctx, nil); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("RunEnds of no runs = %#v, %v; want an empty map", got, err)
		}
	})

	t.Run("RunEndsOfManyRuns", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const n = 1200 // more than a statement's 999 parameters on older SQLite builds
		ids := make([]string, n)
		want := map[string]store.RunEnd{}
		for i := range ids {
			ids[i] = fmt.Sprintf("f:%05d", i)
			if i%3 == 0 {
				end := store.RunEnd{RunID: ids[i], Status: "timed_out", Reason: "r", Step: "s", Attempt: i, EndedAt: base}
				if err := s.RecordRunEnd(ctx, end); err != nil {
					t.Fatal(err)
				}
				want[ids[i]] = end
			}
		}
		got, err := s.RunEnds(ctx, ids)
		if err != nil {
			t.Fatalf("RunEnds of %d runs: %v", n, err)
		}
		assertRunEnds(t, got, want)
	})

	t.Run("EngineTablesRejectBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		ev := store.DroppedEvent{Function: "f", EventID: "e1", EventName: "go", Reason: "full", At: base}
		noFunction, noID := ev, ev
		noFunction.Function, noID.EventID = "", ""
		end := store.RunEnd{RunID: "f:e1", Status: "cancelled", EndedAt: base}
		noRun, noStatus := end, end
		noRun.RunID, noStatus.Status = "", ""
		// The words are part of the contract: both drivers say the same.
		for _, tc := range []struct {
			call string
			err  error
			want string
		}{
			{"CountStart without function", second(s.CountStart(ctx, "", "k", time.Minute, 1, base)), "count rate limit: empty function"},
			{"CountStart with a period under 1ms", second(s.CountStart(ctx, "f", "k", time.Millisecond-1, 1, base)), "count rate limit: period 999.999µs is under a millisecond"},
			{"CountStart with no period", second(s.CountStart(ctx, "f", "k", 0, 1, base)), "count rate limit: period 0s is under a millisecond"},
			{"CountStart with a limit of 0", second(s.CountStart(ctx, "f", "k", time.Minute, 0, base)), "count rate limit: limit 0 is under 1"},
			{"RecordDroppedEvent without function", s.RecordDroppedEvent(ctx, noFunction), "record dropped event: empty function"},
			{"RecordDroppedEvent without event ID", s.RecordDroppedEvent(ctx, noID), "record dropped event: empty event ID"},
			{"DroppedEvents with a limit of 0", second(s.DroppedEvents(ctx, "", 0)), "list dropped events: limit 0 is under 1"},
			{"DroppedEvents with a negative limit", second(s.DroppedEvents(ctx, "f", -1)), "list dropped events: limit -1 is under 1"},
			{"RecordCancel without run", s.RecordCancel(ctx, noRun), "record the cancel of a run: empty run ID"},
			{"RecordCancel without status", s.RecordCancel(ctx, noStatus), "record the cancel of run f:e1: empty status"},
			{"RecordRunEnd without run", s.RecordRunEnd(ctx, noRun), "record the end of a run: empty run ID"},
			{"RecordRunEnd without status", s.RecordRunEnd(ctx, noStatus), "record the end of run f:e1: empty status"},
		} {
			if tc.err == nil || tc.err.Error() != tc.want {
				t.Errorf("%s: error %v, want %q", tc.call, tc.err, tc.want)
			}
		}
		// Nothing of what was refused is stored.
		if got, err := s.DroppedEvents(ctx, "", 100); err != nil || len(got) != 0 {
			t.Errorf("dropped events after refused records: %+v, %v", got, err)
		}
		if got, err := s.RunEnds(ctx, []string{"", "f:e1"}); err != nil || len(got) != 0 {
			t.Errorf("run ends after refused records: %+v, %v", got, err)
		}
		if ok, err := s.CountStart(ctx, "f", "k", time.Minute, 1, base); err != nil || !ok {
			t.Errorf("the first valid start after refused ones: within %v, %v; want true", ok, err)
		}
	})
}

// assertRunEnds checks got against want, with times compared at the
// precision the store promises.
func assertRunEnds(t *testing.T, got, want map[string]store.RunEnd) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d run ends, want %d: %+v", len(got), len(want), got)
	}
	for id, w := range want {
		g, ok := got[id]
		w.StartedAt, w.EndedAt = utcMillis(w.StartedAt), utcMillis(w.EndedAt)
		if !ok || g.RunID != w.RunID || g.Status != w.Status || g.Reason != w.Reason || g.Step != w.Step || g.Attempt != w.Attempt ||
			!g.StartedAt.Equal(w.StartedAt) || g.StartedAt.Location() != w.StartedAt.Location() ||
			!g.EndedAt.Equal(w.EndedAt) || g.EndedAt.Location() != time.UTC {
			t.Fatalf("run end %s = %+v, want %+v", id, g, w)
		}
	}
}

// utcMillis is t as the store returns it: in UTC at millisecond precision,
// and the zero time as it is.
func utcMillis(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Millisecond).UTC()
}
