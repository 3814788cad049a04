package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"

	"github.com/jackc/pgx/v5"
)

// A run's history lists every attempt of every step in order, each wait
// between attempts with its cause: the backoff of a transient failure, and
// a wait for quota with what the governor said held the call back.
func TestRunHistory(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var flaky, quota atomic.Int32
		e := newEngine(t, url, &Function{Function: run.Function{ID: "hist", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
			if _, err := Step(r, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			if _, err := Step(r, "flaky", func(context.Context) (int, error) {
				if flaky.Add(1) < 3 {
					return 0, errFlaky
				}
				return 2, nil
			}); err != nil {
				return nil, err
			}
			return Step(r, "call", func(context.Context) (int, error) {
				if quota.Add(1) == 1 {
					return 0, &quotaWait{err: errors.New("waiting for quota"), d: time.Millisecond, kind: "limit", on: "tpm"}
				}
				return 3, nil
			})
		}})
		s := send(t, e, "go", "h1", nil)
		if got := wait(t, e, s.RunID); got.Status != run.Completed {
			t.Fatalf("status %s (%s), want completed", got.Status, got.Error)
		}
		h, err := e.RunHistory(context.Background(), s.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if h.ID != s.RunID || h.Function != "hist" || h.Status != run.Completed || h.CreatedAt.IsZero() || h.StartedAt.IsZero() || h.EndedAt.IsZero() {
			t.Fatalf("history's run %+v", h)
		}
		type want struct {
			step         string
			index, try   int
			status       string
			class, cause string
			on           string
		}
		wants := []want{
			{"first", 1, 1, stepCompleted, "", "", ""},
			{"flaky", 2, 1, stepFailed, "retry", "", ""},
			{"flaky", 2, 2, stepFailed, "retry", WaitRetry, ""},
			{"flaky", 2, 3, stepCompleted, "", WaitRetry, ""},
			{"call", 3, 1, stepFailed, "quota_wait", "", ""},
			{"call", 3, 2, stepCompleted, "", WaitQuota, "tpm"},
		}
		if len(h.Attempts) != len(wants) {
			b, _ := json.MarshalIndent(h.Attempts, "", " ")
			t.Fatalf("%d attempts, want %d:\n%s", len(h.Attempts), len(wants), b)
		}
		for i, w := range wants {
			a := h.Attempts[i]
			got := want{a.Step, a.StepIndex, a.Attempt, a.Status, a.Class, "", ""}
			if a.Wait != nil {
				got.cause, got.on = a.Wait.Cause, a.Wait.WaitOn
				if a.Wait.DurationMS < 0 || a.Wait.EndedAt.Before(a.Wait.StartedAt) || a.StartedAt.Before(a.Wait.StartedAt) {
					t.Errorf("attempt %d: wait %+v before an attempt started %s", i, a.Wait, a.StartedAt)
				}
			}
			if got != w {
				t.Errorf("attempt %d: %+v, want %+v", i, got, w)
			}
			if a.StartedAt.IsZero() || a.EndedAt.Before(a.StartedAt) {
				t.Errorf("attempt %d: started %s, ended %s", i, a.StartedAt, a.EndedAt)
			}
		}
		if w := h.Attempts[5].Wait; w.WaitKind != "limit" || w.Label() != "quota: tpm" {
			t.Errorf("quota wait %+v (label %q), want kind limit, label quota: tpm", w, w.Label())
		}
		// The step view says the same of the quota wait's attempt.
		d := detail(t, e, s.RunID)
		if fa := d.Steps[2].FailedAttempts; len(fa) != 1 || fa[0].WaitOn != "tpm" {
			t.Errorf("failed attempts of call: %+v, want one waiting on tpm", fa)
		}
		if _, err := e.RunHistory(context.Background(), "hist:nope"); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("history of an unknown run: %v, want ErrRunNotFound", err)
		}
	})
}

// searchApp registers two functions: alpha fails, when the event says, with
// a reason naming its table; beta's runs are named by the event's doc.
func searchApp(t *testing.T, url string) *Engine {
	return newEngine(t, url,
		&Function{Function: run.Function{ID: "alpha", Event: "a", Retries: run.NoRetries}, Handler: func(r *Run, ev Event) (any, error) {
			var d struct{ Table string }
			_ = json.Unmarshal(ev.Data, &d)
			return Step(r, "save", func(context.Context) (int, error) {
				if d.Table != "" {
					return 0, fmt.Errorf("table %s is missing", d.Table)
				}
				return 1, nil
			})
		}},
		&Function{Function: run.Function{ID: "beta", Event: "b", Idempotency: "doc"}, Handler: echo},
	)
}

