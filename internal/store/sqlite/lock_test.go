package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
)

// lockHolderEnv makes the test binary a process that holds a lock on the
// file it names (see holdInChild).
const lockHolderEnv = "SLUICE_SQLITE_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if path := os.Getenv(lockHolderEnv); path != "" {
		os.Exit(holdLock(path))
	}
	os.Exit(m.Run())
}

// holdLock is the child process: it takes the write lock of path, says so on
// stdout and keeps it until its stdin closes.
func holdLock(path string) int {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer db.Close()
	for _, q := range []string{"BEGIN EXCLUSIVE", "CREATE TABLE IF NOT EXISTS held (x)", "INSERT INTO held VALUES (1)"} {
		if _, err := db.Exec(q); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// holdInChild starts a process holding the write lock of path and returns
// the function that ends it.
func holdInChild(t *testing.T, path string) (release func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("lock holder: %v", err)
		}
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("lock holder said %q (%v)", line, err)
	}
	return release
}

// holdInConn takes a lock on path from a connection of another handle, as
// another process would, with the statements given, and returns the
// function that ends it.
func holdInConn(t *testing.T, path string, stmts ...string) (release func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		conn.Close()
		db.Close()
	}
	t.Cleanup(release)
	return release
}

// checkLocked checks that err says path is locked by another process after
// waiting wait, and that it gave up at all.
func checkLocked(t *testing.T, err error, path string, wait, took time.Duration) {
	t.Helper()
	var le *sqlite.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("error = %v, want a *sqlite.LockedError", err)
	}
	if le.Path != path || le.Wait != wait {
		t.Errorf("LockedError{Path: %q, Wait: %s}, want {%q, %s}", le.Path, le.Wait, path, wait)
	}
	for _, want := range []string{path, "locked by another process", "stop the other process", "PostgreSQL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// It gave up rather than waiting for ever; the bound is as wide as the
	// test's budget so that no load can reach it. There is no lower bound on
	// the wall clock: SQLite's busy handler adds up the sleeps it asks for,
	// not the time they take, and the driver's nanosleep returns early when
	// a signal interrupts it (Go preempts goroutines with SIGURG), so a
	// statement can give up before the busy timeout has passed. That it
	// waits is checked on events instead (see waitsInBusyHandler).
	if took > wait+time.Minute {
		t.Errorf("took %s to fail, want about the %s busy timeout", took, wait)
	}
}

// goroutineID returns the id of the calling goroutine, as runtime.Stack
// names it.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// inBusyHandler reports whether goroutine id is in SQLite's busy handler
// (sqliteDefaultBusyCallback, as the driver names it): it met another
// process's lock and sleeps before it tries again.
func inBusyHandler(id string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.HasPrefix(g, "goroutine "+id+" ") {
			return strings.Contains(g, "sqliteDefaultBusyCallback")
		}
	}
	return false
}

// waitsInBusyHandler calls do in a goroutine, waits until do is inside
// SQLite's busy handler (it met the lock and waits for it, rather than
// failing at once), calls release and returns what do returned. It fails
// the test if do returns before it waited.
func waitsInBusyHandler(t *testing.T, release func(), do func() error) error {
	t.Helper()
	id := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		id <- goroutineID()
		done <- do()
	}()
	g := <-id
	for deadline := time.Now().Add(time.Minute); !inBusyHandler(g); {
		select {
		case err := <-done:
			t.Fatalf("returned %v before it waited for the lock", err)
		case <-time.After(time.Millisecond): // poll interval: until it sleeps in the busy handler (the loop's deadline bounds it)
		}
		if time.Now().After(deadline) {
			t.Fatal("did not wait in the busy handler for a minute")
		}
	}
	release()
	return <-done
}

// long is a busy timeout no test waits out: a statement given it waits until
// the lock it met is gone.
const long = 10 * time.Minute

// TestOpenLockedFile opens a file another connection or process holds a
// lock on: Open must give up after the busy timeout with an error that names
// the file, and, given a longer one, wait and succeed once the lock is gone.
func TestOpenLockedFile(t *testing.T) {
	t.Parallel()
	const short = 300 * time.Millisecond
	walFile := func(t *testing.T, path string) {
		s, err := sqlite.Open(context.Background(), path) // leaves the file in WAL mode
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, path string)
		hold  func(t *testing.T, path string) func()
		wait  time.Duration // the busy timeout; 0 leaves the default
	}{{
		name: "new file, exclusive transaction in another connection",
		hold: func(t *testing.T, path string) func() {
			return holdInConn(t, path, "BEGIN EXCLUSIVE", "CREATE TABLE held (x)")
		},
	}, {
		name:  "WAL file, exclusive transaction in another connection",
		setup: walFile,
		hold: func(t *testing.T, path string) func() {
			return holdInConn(t, path, "BEGIN EXCLUSIVE", "CREATE TABLE held (x)")
		},
	}, {
		// A reader of a file in rollback-journal mode keeps the journal
		// mode from changing to WAL.
		name: "rollback-journal file, read transaction in another connection",
		setup: func(t *testing.T, path string) {
			holdInConn(t, path, "CREATE TABLE held (x)")()
		},
		hold: func(t *testing.T, path string) func() {
			return holdInConn(t, path, "BEGIN", "SELECT count(*) FROM held")
		},
	}, {
		name:  "WAL file, exclusive locking mode in another connection",
		setup: walFile,
		hold: func(t *testing.T, path string) func() {
			return holdInConn(t, path, "PRAGMA locking_mode = EXCLUSIVE", "BEGIN EXCLUSIVE", "CREATE TABLE held (x)", "COMMIT")
		},
	}, {
		name:  "WAL file, exclusive transaction in another process, default busy timeout",
		setup: walFile,
		hold:  holdInChild,
		wait:  sqlite.BusyTimeout,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "sluice.db")
			if tc.setup != nil {
				tc.setup(t, path)
			}
			release := tc.hold(t, path)
			dsn := path + fmt.Sprintf("?_pragma=busy_timeout(%d)", short.Milliseconds())
			wait := short
			if tc.wait != 0 {
				dsn, wait = path, tc.wait
			}
			start := time.Now()
			s, err := sqlite.Open(ctx, dsn)
			took := time.Since(start)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded on a file another process holds a lock on")
			}
			checkLocked(t, err, path, wait, took)
			// With a busy timeout longer than the test, Open waits for the
			// lock and succeeds once it is gone.
			err = waitsInBusyHandler(t, release, func() error {
				s, err := sqlite.Open(ctx, path+fmt.Sprintf("?_pragma=busy_timeout(%d)", long.Milliseconds()))
				if err == nil {
					s.Close()
				}
				return err
			})
			if err != nil {
				t.Fatalf("Open once the lock is gone: %v", err)
			}
		})
	}
}

