package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// A run its deadline stops ends timed_out, naming the deadline, the step it
// was in, the attempt and that step's last failure; the list, the detail
// and Wait all say so, and a status filter tells it from a cancelled run.
// The deadline passes once attempt 2 is in the step (see passDeadline), so
// how long attempt 1 and the retry take does not matter.
func TestRunDeadlineEndsTimedOut(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const timeout = time.Hour // passDeadline ends it
		over := make(chan struct{})
		never := func(ctx context.Context) (int, error) {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-over:
				return 0, errors.New("the test is over")
			}
		}
		retried := make(chan struct{}, 1)
		fn := &Function{Function: run.Function{ID: "slow", Event: "slow/go", Retries: 5, Timeout: timeout}, Handler: func(r *Run, ev Event) (any, error) {
			if _, err := Step(r, "quick", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			return Step(r, "hang", func(ctx context.Context) (int, error) {
				if strings.Contains(string(ev.Data), "fail-first") && r.attempt == 1 {
					return 0, errors.New("upstream reset the connection")
				}
				select {
				case retried <- struct{}{}:
				default: // a re-run's attempt: no one waits for it
				}
				return never(ctx) // a call that never answers
			})
		}}
		holding := make(chan struct{}, 1)
		hold := &Function{Function: run.Function{ID: "hold", Event: "hold/go"}, Handler: func(r *Run, ev Event) (any, error) {
			return Step(r, "wait", func(ctx context.Context) (int, error) {
				holding <- struct{}{}
				return never(ctx)
			})
		}}
		e := newEngine(t, url, fn, hold)
		// A cancel does not interrupt a step (DBOS stops a run at its next
		// one): the steps still waiting return when the test ends, rather
		// than holding the engine's stop for its grace.
		t.Cleanup(func() { close(over) })

		s := send(t, e, "slow/go", "e1", map[string]string{"x": "fail-first"})
		<-retried
		passDeadline(t, e, s.RunID)
		got := wait(t, e, s.RunID)
		if got.Status != run.TimedOut || got.Step != "hang" || !strings.Contains(got.Error, "run deadline of 1h0m0s passed in step hang, attempt 2") ||
			!strings.Contains(got.Error, "upstream reset the connection") {
			t.Fatalf("run ended %s in step %q: %q; want timed_out in step hang, attempt 2, naming the last failure", got.Status, got.Step, got.Error)
		}
		if got.StartedAt.IsZero() || got.EndedAt.Before(got.StartedAt.Add(timeout)) {
			t.Fatalf("timed-out run started %v ended %v: want both, %s apart at least", got.StartedAt, got.EndedAt, timeout)
		}
		d := detail(t, e, s.RunID)
		if d.Status != run.TimedOut || d.Error != got.Error || d.Step != "hang" {
			t.Fatalf("detail %s %q %q, want what Wait said", d.Status, d.Step, d.Error)
		}
		if i := slices.IndexFunc(d.Steps, func(s StepView) bool { return s.Name == "hang" }); i < 0 || len(d.Steps[i].FailedAttempts) == 0 ||
			d.Steps[i].FailedAttempts[0].Class != "retry" || d.Steps[i].FailedAttempts[0].Error != "upstream reset the connection" {
			t.Fatalf("steps %+v: want the hang step's failed first attempt classed retry", d.Steps)
		}

		// A cancel on request says so and names the step it stopped.
		c := send(t, e, "hold/go", "h1", map[string]string{})
		<-holding
		if err := e.Cancel(context.Background(), c.RunID); err != nil {
			t.Fatal(err)
		}
		cancelled := wait(t, e, c.RunID)
		if cancelled.Status != run.Cancelled || !strings.Contains(cancelled.Error, "cancelled on request") {
			t.Fatalf("cancelled run: %s %q", cancelled.Status, cancelled.Error)
		}
		if err := e.Cancel(context.Background(), c.RunID); !errors.Is(err, ErrEnded) {
			t.Fatalf("cancel of an ended run: %v, want ErrEnded", err)
		}

		for status, want := range map[run.State]string{run.TimedOut: s.RunID, run.Cancelled: c.RunID} {
			runs, err := e.Runs(context.Background(), RunFilter{Status: status})
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != 1 || runs[0].ID != want || runs[0].Error == "" {
				t.Fatalf("runs with status %s: %+v, want only %s with its reason", status, runs, want)
			}
		}
		if id, err := e.Rerun(context.Background(), s.RunID); err != nil || id == "" {
			t.Fatalf("re-run of a timed-out run: %q, %v", id, err)
		}
	})
}