// Runs are found by event key, by the text of why they failed, by status
// and by a time range, alike on both databases.
func TestSearchRuns(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := searchApp(t, url)
		ctx := context.Background()
		var ids []string
		var created []time.Time
		// Reasons with what LIKE and a full-text query would read as
		// operators (wildcards, an escape, a quote), and one that an
		// unescaped pattern would match in their place.
		for i, table := range []string{"orders", "users", "", "orders", `q%b_c"d\e`, "qxbyc"} {
			s := send(t, e, "a", fmt.Sprintf("ev%d", i), map[string]string{"table": table})
			sum := wait(t, e, s.RunID)
			ids, created = append(ids, s.RunID), append(created, sum.CreatedAt)
		}
		b := send(t, e, "b", "ev-b", map[string]string{"doc": "d7"})
		wait(t, e, b.RunID)
		// Every search on SQLite both ways: with the index's candidates,
		// and with more candidates than it reads by key.
		for _, most := range []int{0, 1} {
			e.maxReasonCandidates = most
			searchCases(t, e, ids, created, b.RunID)
		}
		// A search by event key finds the run the event started and its
		// re-runs, and theirs, newest first.
		rerun := func(id string) string {
			re, err := e.Rerun(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			wait(t, e, re)
			return re
		}
		re := rerun(ids[0])
		re2 := rerun(re)
		got, err := e.Runs(ctx, RunFilter{EventKey: "ev0"})
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, s := range got {
			gotIDs = append(gotIDs, s.ID)
		}
		if want := []string{re2, re, ids[0]}; !slices.Equal(gotIDs, want) {
			t.Errorf("runs of event key ev0 after two re-runs: %v, want %v", gotIDs, want)
		}
		for _, tc := range []struct {
			f    RunFilter
			what string
		}{
			{RunFilter{Since: created[2], Until: created[1]}, "until"},
			{RunFilter{Reason: strings.Repeat("x", MaxReasonBytes+1)}, "reason"},
			{RunFilter{EventKey: "a\x00b"}, "event_key"},
		} {
			_, err := e.Runs(ctx, tc.f)
			if ie, ok := errors.AsType[*InvalidError](err); !ok || ie.What != tc.what {
				t.Errorf("filter %+v: %v, want an invalid %s", tc.f, err, tc.what)
			}
		}
	})
}

// searchCases are TestSearchRuns's searches and what each finds.
func searchCases(t *testing.T, e *Engine, ids []string, created []time.Time, beta string) {
	t.Helper()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		f    RunFilter
		want []string
	}{
		{"reason", RunFilter{Reason: "orders"}, []string{ids[3], ids[0]}},
		{"reason and function and status", RunFilter{Function: "alpha", Status: run.Failed, Reason: "users is"}, []string{ids[1]}},
		{"reason is matched as written", RunFilter{Reason: "Orders"}, nil},
		{"reason of a status with none", RunFilter{Status: run.Completed, Reason: "orders"}, nil},
		{"event ID", RunFilter{EventKey: "ev2"}, []string{ids[2]}},
		{"idempotency key", RunFilter{EventKey: "d7"}, []string{beta}},
		{"event key and reason", RunFilter{EventKey: "ev0", Reason: "orders"}, []string{ids[0]}},
		{"event key and another reason", RunFilter{EventKey: "ev0", Reason: "users"}, nil},
		{"until", RunFilter{Function: "alpha", Until: created[1]}, []string{ids[1], ids[0]}},
		{"since and until", RunFilter{Function: "alpha", Since: created[1], Until: created[2]}, []string{ids[2], ids[1]}},
		{"reason until", RunFilter{Reason: "orders", Until: created[2]}, []string{ids[0]}},
		{"reason with a wildcard", RunFilter{Reason: "b_c"}, []string{ids[4]}},
		{"reason with a percent sign", RunFilter{Reason: "q%b"}, []string{ids[4]}},
		{"reason with a quote and a backslash", RunFilter{Reason: `c"d\e`}, []string{ids[4]}},
		{"reason of one character", RunFilter{Reason: "%"}, []string{ids[4]}},
		{"reason of two characters", RunFilter{Reason: "xb"}, []string{ids[5]}},
		{"reason of one word and a wildcard's match", RunFilter{Reason: "qxbyc"}, []string{ids[5]}},
		{"reason that no run has", RunFilter{Reason: "no such table"}, nil},
	} {
		got, err := e.Runs(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var gotIDs []string
		for _, s := range got {
			gotIDs = append(gotIDs, s.ID)
		}
		if strings.Join(gotIDs, " ") != strings.Join(tc.want, " ") {
			t.Errorf("most candidates %d: %s: %v, want %v", e.maxReasonCandidates, tc.name, gotIDs, tc.want)
		}
	}
}

