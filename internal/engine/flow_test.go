package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

func echo(r *Run, ev Event) (any, error) {
	return Step(r, "echo", func(context.Context) (string, error) { return string(ev.Data), nil })
}

func TestIdempotencyAndDedup(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := newEngine(t, url,
			&Function{Function: run.Function{ID: "keyed", Event: "doc", Idempotency: "event.data.documentId"}, Handler: echo},
		)
		a := send(t, e, "doc", "e1", map[string]string{"documentId": "d1"})
		b := send(t, e, "doc", "e2", map[string]string{"documentId": "d1"}) // same key, new event
		c := send(t, e, "doc", "e3", map[string]string{"documentId": "d2"})
		if a.Status != "queued" || b.Status != "existing" || b.RunID != a.RunID || c.RunID == a.RunID {
			t.Fatalf("idempotency: %+v %+v %+v", a, b, c)
		}
		wait(t, e, a.RunID)
		wait(t, e, c.RunID)
		runs, err := e.Runs(context.Background(), RunFilter{Function: "keyed"})
		if err != nil || len(runs) != 2 {
			t.Fatalf("runs %v %+v, want 2", err, runs)
		}
	})
}

func TestEventIDDeduplicates(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := newEngine(t, url, &Function{Function: run.Function{ID: "f", Event: "ping"}, Handler: echo})
		a := send(t, e, "ping", "same", nil)
		b := send(t, e, "ping", "same", nil)
		if a.RunID != b.RunID || b.Status != "existing" {
			t.Fatalf("resent event: %+v then %+v", a, b)
		}
		if _, err := e.Send(context.Background(), Event{Name: "nobody"}); !errors.Is(err, ErrNoFunction) {
			t.Fatalf("unknown event: %v, want ErrNoFunction", err)
		}
	})
}

func TestRateLimitDropsExcess(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := newEngine(t, url, &Function{Function: run.Function{ID: "rl", Event: "hit", RateLimit: &run.RateLimit{Limit: 2, Period: time.Hour, Key: "user"}}, Handler: echo})
		var got []string
		for i, u := range []string{"a", "a", "a", "b"} {
			got = append(got, send(t, e, "hit", string(rune('0'+i)), map[string]string{"user": u}).Status)
		}
		want := []string{"queued", "queued", "dropped", "queued"}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("statuses %v, want %v", got, want)
			}
		}
		d, err := e.Dropped(context.Background(), "rl", 10)
		if err != nil || len(d) != 1 || d[0].EventID != "2" || d[0].Key != "a" {
			t.Fatalf("dropped %v %+v", err, d)
		}
	})
}

// A concurrency limit is reached and never passed: each run's step waits
// until the limit's worth of runs are in it, so as many run at once as the
// limit allows while the others are queued, wave after wave.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const limit, waves = 2, 3
		var active, most, entered atomic.Int32
		in := make(chan struct{}, limit*waves)
		gates := make([]chan struct{}, waves) // gates[w] lets the w-th limit's worth of runs finish
		for w := range gates {
			gates[w] = make(chan struct{})
		}
		fn := &Function{Function: run.Function{ID: "two-at-a-time", Event: "go", Concurrency: []run.Concurrency{{Limit: limit}}}, Handler: func(r *Run, ev Event) (any, error) {
			return Step(r, "work", func(context.Context) (int32, error) {
				n := active.Add(1)
				defer active.Add(-1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				wave := min(int(entered.Add(1)-1)/limit, waves-1) // a step run twice (a bug) waits at the last gate
				in <- struct{}{}
				<-gates[wave]
				return n, nil
			})
		}}
		e := newEngine(t, url, fn)
		opened := 0
		t.Cleanup(func() { // after a failure, the runs end before the engine stops
			for _, g := range gates[opened:] {
				close(g)
			}
		})
		var ids []string
		for i := range limit * waves {
			ids = append(ids, send(t, e, "go", fmt.Sprint(i), nil).RunID)
		}
		for w := range waves {
			for i := range limit {
				select {
				case <-in:
				case <-time.After(budget):
					t.Fatalf("wave %d: %d runs started, want the limit of %d at once", w, i, limit)
				}
			}
			// The wave before has finished: the runs in are this wave's,
			// and DBOS started no other.
			if n := active.Load(); n != limit {
				t.Fatalf("wave %d: %d runs at once, want the limit of %d", w, n, limit)
			}
			running, err := e.Runs(context.Background(), RunFilter{Function: fn.ID, Status: run.Running})
			if err != nil {
				t.Fatal(err)
			}
			if len(running) != limit {
				t.Fatalf("wave %d: %d runs running, want the limit of %d", w, len(running), limit)
			}
			close(gates[w])
			opened++
		}
		for _, id := range ids {
			if s := wait(t, e, id); s.Status != run.Completed {
				t.Fatalf("run %s: %s", id, s.Status)
			}
		}
		if n := most.Load(); n != limit {
			t.Fatalf("at most %d runs at once, want the limit of %d", n, limit)
		}
	})
}

