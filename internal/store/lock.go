package store

import "context"

// Lock is a lock that Store.LockExecutor took, held until Release or until
// it is lost. A Lock is safe for simultaneous use by multiple goroutines.
type Lock interface {
	// Check returns nil while the lock is held, and otherwise why it is
	// not, having let it go. A PostgreSQL lock lives as long as its
	// connection, which can drop while the process runs on (a server
	// restart, a proxy's idle cut, a terminated backend), and the lock
	// with it: Check asks the server whether the lock's session still
	// holds it, and closes the connection when it does not. An SQLite
	// file lock is held as long as its file is open, which only Release
	// closes: Check returns nil until then.
	Check(ctx context.Context) error

	// Release lets the lock go. Safe to call twice, and after Check found
	// the lock lost.
	Release()
}

// HeldError is the error of Store.LockExecutor while another holder, in
// this process or another, has the lock.
type HeldError struct {
	// Where names the lock as the database holds it: "PostgreSQL advisory
	// lock KEY", or the lock file's path on SQLite.
	Where string
}

func (e *HeldError) Error() string { return "the lock is held through " + e.Where }
