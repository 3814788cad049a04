package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// A run its deadline stops ends timed_out, naming the deadline, the step it
// was in, the attempt and that step's last failure; the list, the detail
// and Wait all say so, and a status filter tells it from a cancelled run.
// The deadline is generous: attempt 1 must fail and attempt 2 begin before
// it passes, even on a loaded machine.
func TestRunDeadlineEndsTimedOut(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		started := make(chan string, 4)
		fn := &Function{Function: run.Function{ID: "slow", Event: "slow/go", Retries: 5, Timeout: 4 * time.Second}, Handler: func(r *Run, ev Event) (any, error) {
			if _, err := Step(r, "quick", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return nil, err
			}
			return Step(r, "hang", func(ctx context.Context) (int, error) {
				started <- r.ID()
				if strings.Contains(string(ev.Data), "fail-first") && r.attempt == 1 {
					return 0, errors.New("upstream reset the connection")
				}
				<-ctx.Done() // a call that never answers
				return 0, ctx.Err()
			})
		}}
		hold := &Function{Function: run.Function{ID: "hold", Event: "hold/go"}, Handler: func(r *Run, ev Event) (any, error) {
			return Step(r, "wait", func(ctx context.Context) (int, error) {
				started <- r.ID()
				<-ctx.Done()
				return 0, ctx.Err()
			})
		}}
		e := newEngine(t, url, fn, hold)

		s := send(t, e, "slow/go", "e1", map[string]string{"x": "fail-first"})
		got := wait(t, e, s.RunID)
		if got.Status != run.TimedOut || got.Step != "hang" || !strings.Contains(got.Error, "run deadline of 4s passed in step hang, attempt 2") ||
			!strings.Contains(got.Error, "upstream reset the connection") {
			t.Fatalf("run ended %s in step %q: %q; want timed_out in step hang, attempt 2, naming the last failure", got.Status, got.Step, got.Error)
		}
		if got.StartedAt.IsZero() || got.EndedAt.Before(got.StartedAt.Add(4*time.Second)) {
			t.Fatalf("timed-out run started %v ended %v: want both, 4s apart at least", got.StartedAt, got.EndedAt)
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
		<-started
		<-started
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
