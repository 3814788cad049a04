//go:build unix

package yamlfile

import (
	"os"
	"syscall"
)

// openFlags opens a named pipe without waiting for a writer, so that it
// can be refused; a regular file reads as without the flag.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK
