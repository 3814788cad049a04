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
