package sqlite_test

import (
	"context"
	"database/sql/driver"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/store/storetest"
)

var _ store.Store = (*sqlite.Store)(nil)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) storetest.OpenFunc {
		path := filepath.Join(t.TempDir(), "sluice.db")
		return func(ctx context.Context) (store.Store, error) {
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

func TestMemoryIsOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Memory)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Every connection to :memory: would be a database of its own: writes
	// and reads must all land on the one the migrations made.
	c := store.Charge{ID: "r1", Flow: "f", At: time.UnixMilli(1_700_000_000_123).UTC(), Cost: governor.Cost{Requests: 1, Input: 2, Output: 3}}
	if err := s.UpsertCharges(ctx, "groq", []store.Charge{c}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Charges(ctx, "groq", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != c {
		t.Fatalf("Charges = %+v, want [%+v]", got, c)
	}
	if s.String() != "sqlite::memory:" {
		t.Fatalf("String() = %q", s.String())
	}
	// DBOS needs several connections at once: the one database there is
	// cannot be shared with it.
	const refusal = "open sqlite::memory:: an in-memory SQLite database lives in one connection and cannot be shared with DBOS; use a file"
	if h, err := s.Handle(); err == nil || err.Error() != refusal || h != (store.Handle{}) {
		t.Fatalf("Handle() = %+v, %v; want no handle and %q", h, err, refusal)
	}
}

// TestHandleNamesTheFile checks the file the handle names, beside which
// the engine keeps its lock files, for each way of writing a path.
func TestHandleNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, path := range []string{
		filepath.Join(dir, "a.db"),
		filepath.Join(dir, "b.db") + "?_pragma=busy_timeout(100)",
		"file:" + filepath.Join(dir, "c.db") + "?mode=rwc",
	} {
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.Handle()
		if err != nil || h.SQLite != s.DB() || h.Postgres != nil {
			t.Errorf("Handle() of %s = %+v, %v; want the store's DB", path, h, err)
		}
		if _, err := os.Stat(h.File); err != nil || filepath.Dir(h.File) != dir {
			t.Errorf("Handle().File of %s = %q (%v), want the database file", path, h.File, err)
		}
		s.Close()
	}
}

// TestHandleIsSetUpForSharing checks the settings DBOS expects of a handle
// it is given, since it uses ours as is.
func TestHandleIsSetUpForSharing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nested", "folder", "sluice.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created: %v", err)
	}
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"busy_timeout": "5000",
		"foreign_keys": "1",
		"synchronous":  "1",    // NORMAL
		"cache_size":   "-512", // 512 kB a connection: see pragmas
	} {
		var got string
		if err := s.DB().QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", pragma, err)
		}
		if strings.ToLower(got) != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
	// BEGIN IMMEDIATE: a transaction holds the write lock from its start,
	// so a second one cannot begin while the first is open. With a deferred
	// BEGIN, which takes no lock, the second would begin at once.
	tx1, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Fail at once instead of waiting out the busy timeout; the pool must
	// not get this connection back as it is.
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	defer conn.Raw(func(any) error { return driver.ErrBadConn })
	if tx2, err := conn.BeginTx(ctx, nil); err == nil {
		tx2.Rollback()
		t.Error("a second transaction began while the first held the database: transactions are not BEGIN IMMEDIATE")
	} else if !strings.Contains(err.Error(), "locked") && !strings.Contains(err.Error(), "busy") {
		t.Errorf("second BEGIN failed for another reason than the lock: %v", err)
	}
	if want := "sqlite:" + path; s.String() != want {
		t.Errorf("String() = %q, want %q", s.String(), want)
	}
}

func TestCallerPragmasWin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := sqlite.Open(ctx, path+"?_pragma=busy_timeout(250)")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got int
	if err := s.DB().QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != 250 {
		t.Fatalf("busy_timeout = %d, want the 250 the path asked for", got)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := sqlite.Open(ctx, ""); err == nil || !strings.Contains(err.Error(), "empty path") {
		t.Errorf("Open(\"\") error = %v, want one about the empty path", err)
	}
	// A folder where the file should be.
	dir := t.TempDir()
	if _, err := sqlite.Open(ctx, dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("Open(folder) error = %v, want one naming %s", err, dir)
	}
}

func BenchmarkUpsertCharges(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "sluice.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.Benchmark(b, s)
}

// BenchmarkBackfills measures a backfill of 1,000,000 items (see
// storetest.BenchmarkBackfills).
func BenchmarkBackfills(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "sluice.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkBackfills(b, s, 1_000_000)
}

// BenchmarkHistory measures Samples over 48 hours of 100 flows (see
// storetest.BenchmarkHistory).
func BenchmarkHistory(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "sluice.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkHistory(b, s)
}
