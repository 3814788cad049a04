package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/store"
)

// lockWatch is an executor lock that Launch took: on PostgreSQL an advisory
// lock held by a connection of its own, on SQLite an flock on a file beside
// the database. Either goes with the process that holds it, so a process
// killed without a shutdown leaves nothing to clean up.
//
// A PostgreSQL connection can drop while the process runs on (a server
// restart, a proxy's idle cut, a terminated backend), and the lock with it:
// another process could then take the executor's runs (a restart with its
// name, or adoption) while this one still executes them. The watch checks
// the connection every Config.LockCheckEvery; when it is gone, the engine
// stops taking work and says so (Ready), and the watch takes the lock again
// on a new connection as soon as it can. Runs already executing are fenced
// by their ownership check before each provider call (see guard).
type lockWatch struct {
	key      int64
	executor string

	mu   sync.Mutex
	conn *pgx.Conn // nil on SQLite
	file *os.File  // on SQLite
	lost error     // why the lock is not held now; nil while it is

	stop chan struct{}
	done chan struct{}
}

// lockExecutor takes the lock that keeps one live engine per executor ID,
// application and database. db names the database in errors. It tries
// tries times, lockRetry apart, before calling the lock taken.
func lockExecutor(ctx context.Context, h store.Handle, db, app, executor string, tries int) (*lockWatch, error) {
	key := lockKey("sluice executor\x00" + app + "\x00" + executor)
	busy := func(where string) error {
		return fmt.Errorf("launch executor %q of %s on %s: %w (held through %s); give each process its own executor ID, or stop the other one first", executor, app, db, ErrExecutorRunning, where)
	}
	if h.Postgres != nil {
		conn, ok, err := takeAdvisoryLock(ctx, h, int64(key), tries)
		if err != nil {
			return nil, fmt.Errorf("lock executor %q: %w", executor, err)
		}
		if !ok {
			return nil, busy(fmt.Sprintf("PostgreSQL advisory lock %d", int64(key)))
		}
		return &lockWatch{key: int64(key), executor: executor, conn: conn}, nil
	}
	path := fmt.Sprintf("%s.executor-%016x.lock", h.File, key)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) // #nosec G304 -- beside the database the caller named
	if err != nil {
		return nil, fmt.Errorf("lock executor %q: %w", executor, err)
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		if errors.Is(err, errLocked) {
			return nil, busy(path)
		}
		return nil, fmt.Errorf("lock executor %q: %w", executor, err)
	}
	return &lockWatch{key: int64(key), executor: executor, file: f}, nil
}

// takeAdvisoryLock tries to take the session advisory lock key on a pooled
// connection, and hijacks that connection from the pool once the lock is
// held: the lock lives as long as the connection. A session that just
// ended — an engine shut down or killed a moment ago — may hold the lock
// until the server has finished with it: it tries tries times before
// calling the lock taken. The tries run on a pooled session, which goes
// back to the pool when the lock is taken elsewhere (adoption tries the
// locks of live executors often).
func takeAdvisoryLock(ctx context.Context, h store.Handle, key int64, tries int) (*pgx.Conn, bool, error) {
	c, err := h.Postgres.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	ok, err := pollAdvisoryLock(ctx, c, key, tries, lockRetry)
	if err != nil {
		_ = c.Conn().Close(context.Background()) // a session that failed may hold the lock: the pool drops it
		c.Release()
		return nil, false, err
	}
	if !ok {
		c.Release()
		return nil, false, nil
	}
	return c.Hijack(), true, nil
}

// release lets the lock go. Safe to call twice.
func (l *lockWatch) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_ = l.file.Close() // closing the file releases the lock
		l.file = nil
	}
	if l.conn != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Unlock before closing: the server ends a closed session
		// asynchronously, and an engine launched right after this one
		// must find the lock free.
		_, _ = l.conn.Exec(cctx, `SELECT pg_advisory_unlock($1)`, l.key)
		_ = l.conn.Close(cctx)
		l.conn = nil
	}
}

// Lost reports why the executor lock is not held now, or nil.
func (l *lockWatch) Lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// watch checks the lock's connection every e.cfg.LockCheckEvery until
// stopWatching.
func (l *lockWatch) watch(e *Engine) {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(e.cfg.LockCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			l.check(e)
		}
	}()
}

func (l *lockWatch) stopWatching() {
	if l.stop == nil {
		return
	}
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// check confirms that the lock's session still holds the lock; when it
// does not, it stops the engine taking work and tries to take the lock
// again, and once it has, takes work again.
func (l *lockWatch) check(e *Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), max(e.cfg.LockCheckEvery, time.Second))
	defer cancel()
	l.mu.Lock()
	conn, lost := l.conn, l.lost
	l.mu.Unlock()
	if lost == nil {
		var held bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
			AND ((classid::bigint << 32) | objid::bigint) = $1)`, l.key).Scan(&held)
		if err == nil && held {
			return
		}
		if err == nil {
			err = errors.New("the session no longer holds it")
		}
		lost = fmt.Errorf("executor lock of %q lost: %w", l.executor, err)
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		ccancel()
		l.mu.Lock()
		l.conn, l.lost = nil, lost
		l.mu.Unlock()
		e.cfg.Logger.Error("sluice: the connection holding this process's executor lock dropped: it takes no new work until it holds the lock again",
			"executor", l.executor, "err", err)
		e.listen(false)
	}
	conn, ok, err := takeAdvisoryLock(ctx, e.h, l.key, 1)
	if err != nil || !ok {
		if err == nil {
			err = ErrExecutorRunning
		}
		e.cfg.Logger.Warn("sluice: cannot take this process's executor lock again yet", "executor", l.executor, "err", err)
		return
	}
	l.mu.Lock()
	l.conn, l.lost = conn, nil
	l.mu.Unlock()
	e.cfg.Logger.Warn("sluice: took this process's executor lock again: taking work again", "executor", l.executor)
	e.listen(true)
}

// listen turns the engine's queues on or off while it runs (not after it
// began stopping).
func (e *Engine) listen(on bool) {
	e.stepsMu.Lock()
	draining := e.draining
	e.stepsMu.Unlock()
	if draining {
		return
	}
	if on {
		dbos.ListenQueues(e.dctx)
	} else {
		dbos.ListenQueues(e.dctx, pausedQueue)
	}
}

// Ready reports why the engine does not take work now, or nil: it is not
// launched, it is stopping, or its executor lock is lost.
func (e *Engine) Ready() error {
	e.mu.RLock()
	launched, lw := e.launched, e.lock
	e.mu.RUnlock()
	if !launched {
		return errNotLaunched
	}
	select {
	case <-e.drain:
		return errors.New("the engine is stopping")
	default:
	}
	if lw != nil {
		return lw.Lost()
	}
	return nil
}