// TestWriteWhileLocked takes the lock after Open: a write waits the busy
// timeout and fails with a *LockedError, a read goes on (WAL lets readers
// past a writer), a write with a longer busy timeout waits for the lock and
// succeeds once it is gone, and so do the others then.
func TestWriteWhileLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const wait = 300 * time.Millisecond
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := sqlite.Open(ctx, path+fmt.Sprintf("?_pragma=busy_timeout(%d)", wait.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	patient, err := sqlite.Open(ctx, path+fmt.Sprintf("?_pragma=busy_timeout(%d)", long.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close()
	at := time.UnixMilli(1_700_000_000_000).UTC()
	c := store.Charge{ID: "r1", Flow: "f", At: at, Cost: governor.Cost{Requests: 1}}
	release := holdInChild(t, path)
	start := time.Now()
	err = s.UpsertCharges(ctx, "groq", []store.Charge{c})
	checkLocked(t, err, path, wait, time.Since(start))
	if _, err := s.PruneCharges(ctx, "groq", at.Add(time.Hour)); !errors.As(err, new(*sqlite.LockedError)) {
		t.Errorf("PruneCharges while locked: %v, want a *sqlite.LockedError", err)
	}
	// The engine's writes are explained the same way; a count is a row read
	// back from a write.
	if _, err := s.CountStart(ctx, "f", "", time.Minute, 1, at); !errors.As(err, new(*sqlite.LockedError)) || !strings.HasPrefix(err.Error(), "count rate limit of f: ") {
		t.Errorf("CountStart while locked: %v, want a *sqlite.LockedError after what failed", err)
	}
	if err := s.RecordDroppedEvent(ctx, store.DroppedEvent{Function: "f", EventID: "e1", At: at}); !errors.As(err, new(*sqlite.LockedError)) {
		t.Errorf("RecordDroppedEvent while locked: %v, want a *sqlite.LockedError", err)
	}
	end := store.RunEnd{RunID: "f:e1", Status: "cancelled", EndedAt: at}
	if err := s.RecordCancel(ctx, end); !errors.As(err, new(*sqlite.LockedError)) {
		t.Errorf("RecordCancel while locked: %v, want a *sqlite.LockedError", err)
	}
	if err := s.RecordRunEnd(ctx, end); !errors.As(err, new(*sqlite.LockedError)) {
		t.Errorf("RecordRunEnd while locked: %v, want a *sqlite.LockedError", err)
	}
	// So are the backfills', in a transaction of the store's own.
	if _, err := s.AddItems(ctx, "titles", []string{"k1"}, at, ""); !errors.As(err, new(*sqlite.LockedError)) || !strings.HasPrefix(err.Error(), "add items to titles: ") {
		t.Errorf("AddItems while locked: %v, want a *sqlite.LockedError after what failed", err)
	}
	if err := s.StartJob(ctx, "titles", at); !errors.As(err, new(*sqlite.LockedError)) {
		t.Errorf("StartJob while locked: %v, want a *sqlite.LockedError", err)
	}
	if _, err := s.Charges(ctx, "groq", time.Time{}); err != nil {
		t.Errorf("Charges while another process writes: %v", err)
	}
	if _, err := s.DroppedEvents(ctx, "", 10); err != nil {
		t.Errorf("DroppedEvents while another process writes: %v", err)
	}
	if _, err := s.RunEnds(ctx, []string{"f:e1"}); err != nil {
		t.Errorf("RunEnds while another process writes: %v", err)
	}
	err = waitsInBusyHandler(t, release, func() error {
		return patient.UpsertCharges(ctx, "groq", []store.Charge{c})
	})
	if err != nil {
		t.Fatalf("UpsertCharges once the lock is gone: %v", err)
	}
	if err := s.UpsertCharges(ctx, "groq", []store.Charge{c}); err != nil {
		t.Fatalf("UpsertCharges once the lock is gone: %v", err)
	}
	if ok, err := s.CountStart(ctx, "f", "", time.Minute, 1, at); err != nil || !ok {
		t.Fatalf("CountStart once the lock is gone: within %v, %v; want the first start within", ok, err)
	}
	if n, err := s.AddItems(ctx, "titles", []string{"k1"}, at, ""); err != nil || n != 1 {
		t.Fatalf("AddItems once the lock is gone: %d, %v; want 1 added", n, err)
	}
}

func TestLockedLeavesOtherErrors(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.DB().Exec("SELECT * FROM no_such_table")
	if err == nil {
		t.Fatal("query of a missing table succeeded")
	}
	if got := s.Locked(err); got != err {
		t.Errorf("Locked(%v) = %v, want it unchanged", err, got)
	}
	if s.Locked(nil) != nil {
		t.Error("Locked(nil) != nil")
	}
}
