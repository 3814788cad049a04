//go:build unix

package yamlfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFileRefusesPipesAndDevices(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "config.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A link does not hide what it points to.
	link := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo:        "read " + fifo + ": not a regular file: a named pipe (FIFO)",
		"/dev/zero": "read /dev/zero: not a regular file: a character device",
		link:        "read " + link + ": not a regular file: a character device",
	} {
		// With no writer, a pipe's open would wait for ever: the test's
		// own timeout is what fails it then.
		_, err := ReadFile(path, MaxFileBytes)
		if !errors.Is(err, ErrNotRegular) || err.Error() != want {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

// TestOpenDoesNotWaitForAWriter opens a pipe as ReadFile does, past its
// check: the open returns, so the check after it refuses the pipe.
func TestOpenDoesNotWaitForAWriter(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(fifo, openFlags, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := regular(fifo, fi); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("the opened pipe: %v", err)
	}
}
