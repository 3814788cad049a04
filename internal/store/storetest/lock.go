package storetest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseLocks checks the executor lock and the lock of DBOS's migrations
// on two stores opened on one database, as two processes would.
func exerciseLocks(t *testing.T, newDB NewDatabase) {
	ctx := context.Background()
	// two opens two stores on a new database, as two processes would.
	two := func(t *testing.T) (a, b store.Store) {
		o := newDB(t)
		return openOn(t, o), openOn(t, o)
	}

	t.Run("ExecutorLockHeldOnce", func(t *testing.T) {
		t.Parallel()
		a, b := two(t)
		l := mustLockExecutor(t, a, "app", "node-1")
		defer l.Release()
		for name, s := range map[string]store.Store{"another process": b, "the same process": a} {
			if other, err := s.LockExecutor(ctx, "app", "node-1", 2); !isHeld(err) {
				if other != nil {
					other.Release()
				}
				t.Errorf("a second taker in %s: %v, want a *store.HeldError naming where the lock is held", name, err)
			}
		}
		// Another executor, or the same one of another app, is another lock.
		mustLockExecutor(t, b, "app", "node-2").Release()
		mustLockExecutor(t, b, "other app", "node-1").Release()
		if err := l.Check(ctx); err != nil {
			t.Errorf("Check of a lock held: %v", err)
		}
	})

	t.Run("ExecutorLockReleasedIsFree", func(t *testing.T) {
		t.Parallel()
		a, b := two(t)
		stores := []store.Store{a, b}
		// Taken the moment the holder let it go, in either process, every
		// time.
		for i := range 10 {
			l := mustLockExecutor(t, stores[i%2], "app", "node-1")
			l.Release()
			l.Release() // twice is safe
			if err := l.Check(ctx); err == nil {
				t.Fatal("Check of a lock released: nil, want why it is not held")
			}
		}
	})

	t.Run("ExecutorLockLossIsDetected", func(t *testing.T) {
		t.Parallel()
		a, b := two(t)
		l := mustLockExecutor(t, a, "app", "node-1")
		defer l.Release()
		h := mustHandle(t, b)
		if h.Postgres == nil {
			// An SQLite file lock lasts as long as its open file, which
			// nothing but Release closes: it is never lost.
			if err := l.Check(ctx); err != nil {
				t.Fatalf("Check of a lock held: %v", err)
			}
			return
		}
		// The lock lives in its session: end the session.
		if _, err := h.Postgres.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
			t.Fatal(err)
		}
		for held := true; held; {
			if err := h.Postgres.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&held); err != nil {
				t.Fatal(err)
			}
			if held {
				time.Sleep(10 * time.Millisecond) // until the server has ended the session
			}
		}
		if err := l.Check(ctx); err == nil {
			t.Fatal("Check after the lock's session ended: nil, want why the lock is lost")
		}
		// Free for another taker, and the holder that lost it can take it
		// again once that one lets it go.
		other := mustLockExecutor(t, b, "app", "node-1")
		if again, err := a.LockExecutor(ctx, "app", "node-1", 1); !isHeld(err) {
			if again != nil {
				again.Release()
			}
			t.Fatalf("retaking a lost lock another holds: %v, want a *store.HeldError", err)
		}
		other.Release()
		again := mustLockExecutor(t, a, "app", "node-1")
		if err := again.Check(ctx); err != nil {
			t.Errorf("Check of the lock taken again: %v", err)
		}
		again.Release()
	})

	t.Run("DBOSMigrationsOneAtATime", func(t *testing.T) {
		t.Parallel()
		a, b := two(t)
		errMigrate := errors.New("the migration failed")
		if err := a.LockDBOSMigrations(ctx, func() error { return errMigrate }); !errors.Is(err, errMigrate) {
			t.Fatalf("LockDBOSMigrations of a failing migration: %v, want its error", err)
		}
		h := mustHandle(t, b)
		if h.Postgres == nil {
			// SQLite: the migration runs at once, even while another
			// runs; the database's write lock serializes their writes.
			ran := false
			err := a.LockDBOSMigrations(ctx, func() error {
				return b.LockDBOSMigrations(ctx, func() error { ran = true; return nil })
			})
			if err != nil || !ran {
				t.Fatalf("a second migration while one runs on SQLite: ran %v, error %v; want it run at once", ran, err)
			}
			return
		}
		// PostgreSQL: another process's migration waits while one runs.
		held, release, errA := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			errA <- a.LockDBOSMigrations(ctx, func() error { close(held); <-release; return nil })
		}()
		<-held
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var ran atomic.Bool
		errB := make(chan error, 1)
		go func() {
			errB <- b.LockDBOSMigrations(wctx, func() error { ran.Store(true); return nil })
		}()
		// Until b's session has tried the lock and found it taken.
		for tried := false; !tried; {
			if err := h.Postgres.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'
					AND query LIKE '%pg_try_advisory_lock%'
					AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted))`).Scan(&tried); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errB:
				t.Fatalf("a second migration while one runs: ran %v, error %v; want it to wait", ran.Load(), err)
			default:
			}
			if !tried {
				time.Sleep(10 * time.Millisecond)
			}
		}
		cancel()
		if err := <-errB; ran.Load() || !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "lock DBOS's migrations: ") {
			t.Errorf("a second migration while one runs, its context ended: ran %v, error %v; want it to wait, then fail with the context", ran.Load(), err)
		}
		close(release)
		if err := <-errA; err != nil {
			t.Fatal(err)
		}
		if err := b.LockDBOSMigrations(ctx, func() error { ran.Store(true); return nil }); err != nil || !ran.Load() {
			t.Fatalf("a migration after the other one ended: ran %v, error %v", ran.Load(), err)
		}
	})
}

func mustLockExecutor(t *testing.T, s store.Store, app, executor string) store.Lock {
	t.Helper()
	l, err := s.LockExecutor(context.Background(), app, executor, 1)
	if err != nil {
		t.Fatalf("LockExecutor(%q, %q): %v", app, executor, err)
	}
	return l
}

// isHeld reports whether err is LockExecutor's while another holds the
// lock, naming where.
func isHeld(err error) bool {
	held, ok := errors.AsType[*store.HeldError](err)
	return ok && held.Where != ""
}