// A cancel on request does not end a run's context: DBOS takes the run
// from its execution, which learns of it when DBOS refuses the record of
// the step it was in (here the step ends after the cancel, as an LLM call
// answers) or of the next step it begins. Either way the handler returns
// DBOS's refusal, and the run must end cancelled on request in that step,
// counted cancelled; a run that fails with no one cancelling it is still
// failed.
func TestCancelledRunEndsCancelledNotFailed(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		// Each run waits at its gate, in the step "call" or between the
		// steps "first" and "second", until the test opens it.
		gates := map[string]chan struct{}{"in-step": make(chan struct{}), "between-steps": make(chan struct{})}
		waiting := make(chan string, len(gates))
		fn := &Function{Function: run.Function{ID: "hold", Event: "hold/go"}, Handler: func(r *Run, ev Event) (any, error) {
			switch ev.ID {
			case "in-step":
				return Step(r, "call", func(context.Context) (string, error) {
					waiting <- ev.ID
					<-gates[ev.ID]
					return "the answer", nil
				})
			case "between-steps":
				if _, err := Step(r, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
					return nil, err
				}
				waiting <- ev.ID
				<-gates[ev.ID]
				return Step(r, "second", func(context.Context) (int, error) { return 2, nil })
			}
			return nil, errors.New("the document is empty")
		}}
		m := metrics.New()
		e := launch(context.Background(), t, url, Config{Metrics: m}, fn)
		ctx := context.Background()

		for _, tc := range []struct{ id, step string }{{"in-step", "call"}, {"between-steps", "second"}} {
			s := send(t, e, "hold/go", tc.id, nil)
			if got := <-waiting; got != tc.id {
				t.Fatalf("run %s waits, want %s", got, tc.id)
			}
			if err := e.Cancel(ctx, s.RunID); err != nil {
				t.Fatal(err)
			}
			if got := wait(t, e, s.RunID); got.Status != run.Cancelled {
				t.Fatalf("run %s after its cancel: %s %q", tc.id, got.Status, got.Error)
			}
			before := finishedOf(t, m, "hold", "")
			close(gates[tc.id])
			waitUntil(t, "the cancelled run's handler has returned", func() bool { return finishedOf(t, m, "hold", "") > before })
			got := wait(t, e, s.RunID)
			if want := "cancelled on request in step " + tc.step + ", attempt 1"; got.Status != run.Cancelled || got.Error != want || got.Step != tc.step {
				t.Errorf("run %s ended %s in step %q: %q; want cancelled in step %s: %q", tc.id, got.Status, got.Step, got.Error, tc.step, want)
			}
		}
		f := send(t, e, "hold/go", "fails", nil)
		if got := wait(t, e, f.RunID); got.Status != run.Failed {
			t.Fatalf("run that fails: %s %q", got.Status, got.Error)
		}
		waitUntil(t, "the failed run is counted", func() bool { return finishedOf(t, m, "hold", "") == 3 })

		for _, tc := range []struct {
			f    RunFilter
			want int
		}{
			{RunFilter{Status: run.Cancelled, Reason: "cancelled on request in step"}, 2},
			{RunFilter{Reason: "no longer owned"}, 0},
			{RunFilter{Status: run.Failed, Reason: "the document is empty"}, 1},
		} {
			if runs, err := e.Runs(ctx, tc.f); err != nil || len(runs) != tc.want {
				t.Errorf("runs with %+v: %+v, %v; want %d", tc.f, runs, err, tc.want)
			}
		}
		for status, want := range map[run.State]float64{run.Cancelled: 2, run.Failed: 1} {
			if got := finishedOf(t, m, "hold", status); got != want {
				t.Errorf("sluice_runs_finished_total{status=%q} = %v, want %v", status, got, want)
			}
		}
	})
}

// finishedOf is how many runs of function m counts as finished in state
// ("" for every state).
func finishedOf(t *testing.T, m *metrics.Set, function string, state run.State) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() != "sluice_runs_finished_total" {
			continue
		}
		for _, c := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range c.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["function"] == function && (state == "" || labels["status"] == string(state)) {
				n += c.GetCounter().GetValue()
			}
		}
	}
	return n
}

// passDeadline makes run id's deadline pass now: it moves the run's start
// and deadline back in DBOS's record by what remains of its timeout, as if
// that much time had gone by. DBOS's timeouts monitor then stops it as it
// stops every run past its deadline, whichever process runs it.
func passDeadline(t *testing.T, e *Engine, id string) {
	t.Helper()
	now := e.sys.Dialect().NowMsSQL()
	q := e.sys.RenderSQL(`UPDATE %sworkflow_status
		SET started_at_epoch_ms = started_at_epoch_ms - (workflow_deadline_epoch_ms - `+now+`),
		    workflow_deadline_epoch_ms = `+now+`
		WHERE workflow_uuid = $1 AND workflow_deadline_epoch_ms IS NOT NULL`, e.sys.Dialect().SchemaPrefix(e.sys.Schema()))
	res, err := e.sys.Pool().Exec(context.Background(), q, id)
	if err != nil {
		t.Fatalf("pass the deadline of run %s: %v", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("pass the deadline of run %s: %d rows, %v; want its one row, with a deadline", id, n, err)
	}
}
