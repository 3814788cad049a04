package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// stepKey names one step of one run.
type stepKey struct{ run, step string }

// executions records every execution of every step body: how many are in
// progress now, how many started and how many returned, and every moment
// two executions of one step of one run were in progress at once.
type executions struct {
	mu       sync.Mutex
	running  map[stepKey]int
	started  map[stepKey]int
	finished map[stepKey]int
	overlaps []string
	saved    chan struct{} // one send per finished last step, never blocking
}

func newExecutions(runs int) *executions {
	return &executions{
		running:  map[stepKey]int{},
		started:  map[stepKey]int{},
		finished: map[stepKey]int{},
		saved:    make(chan struct{}, 4*runs),
	}
}

// body is a step body that takes a few milliseconds of work, as a call to a
// provider does, and records its execution.
func (x *executions) body(run, step string, last bool) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		k := stepKey{run, step}
		x.mu.Lock()
		x.running[k]++
		x.started[k]++
		if n := x.running[k]; n > 1 {
			x.overlaps = append(x.overlaps, fmt.Sprintf("%s/%s: %d executions at once", run, step, n))
		}
		x.mu.Unlock()
		defer func() {
			x.mu.Lock()
			x.running[k]--
			x.mu.Unlock()
		}()
		work := time.NewTimer(time.Duration(1+rand.IntN(8)) * time.Millisecond) // #nosec G404 -- spreads work, no secrecy
		defer work.Stop()
		select {
		case <-work.C:
		case <-ctx.Done():
			return 0, ctx.Err() // the engine stops: the step runs again after the restart
		}
		x.mu.Lock()
		x.finished[k]++
		x.mu.Unlock()
		if last {
			select {
			case x.saved <- struct{}{}:
			default:
			}
		}
		return 1, nil
	}
}

// spin keeps every processor busy until the test ends, so that runs, the
// queue poller and the database contend for CPU as on a loaded machine.
func spin(t *testing.T) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 1
			for !stop.Load() {
				for i := range 10_000 {
					x = x*31 + i
				}
			}
			_ = x
		}()
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
}

// Many runs of a function of three steps, twenty at a time, on a busy
// machine: no step of a run ever executes twice at once, whatever happens
// to the engine meanwhile, and every run completes.
func TestLoadNoStepRunsTwiceAtOnce(t *testing.T) {
	t.Parallel()
	spin(t)
	const runs, concurrency = 200, 20
	for _, tc := range []struct {
		name string
		// restarts: the engine is shut down and a new one launched on the
		// same database, with the same executor ID, this many times while
		// runs are in flight. A step cut off by a shutdown runs again, so
		// only overlaps are counted then, not repeats.
		restarts int
		// rival: while the engine has runs in flight, a second engine with
		// the same executor ID is launched on the same database, as a
		// second process started with the same settings would be. It must
		// be refused: DBOS's recovery at its launch would hand the first
		// engine's runs in flight to a second execution.
		rival bool
		heavy bool
	}{
		{name: "steady"},
		{name: "second engine of the same executor refused", rival: true},
		{name: "restarts", restarts: 3, heavy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.heavy && testing.Short() {
				t.Skip("restarts under load take a while: skipped in -short")
			}
			testenv.Databases(t, func(t *testing.T, url string) {
				x := newExecutions(runs)
				fn := func() *Function {
					return &Function{Function: run.Function{ID: "load", Event: "load/go", Concurrency: []run.Concurrency{{Limit: concurrency}}}, Handler: func(r *Run, ev Event) (any, error) {
						for i, s := range []string{"fetch", "call", "save"} {
							if _, err := Step(r, s, x.body(r.ID(), s, i == 2)); err != nil {
								return nil, err
							}
						}
						return "ok", nil
					}}
				}
				cfg := Config{
					PollInterval: 20 * time.Millisecond,
					RetryBase:    time.Millisecond,
					RetryMax:     5 * time.Millisecond,
					Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
				}
				launch := func() (*Engine, error) {
					cfg.Store = testenv.OpenStore(t, url) // DBOS closes it when the engine stops
					e, err := New(context.Background(), cfg)
					if err != nil {
						return nil, err
					}
					if err := e.Register(fn()); err != nil {
						_ = e.Shutdown(5 * time.Second)
						return nil, err
					}
					if err := e.Launch(context.Background()); err != nil {
						_ = e.Shutdown(5 * time.Second)
						return nil, err
					}
					t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
					return e, nil
				}
				e, err := launch()
				if err != nil {
					t.Fatal(err)
				}
				ids := make([]string, 0, runs)
				for i := range runs {
					ids = append(ids, send(t, e, "load/go", fmt.Sprintf("ev%03d", i), nil).RunID)
				}
				savedAt := func(n int) {
					t.Helper()
					timeout := time.After(2 * time.Minute)
					for range n {
						select {
						case <-x.saved:
						case <-timeout:
							t.Fatalf("fewer than %d runs saved in 2 minutes", n)
						}
					}
				}
				if tc.rival {
					savedAt(runs / 4) // the queue is busy: runs are in flight
					if rival, err := launch(); err == nil {
						_ = rival.Shutdown(5 * time.Second)
						t.Errorf("a second engine with executor ID %q launched on the database of a running one", "local")
					} else {
						t.Logf("second engine refused: %v", err)
					}
				}
				for i := range tc.restarts {
					savedAt(runs / (tc.restarts + 1))
					if err := e.Shutdown(budget); err != nil {
						t.Fatalf("shutdown %d: %v", i+1, err)
					}
					if e, err = launch(); err != nil {
						t.Fatalf("launch after shutdown %d: %v", i+1, err)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				for _, id := range ids {
					s, _, err := e.Wait(ctx, id)
					if err != nil {
						t.Fatalf("wait for run %s: %v", id, err)
					}
					if s.Status != run.Completed {
						t.Errorf("run %s is %s (%s), want completed", id, s.Status, s.Error)
					}
				}

				x.mu.Lock()
				defer x.mu.Unlock()
				for _, o := range x.overlaps {
					t.Error(o)
				}
				repeats := 0
				for _, id := range ids {
					for _, s := range []string{"fetch", "call", "save"} {
						k := stepKey{id, s}
						if x.finished[k] < 1 {
							t.Errorf("%s/%s never finished", id, s)
						}
						if n := x.started[k]; n > 1 {
							repeats++
							if tc.restarts == 0 {
								t.Errorf("%s/%s ran %d times without a restart, want once", id, s, n)
							}
						}
					}
				}
				t.Logf("%d runs, %d restarts: %d steps ran more than once", runs, tc.restarts, repeats)
			})
		})
	}
}
