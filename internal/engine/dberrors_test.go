package engine

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store/sqlite"
)

// TestLockedDatabase holds the write lock of the engine's SQLite file from
// another connection, as another process would: New gives up after the
// busy timeout naming the file, and a statement the engine runs after start
// fails the same way once it has waited.
func TestLockedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sluice.db")
	url := "sqlite:" + path + "?_pragma=busy_timeout(300)"
	hold := func() (release func()) {
		h, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := h.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"BEGIN EXCLUSIVE", "CREATE TABLE held (x)"} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		return func() {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			h.Close()
		}
	}

	release := hold()
	start := time.Now()
	e, err := New(ctx, Config{DatabaseURL: url})
	if err == nil {
		e.Shutdown(time.Second)
		t.Fatal("New succeeded on a file another connection holds the write lock of")
	}
	var le *sqlite.LockedError
	if !errors.As(err, &le) || le.Path != path || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("New: %v, want a *sqlite.LockedError naming %s", err, path)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("New took %s to fail, want about the 300ms busy timeout", took)
	}
	release()

	e, err = New(ctx, Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(5 * time.Second)
	release = hold()
	defer release()
	if _, err = e.db.exec(ctx, `DELETE FROM sluice_rate_counts`); !errors.As(err, &le) || le.Path != path {
		t.Fatalf("a write while locked: %v, want a *sqlite.LockedError naming %s", err, path)
	}
	// A rate limit's count is a row read back from a write.
	if _, err = e.db.countStart(ctx, "f", "", time.Minute, 1, time.Now()); !errors.As(err, &le) || !strings.HasPrefix(err.Error(), "count rate limit of f: ") {
		t.Fatalf("a counted start while locked: %v, want a *sqlite.LockedError", err)
	}
	if _, err := e.db.exec(ctx, `SELECT * FROM no_such_table`); err == nil || errors.As(err, &le) {
		t.Errorf("another error became %v", err)
	}
}
