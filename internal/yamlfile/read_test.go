package yamlfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, size int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Repeat("#", size)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const limit = 1000
	at := write("at.yaml", limit)
	over := write("over.yaml", limit+1)

	if data, err := ReadFile(at, limit); err != nil || len(data) != limit {
		t.Errorf("a file at the bound: %d bytes, %v", len(data), err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(at, link); err != nil {
		t.Logf("no symlinks here: %v", err)
	} else if data, err := ReadFile(link, limit); err != nil || len(data) != limit {
		t.Errorf("a symlink to a regular file: %d bytes, %v", len(data), err)
	}

	_, err := ReadFile(over, limit)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "over.yaml: too large: more than the bound of 1,000 bytes") {
		t.Errorf("a file one byte over the bound: %v", err)
	}
	if _, ok := errors.AsType[*fs.PathError](err); !ok {
		t.Errorf("%v is not an *fs.PathError", err)
	}

	_, err = ReadFile(dir, limit)
	if !errors.Is(err, ErrNotRegular) || err.Error() != "read "+dir+": not a regular file: a directory" {
		t.Errorf("a directory: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.yaml"), limit); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