// A re-run from a chosen step reuses the steps before it and executes it
// and every step after it again.
func TestRerunFromChosenStep(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var count [3]atomic.Int32
		names := []string{"load", "ask", "save"}
		e := newEngine(t, url, &Function{Function: run.Function{ID: "three", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
			for i, n := range names {
				if _, err := Step(r, n, func(context.Context) (int32, error) { return count[i].Add(1), nil }); err != nil {
					return nil, err
				}
			}
			return "done", nil
		}})
		ctx := context.Background()
		counts := func() [3]int32 { return [3]int32{count[0].Load(), count[1].Load(), count[2].Load()} }
		s := send(t, e, "go", "r1", nil)
		wait(t, e, s.RunID)
		if _, err := e.Rerun(ctx, s.RunID); !errors.Is(err, ErrNotRerunnable) {
			t.Fatalf("re-run of a completed run without a step: %v, want ErrNotRerunnable", err)
		}
		id, err := e.RerunFrom(ctx, s.RunID, "2")
		if err != nil {
			t.Fatal(err)
		}
		if got := wait(t, e, id); got.Status != run.Completed || got.RerunOf != s.RunID {
			t.Fatalf("re-run %+v", got)
		}
		if got := counts(); got != [3]int32{1, 2, 2} {
			t.Fatalf("after a re-run from step 2 the steps ran %v times, want [1 2 2]", got)
		}
		id, err = e.RerunFrom(ctx, s.RunID, "save")
		if err != nil {
			t.Fatal(err)
		}
		wait(t, e, id)
		if got := counts(); got != [3]int32{1, 2, 3} {
			t.Fatalf("after a re-run from step save the steps ran %v times, want [1 2 3]", got)
		}
		for _, from := range []string{"0", "4", "-1", "nope"} {
			_, err := e.RerunFrom(ctx, s.RunID, from)
			if ie, ok := errors.AsType[*InvalidError](err); !ok || ie.What != "from_step" {
				t.Errorf("re-run from %q: %v, want an invalid from_step", from, err)
			}
		}
		if got := counts(); got != [3]int32{1, 2, 3} {
			t.Fatalf("a refused re-run ran steps: %v", got)
		}
	})
}

// A replay sends the run's event again under a new ID: a new run of the
// same function with the same data; a function keyed by the event's data
// starts nothing, and says so.
func TestReplay(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := searchApp(t, url)
		ctx := context.Background()
		s := send(t, e, "a", "orig", map[string]string{"table": "orders"})
		wait(t, e, s.RunID)
		rep, err := e.Replay(ctx, s.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if rep.RunID == s.RunID || rep.EventID == "orig" || rep.ReplayOf != s.RunID || rep.RunID != "alpha:"+rep.EventID {
			t.Fatalf("replay %+v of %s", rep, s.RunID)
		}
		got := wait(t, e, rep.RunID)
		if got.Status != run.Failed || !strings.Contains(got.Error, "table orders is missing") {
			t.Fatalf("replayed run %+v, want it failed as the first on the same data", got)
		}
		d := detail(t, e, rep.RunID)
		if d.Event == nil || d.Event.Name != "a" || d.Event.ID != rep.EventID || string(d.Event.Data) != `{"table":"orders"}` {
			t.Fatalf("replayed event %+v", d.Event)
		}
		b := send(t, e, "b", "eb", map[string]string{"doc": "d1"})
		wait(t, e, b.RunID)
		if _, err := e.Replay(ctx, b.RunID); !errors.Is(err, ErrNotReplayable) || !strings.Contains(err.Error(), "beta:key:d1") {
			t.Fatalf("replay of a keyed run: %v, want ErrNotReplayable naming the run", err)
		}
		if _, err := e.Replay(ctx, "alpha:nope"); !errors.Is(err, ErrRunNotFound) {
			t.Fatalf("replay of an unknown run: %v", err)
		}
	})
}

