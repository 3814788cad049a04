package engine

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// Wait reads a completed run's row itself (readCompleted) rather than
// through DBOS's listing; what it answers must be what the listing gives,
// for an output, for no output and for a re-run.
func TestWaitAnswersAsTheRunsDetail(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var failOnce atomic.Bool
		failOnce.Store(true)
		fns := []*Function{
			{Function: run.Function{ID: "object", Event: "w/object"}, Handler: func(r *Run, ev Event) (any, error) {
				n, err := Step(r, "count", func(context.Context) (int, error) { return 3, nil })
				return map[string]any{"n": n, "text": "é \"quoted\""}, err
			}},
			{Function: run.Function{ID: "nothing", Event: "w/nothing"}, Handler: func(r *Run, ev Event) (any, error) {
				return nil, nil
			}},
			{Function: run.Function{ID: "again", Event: "w/again", Retries: 0}, Handler: func(r *Run, ev Event) (any, error) {
				return Step(r, "once", func(context.Context) (string, error) {
					if failOnce.Swap(false) {
						return "", NonRetriable(errors.New("first time"))
					}
					return "second time", nil
				})
			}},
		}
		e := newEngine(t, url, fns...)
		ids := []string{
			send(t, e, "w/object", "o1", map[string]int{}).RunID,
			send(t, e, "w/nothing", "n1", map[string]int{}).RunID,
		}
		first := send(t, e, "w/again", "a1", map[string]int{}).RunID
		if s := wait(t, e, first); s.Status != run.Failed {
			t.Fatalf("first run %s, want failed", s.Status)
		}
		rerun, err := e.Rerun(context.Background(), first)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rerun)
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			s, out, err := e.Wait(ctx, id)
			cancel()
			if err != nil {
				t.Fatalf("wait for %s: %v", id, err)
			}
			if s.Status != run.Completed {
				t.Fatalf("run %s: %s %s, want completed", id, s.Status, s.Error)
			}
			d := detail(t, e, id)
			if !reflect.DeepEqual(s, d.Summary) {
				t.Errorf("run %s: Wait says\n%+v\nthe detail\n%+v", id, s, d.Summary)
			}
			if string(out) != string(d.Output) {
				t.Errorf("run %s: Wait's output %q, the detail's %q", id, out, d.Output)
			}
		}
		if s := wait(t, e, rerun); s.RerunOf != first {
			t.Errorf("re-run's RerunOf %q, want %q", s.RerunOf, first)
		}
	})
}
