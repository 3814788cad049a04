package yamlfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/sluice-dev/sluice/internal/num"
)

// MaxFileBytes bounds every YAML file sluice reads: configs, scenarios,
// plan inputs. Decoding the worst 1 MiB of YAML (a list of one-letter
// items) builds about 130 MB of nodes; the largest config or scenario
// in use is a few kilobytes.
const MaxFileBytes = 1 << 20

// The errors ReadFile wraps in an *fs.PathError, with what the path
// names or the bound.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("too large")
)

// ReadFile reads the file at path, following symlinks, when it is a
// regular file of at most limit bytes. Anything else — a directory, a
// named pipe, a device such as /dev/zero, a socket — is refused before a
// byte is read, as an *fs.PathError wrapping ErrNotRegular that says what
// path names; a file over limit is refused once limit+1 bytes were read,
// wrapping ErrTooLarge and naming the bound. It never blocks: a pipe that
// is put in place between the check and the open is opened without
// waiting for a writer (where the system allows) and refused, and a
// regular file has an end.
func ReadFile(path string, limit int64) ([]byte, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if err := regular(path, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, openFlags, 0) // #nosec G304 -- a file the user named
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := regular(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: more than the bound of %s bytes", ErrTooLarge, num.Group(limit))}
	}
	return data, nil
}

// regular returns an error naming what path is, unless it is a regular file.
func regular(path string, fi fs.FileInfo) error {
	m := fi.Mode()
	var what string
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a device"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	default:
		what = "a file of mode " + m.Type().String()
	}
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %s", ErrNotRegular, what)}
}