func TestThrottleQueuesExcess(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := newEngine(t, url, &Function{Function: run.Function{ID: "th", Event: "go", Throttle: &run.Throttle{Limit: 1, Period: time.Hour}}, Handler: echo})
		a := send(t, e, "go", "a", nil)
		if s := wait(t, e, a.RunID); s.Status != run.Completed {
			t.Fatalf("first run %s", s.Status)
		}
		b := send(t, e, "go", "b", nil)
		// The throttle allows one start per hour: the second run is queued, not
		// dropped, and stays queued; cancelling it works.
		d := detail(t, e, b.RunID)
		if d.Status != run.Queued {
			t.Fatalf("second run %s, want queued", d.Status)
		}
		if err := e.Cancel(context.Background(), b.RunID); err != nil {
			t.Fatal(err)
		}
		if d := detail(t, e, b.RunID); d.Status != run.Cancelled {
			t.Fatalf("after cancel: %s", d.Status)
		}
	})
}

func TestPriorityOrdersQueuedRuns(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		gate := make(chan struct{})
		entered := make(chan string, 10)
		var mu sync.Mutex
		var order []string
		fn := &Function{Function: run.Function{ID: "prio", Event: "go", Priority: "p", Concurrency: []run.Concurrency{{Limit: 1}}}, Handler: func(r *Run, ev Event) (any, error) {
			return Step(r, "work", func(context.Context) (bool, error) {
				mu.Lock()
				order = append(order, r.Event().ID)
				mu.Unlock()
				entered <- r.Event().ID
				if r.Event().ID == "blocker" {
					<-gate
				}
				return true, nil
			})
		}}
		e := newEngine(t, url, fn)
		send(t, e, "go", "blocker", map[string]int{"p": 0})
		<-entered
		send(t, e, "go", "low", map[string]int{"p": -5})
		send(t, e, "go", "normal", map[string]int{})
		last := send(t, e, "go", "high", map[string]int{"p": 10})
		close(gate)
		wait(t, e, last.RunID)
		for range 3 {
			<-entered
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"blocker", "high", "normal", "low"}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("start order %v, want %v", order, want)
			}
		}
	})
}

func TestTimeoutCancelsRun(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := newEngine(t, url, &Function{Function: run.Function{ID: "slow", Event: "go", Timeout: 300 * time.Millisecond}, Handler: func(r *Run, ev Event) (any, error) {
			return nil, Sleep(r, time.Hour)
		}})
		s := send(t, e, "go", "a", nil)
		if got := wait(t, e, s.RunID); got.Status != run.TimedOut || !strings.HasPrefix(got.Error, "run deadline of 300ms passed") {
			t.Fatalf("status %s (%s), want timed_out by the deadline", got.Status, got.Error)
		}
	})
}

func TestCronTrigger(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ran := make(chan string, 1)
		e := newEngine(t, url, &Function{Function: run.Function{ID: "nightly", Cron: "0 3 * * *"}, Handler: func(r *Run, ev Event) (any, error) {
			ran <- ev.Name
			return nil, nil
		}})
		// Fire the schedule now instead of waiting for 03:00.
		if _, err := dbos.TriggerSchedule[string](e.dctx, "sluice:nightly"); err != nil {
			t.Fatal(err)
		}
		select {
		case name := <-ran:
			if name != "sluice/cron" {
				t.Fatalf("event %q", name)
			}
		case <-time.After(budget):
			t.Fatal("cron run did not start")
		}
	})
}

