package engine

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// openWith opens an engine on url with cfg's StopGrace and functions fns,
// launched; the test shuts it down unless it did.
func openWith(t *testing.T, url string, grace time.Duration, fns ...*Function) *Engine {
	t.Helper()
	return launch(context.Background(), t, url, Config{StopGrace: grace}, fns...)
}

// openOn is openWith with ctx given to New and Launch, as a command gives
// the context its signals end.
func openOn(ctx context.Context, t *testing.T, url string, grace time.Duration, fns ...*Function) *Engine {
	t.Helper()
	return launch(ctx, t, url, Config{StopGrace: grace}, fns...)
}

// launch opens an engine on url with cfg — its store, fast polls and
// millisecond backoff, a silent log filled in — registers fns and launches
// it with ctx; the test shuts it down unless it did.
func launch(ctx context.Context, t *testing.T, url string, cfg Config, fns ...*Function) *Engine {
	t.Helper()
	cfg.Store = testenv.OpenStore(t, url)
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RetryBase, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		if err := e.Register(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
	return e
}

// A graceful stop is a pause: the engine stops taking work, the step in
// flight finishes and is recorded, no step begins after it, a queued run
// stays queued, and nothing is cancelled; the next engine on the database
// resumes both runs without calling the finished step again. The context
// the engine was started with ends first, as SIGTERM ends a command's: that
// must not cancel the runs.
func TestStopIsAPause(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var called, after atomic.Int32
		entered := make(chan struct{}, 1)
		release := make(chan struct{})
		var hold atomic.Bool
		hold.Store(true)
		mk := func() *Function {
			return &Function{Function: run.Function{ID: "pause", Event: "go", Concurrency: []run.Concurrency{{Limit: 1}}},
				Handler: func(r *Run, ev Event) (any, error) {
					if _, err := Step(r, "call", func(ctx context.Context) (int, error) {
						n := called.Add(1)
						if hold.Load() {
							entered <- struct{}{}
							<-release // the call in flight: it finishes during the stop
						}
						return int(n), nil
					}); err != nil {
						return nil, err
					}
					return Step(r, "after", func(context.Context) (int, error) { return int(after.Add(1)), nil })
				}}
		}
		sigctx, signal := context.WithCancel(context.Background())
		e1 := openOn(sigctx, t, url, time.Hour, mk())
		first := send(t, e1, "go", "a", nil)
		<-entered
		second := send(t, e1, "go", "b", nil) // queued behind the first: concurrency 1
		signal()
		stopped := make(chan error, 1)
		go func() { stopped <- e1.Shutdown(2 * time.Hour) }()
		<-e1.Draining()
		if err := e1.Ready(); err == nil {
			t.Error("a stopping engine says it is ready")
		}
		hold.Store(false)
		close(release)
		// The stop returns once the call in flight finished, long before
		// the hour of grace: no step began after it.
		if err := <-stopped; err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		if called.Load() != 1 || after.Load() != 0 {
			t.Fatalf("during the stop: the call ran %d times (want 1), the step after it %d (want 0)", called.Load(), after.Load())
		}
		e2 := openWith(t, url, time.Hour, mk())
		for _, id := range []string{first.RunID, second.RunID} {
			if got := wait(t, e2, id); got.Status != run.Completed {
				t.Fatalf("run %s after the restart: %s (%s), want completed", id, got.Status, got.Error)
			}
		}
		if called.Load() != 2 || after.Load() != 2 {
			t.Fatalf("the call ran %d times for 2 runs (want 2: the finished one is not called again), the step after it %d (want 2)", called.Load(), after.Load())
		}
		d := detail(t, e2, first.RunID)
		if len(d.Steps) != 2 || d.Steps[0].Attempts != 1 {
			t.Fatalf("first run's steps %+v, want call (1 attempt) then after", d.Steps)
		}
	})
}