// A search by reason finds its candidates in the trigram index of the
// reasons on both databases (migration 020), rather than reading every
// failed run and its reason: on SQLite, the candidates' query searches the
// full-text table; on PostgreSQL it reads the reasons' pg_trgm index once
// sequential scans are priced out, as on a table too large to read whole
// (the planner weighs the index against a scan by the table's size). The
// search then reads the few candidates by key.
func TestSearchByReasonUsesTheIndex(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := searchApp(t, url)
		ctx := context.Background()
		q, args, ok := e.candidatesQuery("no such table", 10)
		if !ok {
			t.Fatal("no candidates' query for a text of three characters or more")
		}
		if e.h.SQLite != nil {
			if p := testenv.QueryPlan(t, e.h.SQLite, q, args...); !strings.Contains(p, "SCAN sluice_run_end_text VIRTUAL TABLE INDEX") {
				t.Errorf("plan of the candidates of a search by reason: %s; want a search of sluice_run_end_text", p)
			}
			if _, _, ok := e.candidatesQuery("no", 10); ok {
				t.Error("a candidates' query for a text of two characters, which the full-text index cannot find")
			}
			q, args, ok := e.reasonQuery([]string{"alpha", "beta"}, nil, []string{"alpha:ev1", "alpha:ev2"}, RunFilter{Status: run.Failed, Reason: "no such table"}, 50)
			if !ok {
				t.Fatal("no query for a failed run's reason")
			}
			if p := testenv.QueryPlan(t, e.h.SQLite, q, args...); !strings.Contains(p, "SEARCH w USING INDEX sqlite_autoindex_workflow_status_1 (workflow_uuid=?)") {
				t.Errorf("plan of a search by reason with candidates: %s; want the candidates read by key", p)
			}
			return
		}
		tx, err := e.h.Postgres.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a read, rolled back
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(lines, "\n"); !strings.Contains(p, "Bitmap Index Scan on sluice_run_ends_reason") {
			t.Errorf("plan of the candidates of a search by reason:\n%s\nwant a scan of sluice_run_ends_reason", p)
		}
	})
}

// A run that failed with no record of why in sluice_run_ends (it failed
// under a version that kept only timed-out and cancelled runs' records) is
// found by reason once the sweep of missed ends has recorded its error,
// which every launch runs; a sweep with nothing left to record records
// nothing.
func TestSearchFindsRunsThatEndedUnrecorded(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := searchApp(t, url)
		ctx := context.Background()
		s := send(t, e, "a", "ev-old", map[string]string{"table": "ledger"})
		wait(t, e, s.RunID)
		find := func() []run.Summary {
			runs, err := e.Runs(ctx, RunFilter{Reason: "table ledger is missing"})
			if err != nil {
				t.Fatal(err)
			}
			return runs
		}
		if runs := find(); len(runs) != 1 || runs[0].ID != s.RunID {
			t.Fatalf("runs with the reason: %+v, want %s", runs, s.RunID)
		}
		// As an earlier version left it: DBOS's record of the failure, none
		// of sluice's.
		if _, err := e.sys.Pool().Exec(ctx, e.sys.RenderSQL("DELETE FROM sluice_run_ends WHERE run_id = $1"), s.RunID); err != nil {
			t.Fatal(err)
		}
		if runs := find(); len(runs) != 0 {
			t.Fatalf("runs with the reason and no record: %+v, want none", runs)
		}
		if n, err := e.recordMissedEnds(ctx); err != nil || n != 1 {
			t.Fatalf("sweep of missed ends: %d recorded, %v; want 1", n, err)
		}
		if runs := find(); len(runs) != 1 || runs[0].ID != s.RunID || runs[0].Status != run.Failed {
			t.Fatalf("runs with the reason after the sweep: %+v, want %s, failed", runs, s.RunID)
		}
		if n, err := e.recordMissedEnds(ctx); err != nil || n != 0 {
			t.Fatalf("second sweep of missed ends: %d recorded, %v; want none", n, err)
		}
	})
}
