package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// One live engine per executor ID and database: a second is refused with
// ErrExecutorRunning while the first runs, and an engine launched the
// moment the one before it shut down finds the lock free, every time.
func TestExecutorLock(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		launch := func() (*Engine, error) {
			e, err := New(context.Background(), Config{Store: testenv.OpenStore(t, url), PollInterval: 20 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				return nil, err
			}
			if err := e.Launch(context.Background()); err != nil {
				_ = e.Shutdown(5 * time.Second)
				return nil, err
			}
			return e, nil
		}
		first, err := launch()
		if err != nil {
			t.Fatal(err)
		}
		if second, err := launch(); !errors.Is(err, ErrExecutorRunning) {
			if second != nil {
				_ = second.Shutdown(5 * time.Second)
			}
			t.Fatalf("a second engine of the same executor: %v, want ErrExecutorRunning", err)
		}
		e := first
		for i := range 10 {
			if err := e.Shutdown(budget); err != nil {
				t.Fatalf("shutdown %d: %v", i, err)
			}
			if e, err = launch(); err != nil {
				t.Fatalf("launch right after shutdown %d: %v", i, err)
			}
		}
		_ = e.Shutdown(5 * time.Second)
	})
}

// Processes that start together on a new PostgreSQL database each migrate
// DBOS's system tables: New serializes them, so every one starts (DBOS alone
// fails all but one, each creating the dbos schema at once).
func TestEnginesStartTogetherOnANewDatabase(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	const n = 6
	errs := make([]error, n)
	engines := make([]*Engine, n)
	var wg, opened sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		opened.Add(1)
		wg.Go(func() {
			st, err := store.Open(context.Background(), url)
			opened.Done()
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { _ = st.Close() })
			<-start
			engines[i], errs[i] = New(context.Background(), Config{Store: st, AppName: "together", ExecutorID: fmt.Sprintf("node-%d", i),
				PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if errs[i] == nil {
				errs[i] = engines[i].Launch(context.Background())
			}
		})
	}
	opened.Wait() // the stores open, then all start at once
	close(start)
	wg.Wait()
	for i, e := range engines {
		if e != nil {
			t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
		}
		if errs[i] != nil {
			t.Errorf("engine %d: %v", i, errs[i])
		}
	}
}

// The executor lock on PostgreSQL lives in one connection. When that
// connection drops, the engine notices at its next check, stops taking
// work and says so (Ready and the log), and takes work again once it holds
// the lock again — here after another session that held it meanwhile lets
// it go. (On SQLite the lock is a file lock: nothing can drop it while the
// process runs.)
func TestExecutorLockLossIsDetected(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	var log testenv.Buffer
	st := testenv.OpenStore(t, url)
	e, err := New(context.Background(), Config{Store: st, PollInterval: 20 * time.Millisecond, LockCheckEvery: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 1)
	if err := e.Register(&Function{Function: run.Function{ID: "work", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
		return Step(r, "one", func(context.Context) (int, error) { done <- struct{}{}; return 1, nil })
	}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Launch(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
	if err := e.Ready(); err != nil {
		t.Fatalf("a launched engine is not ready: %v", err)
	}
	h, err := st.Handle()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	other, err := h.Postgres.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	key := postgres.ExecutorLockKey(e.cfg.AppName, e.lock.executor)
	// Another session queues for the lock, so that it holds it the moment
	// the engine's connection drops, and the engine cannot take it back.
	taken := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
		taken <- err
	}()
	// pg_locks lists every database's locks, and the engines of the tests
	// running beside this one hold the same key in databases of their own.
	lockQuery := `SELECT count(*) FILTER (WHERE NOT granted), coalesce(max(pid) FILTER (WHERE granted), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND ((classid::bigint << 32) | objid::bigint) = $1
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
	var waiters, pid int
	// Until the other session waits in line for the lock: then the engine
	// cannot take it back before it does.
	waitUntil(t, "the other session waits for the executor lock", func() bool {
		if err := h.Postgres.QueryRow(ctx, lockQuery, key).Scan(&waiters, &pid); err != nil {
			t.Fatalf("find the sessions of the executor lock: %v", err)
		}
		return waiters > 0
	})
	if pid == 0 {
		t.Fatal("no session holds the executor lock")
	}
	if _, err := h.Postgres.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-taken; err != nil {
		t.Fatalf("the other session's lock: %v", err)
	}
	waitUntil(t, "the engine's check sees the loss of its lock", func() bool { return e.Ready() != nil })
	if err := e.Ready(); !strings.Contains(err.Error(), "executor lock") {
		t.Fatalf("Ready after the loss: %v, want it to name the executor lock", err)
	}
	if q := dbos.ListenedQueues(e.dctx); len(q) != 1 || q[0] != pausedQueue {
		t.Fatalf("queues listened to while the lock is lost: %v, want none of the functions'", q)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the engine takes its lock again", func() bool { return e.Ready() == nil })
	send(t, e, "go", "after", nil)
	<-done // work is taken again
	for _, want := range []string{"executor lock dropped", "took this process's executor lock again: taking work again"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}