// A step still running at the end of the grace is cut, unrecorded, and runs
// again when its run resumes; the run is never cancelled.
func TestStopGraceCutsAStep(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var calls atomic.Int32
		entered := make(chan struct{}, 1)
		var hold atomic.Bool
		hold.Store(true)
		fn := func() *Function {
			return &Function{Function: run.Function{ID: "cut", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
				return Step(r, "call", func(ctx context.Context) (int, error) {
					calls.Add(1)
					if hold.Load() {
						entered <- struct{}{}
						<-ctx.Done() // ends only when the stop cuts it
						return 0, ctx.Err()
					}
					return 1, nil
				})
			}}
		}
		e1 := openWith(t, url, 50*time.Millisecond, fn())
		s := send(t, e1, "go", "a", nil)
		<-entered
		if err := e1.Shutdown(budget); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		hold.Store(false)
		e2 := openWith(t, url, time.Hour, fn())
		got := wait(t, e2, s.RunID)
		if got.Status != run.Completed || calls.Load() != 2 {
			t.Fatalf("run %s (%s) after %d calls; want completed after 2 (the cut one and its resume)", got.Status, got.Error, calls.Load())
		}
		if d := detail(t, e2, s.RunID); d.Steps[0].Attempts != 1 || len(d.Steps[0].FailedAttempts) != 0 {
			t.Fatalf("the cut call was recorded as an attempt: %+v", d.Steps[0])
		}
	})
}

// A call waiting for quota is not in flight: a stop ends its wait at once
// (a grace of an hour does not hold the stop), and the run resumes later.
func TestStopEndsAWaitForQuota(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		gov, err := governor.New(governor.Config{Key: "k", Limits: governor.Limits{governor.RPM: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gov.Reserve(time.Now(), "other", governor.Cost{Requests: 1}); err != nil {
			t.Fatal(err) // the minute's one request is taken
		}
		client, err := llm.NewClient(llm.Config{BaseURL: "http://127.0.0.1:9/v1", Profile: llm.Groq})
		if err != nil {
			t.Fatal(err)
		}
		est, err := llm.NewEstimator(llm.EstimatorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan struct{})
		var attempts atomic.Int32
		p := &Provider{Name: "k", Client: client, Governor: gov, Estimator: est, MaxInlineWait: time.Hour}
		fn := &Function{Function: run.Function{ID: "quota", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
			if attempts.Add(1) == 1 {
				close(waiting)
			}
			return LLM(r, "ask", p, &llm.ChatRequest{Model: "m", MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: "hi"}}}, llm.Timeouts{})
		}}
		e := openWith(t, url, time.Hour, fn)
		s := send(t, e, "go", "a", nil)
		<-waiting
		waitUntil(t, "the call waits in the governor's line", func() bool { return waitingIn(gov, "quota") > 0 })
		if err := e.Shutdown(2 * time.Hour); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		if n := waitingIn(gov, "quota"); n != 0 {
			t.Fatalf("%d calls still wait in the governor's line after the stop", n)
		}
		_ = s
	})
}

func waitingIn(g *governor.Governor, flow string) int {
	for _, f := range g.Stats(time.Now()).Flows {
		if f.Name == flow {
			return f.Waiting
		}
	}
	return 0
}

// A stop asked for while Launch still holds the engine — as it does while
// DBOS resumes the runs a crash left — lets no step begin from that
// moment, though Launch has not returned: a resumed run waits, pending, for
// the next start, instead of sending its call as the process stops.
func TestStopDuringLaunchBeginsNoStep(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var began atomic.Int32
		arrived := make(chan struct{}, 1)
		release := make(chan struct{})
		fn := &Function{Function: run.Function{ID: "hold", Event: "go"},
			Handler: func(r *Run, ev Event) (any, error) {
				select {
				case arrived <- struct{}{}:
				default:
				}
				<-release
				return Step(r, "call", func(context.Context) (int, error) { return int(began.Add(1)), nil })
			}}
		e := openWith(t, url, time.Hour, fn)
		s := send(t, e, "go", "a", nil)
		<-arrived
		e.mu.Lock() // as Launch holds it
		stopped := make(chan error, 1)
		go func() { stopped <- e.Shutdown(time.Minute) }()
		select {
		case <-e.Draining():
		case <-time.After(budget):
			e.mu.Unlock()
			t.Fatal("a stop asked for while Launch held the engine let steps begin until Launch returned")
		}
		close(release) // the run goes on to its step, which must not begin
		e.mu.Unlock()
		if err := <-stopped; err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		if n := began.Load(); n != 0 {
			t.Fatalf("a step began %d times after the stop was asked for, want 0", n)
		}
		e2 := openWith(t, url, time.Hour, fn)
		if got := wait(t, e2, s.RunID); got.Status != run.Completed || began.Load() != 1 {
			t.Fatalf("after the restart: %s (%s), the step ran %d times; want completed, once", got.Status, got.Error, began.Load())
		}
	})
}
