//go:build unix

package sqlite

import (
	"errors"
	"os"
	"syscall"
)

// errLocked says another open file holds the lock.
var errLocked = errors.New("locked")

// flock takes an exclusive lock on f without waiting. The lock belongs to
// this open file: another open of the same file, in this process or another,
// cannot take it until f is closed or its process ends.
func flock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}
