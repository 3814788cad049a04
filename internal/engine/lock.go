package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/store"
)

// lockWatch is an executor lock that Launch took (see
// store.Store.LockExecutor): on PostgreSQL an advisory lock held by a
// connection of its own, on SQLite an flock on a file beside the database.
// Either goes with the process that holds it, so a process killed without
// a shutdown leaves nothing to clean up.
//
// A PostgreSQL connection can drop while the process runs on (a server
// restart, a proxy's idle cut, a terminated backend), and the lock with it:
// another process could then take the executor's runs (a restart with its
// name, or adoption) while this one still executes them. The watch checks
// the lock every Config.LockCheckEvery; when it is lost, the engine stops
// taking work and says so (Ready), and the watch takes the lock again as
// soon as it can. Runs already executing are fenced by their ownership
// check before each provider call (see guard).
type lockWatch struct {
	executor string

	mu   sync.Mutex
	lock store.Lock // nil while lost
	lost error      // why the lock is not held now; nil while it is

	stop chan struct{}
	done chan struct{}
}

// lockExecutor takes the lock that keeps one live engine per executor ID,
// application and database. It tries tries times before calling the lock
// taken (see store.Store.LockExecutor).
func (e *Engine) lockExecutor(ctx context.Context, executor string, tries int) (*lockWatch, error) {
	l, err := e.st.LockExecutor(ctx, e.cfg.AppName, executor, tries)
	if held, ok := errors.AsType[*store.HeldError](err); ok {
		return nil, fmt.Errorf("launch executor %q of %s on %s: %w (held through %s); give each process its own executor ID, or stop the other one first",
			executor, e.cfg.AppName, e.st, ErrExecutorRunning, held.Where)
	}
	if err != nil {
		return nil, fmt.Errorf("lock executor %q: %w", executor, err)
	}
	return &lockWatch{executor: executor, lock: l}, nil
}

// release lets the lock go. Safe to call twice.
func (l *lockWatch) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lock != nil {
		l.lock.Release()
		l.lock = nil
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

// check confirms that the lock is still held; when it is not, it stops
// the engine taking work and tries to take the lock again, and once it
// has, takes work again.
func (l *lockWatch) check(e *Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), max(e.cfg.LockCheckEvery, time.Second))
	defer cancel()
	l.mu.Lock()
	lock, lost := l.lock, l.lost
	l.mu.Unlock()
	if lost == nil {
		err := lock.Check(ctx)
		if err == nil {
			return
		}
		lost = fmt.Errorf("executor lock of %q lost: %w", l.executor, err)
		l.mu.Lock()
		l.lock, l.lost = nil, lost
		l.mu.Unlock()
		e.cfg.Logger.Error("sluice: the connection holding this process's executor lock dropped: it takes no new work until it holds the lock again",
			"executor", l.executor, "err", err)
		e.listen(false)
	}
	lock, err := e.st.LockExecutor(ctx, e.cfg.AppName, l.executor, 1)
	if err != nil {
		if _, held := errors.AsType[*store.HeldError](err); held {
			err = ErrExecutorRunning
		}
		e.cfg.Logger.Warn("sluice: cannot take this process's executor lock again yet", "executor", l.executor, "err", err)
		return
	}
	l.mu.Lock()
	l.lock, l.lost = lock, nil
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
