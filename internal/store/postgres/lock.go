package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"
)

var (
	//go:embed sql/try_advisory_lock.sql
	tryAdvisoryLockSQL string
	//go:embed sql/advisory_unlock.sql
	advisoryUnlockSQL string
	//go:embed sql/advisory_lock_held.sql
	advisoryLockHeldSQL string
)

// lockRetry is how long LockExecutor waits between its tries of a lock
// held by a session that is ending.
const lockRetry = 100 * time.Millisecond

// migrationLockPoll is how often a process waiting for another's DBOS
// migrations looks again.
const migrationLockPoll = 50 * time.Millisecond

// dbosMigrationsKey is the key of the advisory lock of LockDBOSMigrations.
var dbosMigrationsKey = int64(driver.LockKey("sluice dbos migrations"))

// ExecutorLockKey is the key of the session advisory lock LockExecutor
// takes for executor in app, as pg_locks shows it: (classid << 32) | objid.
func ExecutorLockKey(app, executor string) int64 {
	return int64(driver.ExecutorLockKey(app, executor))
}

// LockExecutor implements store.Store. It tries on a pooled session, which
// goes back to the pool when another holds the lock (adoption tries the
// locks of live executors often), and takes that connection out of the
// pool once the lock is held: the lock lives as long as the connection.
func (s *Store) LockExecutor(ctx context.Context, app, executor string, tries int) (store.Lock, error) {
	key := ExecutorLockKey(app, executor)
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := pollAdvisoryLock(ctx, c, key, tries, lockRetry)
	if err != nil {
		_ = c.Conn().Close(context.Background()) // a session that failed may hold the lock: the pool drops it
		c.Release()
		return nil, err
	}
	if !ok {
		c.Release()
		return nil, &store.HeldError{Where: fmt.Sprintf("PostgreSQL advisory lock %d", key)}
	}
	return &advisoryLock{key: key, conn: c.Hijack()}, nil
}

// LockDBOSMigrations implements store.Store, on a pooled session that holds
// the lock only while migrate runs.
func (s *Store) LockDBOSMigrations(ctx context.Context, migrate func() error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("lock DBOS's migrations: %w", err)
	}
	defer c.Release()
	if _, err := pollAdvisoryLock(ctx, c, dbosMigrationsKey, 0, migrationLockPoll); err != nil {
		return fmt.Errorf("lock DBOS's migrations: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := c.Exec(uctx, advisoryUnlockSQL, dbosMigrationsKey); err != nil {
			// The lock must not outlive this call on a pooled session.
			_ = c.Conn().Close(uctx)
		}
	}()
	return migrate()
}

// pollAdvisoryLock tries to take the session advisory lock key on c, tries
// times (until it does, when tries is 0) every apart, and reports whether
// it did; ctx's end is an error.
func pollAdvisoryLock(ctx context.Context, c interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key int64, tries int, every time.Duration) (bool, error) {
	for try := 1; ; try++ {
		var ok bool
		if err := c.QueryRow(ctx, tryAdvisoryLockSQL, key).Scan(&ok); err != nil {
			return false, err
		}
		if ok || tries > 0 && try >= tries {
			return ok, nil
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// advisoryLock is a session advisory lock held by a connection of its own.
type advisoryLock struct {
	key int64

	mu   sync.Mutex
	conn *pgx.Conn // nil once released or lost
}

// Check implements store.Lock.
func (l *advisoryLock) Check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return driver.ErrLetGo
	}
	var held bool
	err := l.conn.QueryRow(ctx, advisoryLockHeldSQL, l.key).Scan(&held)
	if err == nil && held {
		return nil
	}
	if err == nil {
		err = errors.New("the session no longer holds it")
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.conn.Close(cctx)
	l.conn = nil
	return err
}

// Release implements store.Lock.
func (l *advisoryLock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Unlock before closing: the server ends a closed session
	// asynchronously, and an engine launched right after this one must
	// find the lock free.
	_, _ = l.conn.Exec(cctx, advisoryUnlockSQL, l.key)
	_ = l.conn.Close(cctx)
	l.conn = nil
}
