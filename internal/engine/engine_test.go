package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// newEngine opens an engine with fast polling and millisecond backoff,
// registers fns and launches it.
func newEngine(t *testing.T, url string, fns ...*Function) *Engine {
	t.Helper()
	e := openEngine(t, url)
	for _, f := range fns {
		if err := e.Register(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Launch(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// openEngine opens an engine with fast polling and millisecond backoff,
// not launched; it is shut down when the test ends.
func openEngine(t *testing.T, url string) *Engine {
	t.Helper()
	e, err := New(context.Background(), Config{
		Store:        testenv.OpenStore(t, url),
		PollInterval: 20 * time.Millisecond,
		RetryBase:    time.Millisecond,
		RetryMax:     5 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
	return e
}

func send(t *testing.T, e *Engine, name, id string, data any) run.Sent {
	t.Helper()
	b, _ := json.Marshal(data)
	s, err := e.Send(context.Background(), Event{Name: name, ID: id, Data: b})
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 {
		t.Fatalf("send %s: %d functions ran, want 1", name, len(s))
	}
	return s[0]
}

// budget bounds a test's wait for an event (see testenv.Budget).
const budget = testenv.Budget

// waitUntil polls cond until it holds, failing the test if it does not
// within budget; what says what is awaited.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.WaitUntil(t, 5*time.Millisecond, func() (bool, string) { return cond(), what })
}

func wait(t *testing.T, e *Engine, id string) run.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	s, _, err := e.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait for run %s: %v", id, err)
	}
	return s
}

func detail(t *testing.T, e *Engine, id string) *RunDetail {
	t.Helper()
	d, err := e.RunDetail(context.Background(), id, 1024)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var errFlaky = errors.New("connection reset by peer")

func TestStepsRetriesAndAttempts(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var fetches, flaky atomic.Int32
		fn := &Function{Function: run.Function{ID: "pipeline", Event: "doc/uploaded", Retries: 3}, Handler: func(r *Run, ev Event) (any, error) {
			text, err := Step(r, "fetch", func(context.Context) (string, error) {
				fetches.Add(1)
				return "hello", nil
			})
			if err != nil {
				return nil, err
			}
			n, err := Step(r, "flaky", func(context.Context) (int, error) {
				if flaky.Add(1) < 3 {
					return 0, errFlaky
				}
				return len(text), nil
			})
			return map[string]int{"n": n}, err
		}}
		e := newEngine(t, url, fn)
		s := send(t, e, "doc/uploaded", "ev1", map[string]string{"documentId": "d1"})
		if got := wait(t, e, s.RunID); got.Status != run.Completed {
			t.Fatalf("run status %s (%s), want completed", got.Status, got.Error)
		}
		d := detail(t, e, s.RunID)
		if len(d.Steps) != 2 {
			t.Fatalf("steps %+v, want fetch and flaky", d.Steps)
		}
		if st := d.Steps[1]; st.Name != "flaky" || st.Attempts != 3 || st.Status != "completed" || len(st.FailedAttempts) != 2 ||
			st.FailedAttempts[0].Class != "retry" || st.FailedAttempts[1].Attempt != 2 {
			t.Fatalf("flaky step %+v, want 3 attempts, 2 errors, completed", st)
		}
		if string(d.Steps[1].Output) != "5" || string(d.Output) != `{"n":5}` {
			t.Fatalf("outputs step=%s run=%s", d.Steps[1].Output, d.Output)
		}
		if fetches.Load() != 1 {
			t.Fatalf("fetch ran %d times, want 1", fetches.Load())
		}
	})
}

func TestRetryClasses(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var calls sync.Map
		count := func(k string) int32 {
			v, _ := calls.LoadOrStore(k, new(atomic.Int32))
			return v.(*atomic.Int32).Add(1)
		}
		mk := func(id string, body func(n int32) error) *Function {
			return &Function{Function: run.Function{ID: id, Event: id, Retries: 2}, Handler: func(r *Run, ev Event) (any, error) {
				return Step(r, "call", func(context.Context) (int32, error) {
					n := count(id)
					return n, body(n)
				})
			}}
		}
		e := newEngine(t, url,
			mk("fatal", func(int32) error { return NonRetriable(errors.New("400 bad request")) }),
			mk("exhausted", func(int32) error { return errFlaky }),
			mk("after", func(n int32) error {
				if n == 1 {
					return RetryAfter(errors.New("429 slow down"), 10*time.Millisecond)
				}
				return nil
			}),
		)
		for _, tc := range []struct {
			fn       string
			status   run.State
			attempts int
			errPart  string
		}{
			{"fatal", run.Failed, 1, "not retried"},
			{"exhausted", run.Failed, 3, "gave up after 3 attempts"},
			{"after", run.Completed, 2, ""},
		} {
			s := send(t, e, tc.fn, "x", nil)
			got := wait(t, e, s.RunID)
			d := detail(t, e, s.RunID)
			if got.Status != tc.status || d.Steps[0].Attempts != tc.attempts {
				t.Errorf("%s: status %s, attempts %d; want %s, %d (%+v)", tc.fn, got.Status, d.Steps[0].Attempts, tc.status, tc.attempts, d.Steps)
			}
			if tc.errPart != "" && !contains(got.Error, tc.errPart) {
				t.Errorf("%s: error %q does not say %q", tc.fn, got.Error, tc.errPart)
			}
		}
		// The wait a RetryAfter asked for is recorded on the step (DBOS keeps
		// its times in whole milliseconds: allow one lost to truncation).
		d := detail(t, e, "after:x")
		if d.Steps[0].WaitedMS < 9 {
			t.Errorf("after: waited %.1fms, want at least the 10ms asked", d.Steps[0].WaitedMS)
		}
	})
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

var _ = fmt.Sprint
