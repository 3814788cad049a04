//go:build !unix

package sqlite

import (
	"errors"
	"os"
)

// errLocked says another open file holds the lock.
var errLocked = errors.New("locked")

// flock takes no lock where flock(2) does not exist: there, one SQLite
// database must not be launched twice with one executor ID.
func flock(*os.File) error { return nil }
