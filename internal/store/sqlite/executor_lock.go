package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"
)

// LockExecutor implements store.Store with an flock on
// <file>.executor-<key>.lock beside the database. The lock belongs to the
// open file: another open of it, in this process or another, cannot take
// it until the file is closed or its process ends. tries plays no part: a
// closed file's lock is free at once.
func (s *Store) LockExecutor(_ context.Context, app, executor string, _ int) (store.Lock, error) {
	if s.memory {
		return nil, fmt.Errorf("%s is in memory: no other process can open it, and no lock file goes beside it", s)
	}
	path := fmt.Sprintf("%s.executor-%016x.lock", s.file(), driver.ExecutorLockKey(app, executor))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) // #nosec G304 -- beside the database the caller named
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		if errors.Is(err, errLocked) {
			return nil, &store.HeldError{Where: path}
		}
		return nil, err
	}
	return &fileLock{file: f}, nil
}

// LockDBOSMigrations implements store.Store: migrate runs at once, its
// writes serialized by the database's write lock.
func (s *Store) LockDBOSMigrations(_ context.Context, migrate func() error) error { return migrate() }

// fileLock is an flock held by an open file.
type fileLock struct {
	mu   sync.Mutex
	file *os.File // nil once released
}

// Check implements store.Lock: the lock is held while its file is open.
func (l *fileLock) Check(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return driver.ErrLetGo
	}
	return nil
}

// Release implements store.Lock: closing the file releases the lock.
func (l *fileLock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_ = l.file.Close()
		l.file = nil
	}
}