// A finished step is never re-run when a run resumes after its process stops.
func TestRecoveryDoesNotRerunFinishedSteps(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var first, second atomic.Int32
		inSecond := make(chan struct{}, 1)
		var block atomic.Bool
		block.Store(true)
		mk := func() *Function {
			return &Function{Function: run.Function{ID: "resume", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
				if _, err := Step(r, "billed", func(context.Context) (int, error) { return int(first.Add(1)), nil }); err != nil {
					return nil, err
				}
				return Step(r, "second", func(ctx context.Context) (int, error) {
					second.Add(1)
					if block.Load() {
						inSecond <- struct{}{}
						<-ctx.Done() // the process stops here
						return 0, ctx.Err()
					}
					return 2, nil
				})
			}}
		}
		e1, err := New(context.Background(), Config{Store: testenv.OpenStore(t, url), PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := e1.Register(mk()); err != nil {
			t.Fatal(err)
		}
		if err := e1.Launch(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := send(t, e1, "go", "a", nil)
		<-inSecond
		_ = e1.Shutdown(5 * time.Second)
		block.Store(false)

		e2 := newEngine(t, url, mk())
		if got := wait(t, e2, s.RunID); got.Status != run.Completed {
			t.Fatalf("resumed run %s: %s", got.Status, got.Error)
		}
		if first.Load() != 1 || second.Load() != 2 {
			t.Fatalf("billed step ran %d times (want 1), second %d (want 2)", first.Load(), second.Load())
		}
	})
}

func TestRerunFromFailedStep(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var first atomic.Int32
		var broken atomic.Bool
		broken.Store(true)
		e := newEngine(t, url, &Function{Function: run.Function{ID: "rr", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
			if _, err := Step(r, "expensive", func(context.Context) (int, error) { return int(first.Add(1)), nil }); err != nil {
				return nil, err
			}
			return Step(r, "save", func(context.Context) (string, error) {
				if broken.Load() {
					return "", NonRetriable(errors.New("target table missing"))
				}
				return "saved", nil
			})
		}})
		s := send(t, e, "go", "a", nil)
		if got := wait(t, e, s.RunID); got.Status != run.Failed {
			t.Fatalf("status %s, want failed", got.Status)
		}
		failed, err := e.Runs(context.Background(), RunFilter{Function: "rr", Status: run.Failed})
		if err != nil || len(failed) != 1 || !contains(failed[0].Error, "target table missing") {
			t.Fatalf("failed runs %+v (%v): want the one run, with its error", failed, err)
		}
		if _, err := e.Rerun(context.Background(), "nope"); !errors.Is(err, ErrRunNotFound) {
			t.Fatalf("rerun of unknown run: %v", err)
		}
		broken.Store(false)
		id, err := e.Rerun(context.Background(), s.RunID)
		if err != nil {
			t.Fatal(err)
		}
		got := wait(t, e, id)
		if got.Status != run.Completed || got.RerunOf != s.RunID {
			t.Fatalf("rerun %+v", got)
		}
		if first.Load() != 1 {
			t.Fatalf("the step before the failed one ran %d times, want 1", first.Load())
		}
		if _, err := e.Rerun(context.Background(), id); !errors.Is(err, ErrNotRerunnable) {
			t.Fatalf("rerun of a completed run: %v", err)
		}
	})
}

func TestTransactionStepWritesOnce(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e := newEngine(t, url, &Function{Function: run.Function{ID: "tx", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
			return Transaction(r, "save", func(ctx context.Context, tx dbos.Tx) (int64, error) {
				if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS t_saves (k TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
					return 0, err
				}
				res, err := tx.Exec(ctx, `INSERT INTO t_saves (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = t_saves.n + 1`, ev.ID)
				if err != nil {
					return 0, err
				}
				return res.RowsAffected()
			})
		}})
		s := send(t, e, "go", "a", nil)
		if got := wait(t, e, s.RunID); got.Status != run.Completed {
			t.Fatalf("status %s: %s", got.Status, got.Error)
		}
		var n int
		if err := queryRow(t, e.Store(), `SELECT n FROM t_saves WHERE k = $1`, "a").Scan(&n); err != nil || n != 1 {
			t.Fatalf("saved %d times (%v), want 1", n, err)
		}
	})
}

