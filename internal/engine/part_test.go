package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// A run's parts execute at once, each with durable steps retried as the
// run's are, and the run gets each part's output; a part started again
// under the same ID is the one already started.
func TestPartsRunAtOnce(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const parts = 3
		var (
			arrived sync.WaitGroup
			tries   atomic.Int32
			calls   atomic.Int32
		)
		arrived.Add(parts)
		f := &Function{Function: run.Function{ID: "fan", Event: "fan/go"}}
		f.Handler = func(r *Run, ev Event) (any, error) {
			var started []*Part
			for i := range parts {
				p, err := StartPart(r, "square", fmt.Sprintf("p-%d", i), i+1)
				if err != nil {
					return nil, err
				}
				started = append(started, p)
			}
			sum := 0
			for _, p := range started {
				out, err := p.Wait()
				if err != nil {
					return nil, err
				}
				var n int
				if err := json.Unmarshal(out, &n); err != nil {
					return nil, err
				}
				sum += n
			}
			return sum, nil
		}
		e := openEngine(t, url)
		if err := e.RegisterPart(f, "square", func(r *Run, in json.RawMessage) (any, error) { return nil, nil }); err == nil ||
			!strings.Contains(err.Error(), "not registered") {
			t.Fatalf("part of an unregistered function: %v", err)
		}
		if err := e.Register(f); err != nil {
			t.Fatal(err)
		}
		square := func(r *Run, in json.RawMessage) (any, error) {
			var n int
			if err := json.Unmarshal(in, &n); err != nil {
				return nil, err
			}
			// Every part waits here until all have begun: the run would
			// hang if they went one after another.
			arrived.Done()
			arrived.Wait()
			return Step(r, "square", func(context.Context) (int, error) {
				calls.Add(1)
				if n == 2 && tries.Add(1) == 1 {
					return 0, errFlaky // retried, as a run's step is
				}
				return n * n, nil
			})
		}
		if err := e.RegisterPart(f, "square", square); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			h    PartHandler
			want string
		}{
			{"square", square, "already registered"},
			{"bad name!", square, "want 1-128 letters"},
			{"other", nil, "handler is nil"},
		} {
			if err := e.RegisterPart(f, tc.name, tc.h); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RegisterPart(%q): %v, want an error saying %q", tc.name, err, tc.want)
			}
		}
		if err := e.Launch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterPart(f, "late", square); err == nil || !strings.Contains(err.Error(), "already launched") {
			t.Errorf("RegisterPart after Launch: %v", err)
		}
		s := send(t, e, "fan/go", "one", map[string]any{})
		sum := wait(t, e, s.RunID)
		if sum.Status != run.Completed {
			t.Fatalf("run %+v", sum)
		}
		d := detail(t, e, s.RunID)
		if string(d.Output) != "14" {
			t.Fatalf("output %s, want 1+4+9 = 14", d.Output)
		}
		if n := calls.Load(); n != parts+1 {
			t.Fatalf("%d step attempts, want %d (one retried)", n, parts+1)
		}
		// DBOS records each part's start as a step of the run, with no
		// end: the run's page shows no negative time taken for it.
		if len(d.Steps) < parts {
			t.Errorf("%d steps of the run, want one per part at least", len(d.Steps))
		}
		for _, st := range d.Steps {
			if st.DurationMS < 0 || (!st.EndedAt.IsZero() && st.EndedAt.Before(st.StartedAt)) {
				t.Errorf("step %s took %v ms, from %s to %s", st.Name, st.DurationMS, st.StartedAt, st.EndedAt)
			}
		}
		// The runs listed are the function's, not its parts.
		runs, err := e.Runs(context.Background(), RunFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || runs[0].ID != s.RunID {
			t.Fatalf("runs %+v, want only %s", runs, s.RunID)
		}
	})
}

// PartsEnded gives the parts that ended, whichever ends first, not each in
// turn; its wait ends sooner when asked to; and a later run finds a part
// an earlier one started, by its ID, and gets its output.
func TestPartsEnded(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		release := make(chan struct{}) // the slow part ends once closed
		var asked atomic.Bool
		f := &Function{Function: run.Function{ID: "race", Event: "race/go"}}
		f.Handler = func(r *Run, ev Event) (any, error) {
			if ev.ID == "second" {
				// A part the first run handed on.
				var handed struct {
					Part string `json:"part"`
				}
				if err := json.Unmarshal(ev.Data, &handed); err != nil {
					return nil, err
				}
				p, err := PartOf(r, handed.Part)
				if err != nil {
					return nil, err
				}
				out, err := p.Wait()
				return string(out), err
			}
			slow, err := StartPart(r, "sleep", "slow", true)
			if err != nil {
				return nil, err
			}
			quick, err := StartPart(r, "sleep", "quick", false)
			if err != nil {
				return nil, err
			}
			ended, n, err := PartsEnded(r, "wait-0", []string{slow.ID(), quick.ID()}, func() int { return 7 }, nil)
			if err != nil {
				return nil, err
			}
			if len(ended) != 1 || ended[0] != quick.ID() || n != 7 {
				return nil, fmt.Errorf("ended %v, %d: want only %s, 7", ended, n, quick.ID())
			}
			if _, err := quick.Wait(); err != nil {
				return nil, err
			}
			// Nothing else ends until asked: the wait ends sooner.
			asked.Store(true)
			ended, _, err = PartsEnded(r, "wait-1", []string{slow.ID()}, func() int { return 0 }, asked.Load)
			if err != nil || len(ended) != 0 {
				return nil, fmt.Errorf("the sooner wait: %v, %v; want nothing ended", ended, err)
			}
			close(release)
			return slow.ID(), nil
		}
		e := openEngine(t, url)
		if err := e.Register(f); err != nil {
			t.Fatal(err)
		}
		err := e.RegisterPart(f, "sleep", func(r *Run, in json.RawMessage) (any, error) {
			if string(in) == "true" {
				<-release
			}
			return "done " + string(in), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Launch(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := send(t, e, "race/go", "first", map[string]any{})
		if sum := wait(t, e, s.RunID); sum.Status != run.Completed {
			t.Fatalf("first run %+v", sum)
		}
		var slowID string
		if err := json.Unmarshal(detail(t, e, s.RunID).Output, &slowID); err != nil {
			t.Fatal(err)
		}
		s2 := send(t, e, "race/go", "second", map[string]any{"part": slowID})
		if sum := wait(t, e, s2.RunID); sum.Status != run.Completed {
			t.Fatalf("second run %+v", sum)
		}
		if out := string(detail(t, e, s2.RunID).Output); !strings.Contains(out, "done true") {
			t.Fatalf("second run's output %s: want the slow part's", out)
		}
	})
}
