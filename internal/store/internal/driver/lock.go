package driver

import (
	"errors"
	"hash/fnv"
)

// ExecutorLockKey is the key of the executor lock of executor in app (see
// store.Store.LockExecutor): a PostgreSQL advisory lock's, and in the name
// of an SQLite lock file. It must not change: processes of two releases
// on one database find each other's locks by it.
func ExecutorLockKey(app, executor string) uint64 {
	return LockKey("sluice executor\x00" + app + "\x00" + executor)
}

// LockKey is the key of a lock named name: the name's 64-bit FNV-1a hash.
func LockKey(name string) uint64 {
	hash := fnv.New64a()
	_, _ = hash.Write([]byte(name))
	return hash.Sum64()
}

// ErrLetGo is the error of store.Lock's Check on a lock already let go.
var ErrLetGo = errors.New("the lock was let go")