func TestRegisterValidates(t *testing.T) {
	t.Parallel()
	h := func(*Run, Event) (any, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		fn   Function
		want string
	}{
		{"no trigger", Function{Function: run.Function{ID: "a"}, Handler: h}, "needs a trigger"},
		{"bad id", Function{Function: run.Function{ID: " a", Event: "e"}, Handler: h}, "function id"},
		{"no handler", Function{Function: run.Function{ID: "a", Event: "e"}}, "handler is nil"},
		{"negative retries", Function{Function: run.Function{ID: "a", Event: "e", Retries: -2}, Handler: h}, "want ≥ 0, or run.NoRetries"},
		{"zero concurrency", Function{Function: run.Function{ID: "a", Event: "e", Concurrency: []run.Concurrency{{}}}, Handler: h}, "concurrency[0].limit"},
		{"two keys", Function{Function: run.Function{ID: "a", Event: "e", Concurrency: []run.Concurrency{{Limit: 1, Key: "x"}, {Limit: 2, Key: "y", PerWorker: true}}}, Handler: h}, "one key per function"},
		{"throttle period", Function{Function: run.Function{ID: "a", Event: "e", Throttle: &run.Throttle{Limit: 1}}, Handler: h}, "throttle"},
		{"rate limit", Function{Function: run.Function{ID: "a", Event: "e", RateLimit: &run.RateLimit{Period: time.Second}}, Handler: h}, "rate limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn.validate()
			if err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestField(t *testing.T) {
	t.Parallel()
	ev := Event{Name: "n", ID: "i", Data: []byte(`{"a":{"b":"x"},"n":3,"f":1.5,"z":null}`)}
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"event.data.a.b", "x", true}, {"data.a.b", "x", true}, {"a.b", "x", true},
		{"n", "3", true}, {"f", "1.5", true}, {"a", `{"b":"x"}`, true},
		{"z", "", false}, {"missing", "", false}, {"id", "i", true}, {"event.name", "n", true}, {"", "", false},
	} {
		got, ok := decodeEvent(ev).field(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("field(%q) = %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// A key a function reads, written in the data in another case at any level
// of its path, is refused whether or not it is also written exactly; keys
// the function does not read, and a key repeated exactly, are not.
func TestCheckEventRefusesAKeyInAnotherCase(t *testing.T) {
	t.Parallel()
	fn := &Function{Function: run.Function{ID: "f", Event: "e", Idempotency: "event.data.documentId",
		Concurrency: []run.Concurrency{{Limit: 1, Key: "data.tenant.id"}}, Throttle: &run.Throttle{Limit: 1, Period: time.Second, Key: "data.tenant.id"},
		RateLimit: &run.RateLimit{Limit: 1, Period: time.Second, Key: "user"}, Priority: "priority"}}
	for _, tc := range []struct {
		name, data, want string // want "" is accepted
	}{
		{"exact", `{"documentId":"d","tenant":{"id":"t"},"user":"u","priority":1}`, ""},
		{"repeated exactly", `{"documentId":"a","documentId":"b"}`, ""},
		{"a field read by none", `{"documentId":"d","title":"x","Title":"y"}`, ""},
		{"a variant under a field read by none", `{"documentId":"d","other":{"DocumentId":"e"}}`, ""},
		{"the exact key and a variant", `{"documentId":"cs-a","DOCUMENTID":"cs-b"}`,
			`event field "event.data.documentId" (the idempotency key of function f): "documentId" is also written "DOCUMENTID" in the data`},
		{"a variant alone", `{"DocumentId":"d1"}`, `"documentId" is written "DocumentId" in the data`},
		{"the least of two variants", `{"documentID":"x","DocumentId":"y"}`, `is written "DocumentId"`},
		{"a variant at the first level", `{"documentId":"d","Tenant":{"id":"t"}}`,
			`event field "data.tenant.id" (the concurrency key of function f): "tenant" is written "Tenant"`},
		{"a variant at the second level", `{"documentId":"d","tenant":{"id":"t","ID":"u"}}`, `"id" is also written "ID"`},
		{"the rate-limit key", `{"documentId":"d","USER":"u"}`, `(the rate-limit key of function f): "user" is written "USER"`},
		{"a variant by Unicode folding", `{"documentId":"d","user":"u","uſer":"v"}`, `"user" is also written "uſer"`},
		{"the priority", `{"documentId":"d","priority":1,"Priority":9}`, `(the priority of function f): "priority" is also written "Priority"`},
		{"a variant of a key missing", `{"documentId":"d","Tenant":null}`, `"tenant" is written "Tenant"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fn.checkEvent(decodeEvent(Event{Name: "e", Data: []byte(tc.data)}))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "send the key only as")):
				t.Fatalf("got %v, want an error saying %s and what to send", err, tc.want)
			}
			var inv *InvalidError
			if err != nil && !errors.As(err, &inv) {
				t.Fatalf("%v is not an *InvalidError: the API would not answer 400", err)
			}
		})
	}
}

// A rate-limit key's text is checked as every key's is: PostgreSQL would
// refuse a NUL that SQLite keeps. Any JSON value keys the limit.
func TestCheckEventRateLimitKeyText(t *testing.T) {
	t.Parallel()
	fn := &Function{Function: run.Function{ID: "f", Event: "e", RateLimit: &run.RateLimit{Limit: 1, Period: time.Second, Key: "user"}}}
	for _, tc := range []struct{ data, want string }{
		{`{"user":"u"}`, ""},
		{`{"user":{"org":"a\u0000b"}}`, ""}, // its JSON escapes the NUL
		{`{"user":7}`, ""},
		{`{"user":"a\u0000b"}`, "control character U+0000"},
		{`{"user":"` + strings.Repeat("u", 600) + `"}`, "600 bytes is over the limit of 512"},
	} {
		err := fn.checkEvent(decodeEvent(Event{Name: "e", Data: []byte(tc.data)}))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%.40s: %v, want %q", tc.data, err, tc.want)
		}
	}
}

// launchGate is a log handler that holds DBOS's "DBOS launched" line, the
// last thing Launch does, until released: what runs meanwhile runs while
// Launch is still under way.
type launchGate struct {
	slog.Handler
	release <-chan struct{}
}

func (g launchGate) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "DBOS launched" {
		select {
		case <-g.release:
		case <-time.After(budget):
		}
	}
	return g.Handler.Handle(ctx, r)
}

func (g launchGate) WithAttrs(a []slog.Attr) slog.Handler {
	return launchGate{g.Handler.WithAttrs(a), g.release}
}

func (g launchGate) WithGroup(n string) slog.Handler {
	return launchGate{g.Handler.WithGroup(n), g.release}
}

// A run resumed by Launch may reach a transaction step before Launch
// returns: the step has its data source by then.
func TestResumedRunWritesWhileLaunching(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		var block atomic.Bool
		block.Store(true)
		inWait := make(chan struct{}, 1)
		attempted := make(chan error, 1)
		mk := func() *Function {
			return &Function{Function: run.Function{ID: "txresume", Event: "go", Retries: run.NoRetries}, Handler: func(r *Run, ev Event) (any, error) {
				if _, err := Step(r, "wait", func(ctx context.Context) (int, error) {
					if block.Load() {
						inWait <- struct{}{}
						<-ctx.Done() // the process stops here
						return 0, ctx.Err()
					}
					return 1, nil
				}); err != nil {
					return nil, err
				}
				n, err := Transaction(r, "save", func(ctx context.Context, tx dbos.Tx) (int64, error) {
					if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS t_resumed (k TEXT PRIMARY KEY)`); err != nil {
						return 0, err
					}
					res, err := tx.Exec(ctx, `INSERT INTO t_resumed (k) VALUES ($1)`, ev.ID)
					if err != nil {
						return 0, err
					}
					return res.RowsAffected()
				})
				select {
				case attempted <- err:
				default:
				}
				return n, err
			}}
		}
		store := testenv.OpenStore(t, url)
		e1, err := New(context.Background(), Config{Store: store, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := e1.Register(mk()); err != nil {
			t.Fatal(err)
		}
		if err := e1.Launch(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := send(t, e1, "go", "a", nil)
		<-inWait
		_ = e1.Shutdown(5 * time.Second)
		block.Store(false)

		release := make(chan struct{})
		e2, err := New(context.Background(), Config{Store: testenv.OpenStore(t, url), PollInterval: 20 * time.Millisecond,
			Logger: slog.New(launchGate{slog.NewTextHandler(io.Discard, nil), release})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e2.Shutdown(5 * time.Second) })
		if err := e2.Register(mk()); err != nil {
			t.Fatal(err)
		}
		launched := make(chan error, 1)
		go func() { launched <- e2.Launch(context.Background()) }()
		select {
		case err := <-attempted:
			if err != nil {
				t.Errorf("the transaction of a run resumed during Launch: %v", err)
			}
		case <-time.After(budget):
			t.Error("the resumed run never reached its transaction while Launch was held")
		}
		close(release)
		if err := <-launched; err != nil {
			t.Fatal(err)
		}
		if got := wait(t, e2, s.RunID); got.Status != run.Completed {
			t.Fatalf("resumed run %s: %s", got.Status, got.Error)
		}
	})
}
