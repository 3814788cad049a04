package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestMain lets the crash and backfill benches re-execute this test binary
// as their worker.
func TestMain(m *testing.M) {
	env := &cmdEnv{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	for variable, bench := range map[string]string{crashWorkerEnv: "crash", backfillWorkerEnv: "backfill"} {
		if os.Getenv(variable) != "" {
			os.Exit(runMain(context.Background(), env, []string{"bench", bench}))
		}
	}
	os.Exit(m.Run())
}

func TestBenchCrashSplitsRebills(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b := stepKey{"doc-000001", "summarize"}, stepKey{"doc-000002", "classify"}
	for _, tc := range []struct {
		name                        string
		calls                       map[stepKey][]time.Time
		recorded                    map[stepKey]time.Time
		breaks                      []time.Time
		inFlight, finished, maxKill int
	}{
		{"one call per step is no re-bill",
			map[stepKey][]time.Time{a: {at(0)}, b: {at(5)}}, map[stepKey]time.Time{a: at(20), b: at(30)}, nil, 0, 0, 0},
		{"a call cut by a kill is in flight",
			map[stepKey][]time.Time{a: {at(100), at(0)}, b: {at(10), at(120)}}, map[stepKey]time.Time{a: at(130), b: at(140)},
			[]time.Time{at(50)}, 2, 0, 2},
		{"cuts are charged to the kill that followed them",
			map[stepKey][]time.Time{a: {at(0), at(100), at(200)}, b: {at(10), at(300)}}, map[stepKey]time.Time{a: at(230), b: at(330)},
			[]time.Time{at(50), at(150)}, 3, 0, 2},
		{"a call after the record is finished",
			map[stepKey][]time.Time{a: {at(0), at(100)}}, map[stepKey]time.Time{a: at(30)}, []time.Time{at(50)}, 0, 1, 0},
		{"the record's millisecond is not after it",
			map[stepKey][]time.Time{a: {at(0), at(30)}}, map[stepKey]time.Time{a: at(30)}, nil, 1, 0, 0},
		{"an unrecorded step's calls but one are in flight",
			map[stepKey][]time.Time{a: {at(0), at(100)}}, nil, []time.Time{at(50)}, 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, fin, mk := splitRebills(tc.calls, tc.recorded, tc.breaks)
			if in != tc.inFlight || fin != tc.finished || mk != tc.maxKill {
				t.Fatalf("in flight %d, finished %d, max per kill %d; want %d, %d, %d", in, fin, mk, tc.inFlight, tc.finished, tc.maxKill)
			}
		})
	}
}

// benchCrash runs the crash bench with small sizes and checks what must
// hold whatever happens: exactly the kills asked for, every run completed,
// nothing lost or saved twice, no step's call billed after it was recorded,
// and no kill re-billing more calls than were in flight.
func benchCrash(t *testing.T, args ...string) crashReport {
	t.Helper()
	const kills, concurrency = 3, 5
	var out, errb bytes.Buffer
	env := &cmdEnv{stdout: &out, stderr: &errb, getenv: os.Getenv}
	args = append([]string{"bench", "crash", "--kills", strconv.Itoa(kills), "--concurrency", strconv.Itoa(concurrency), "--json"}, args...)
	if code := runMain(context.Background(), env, args); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	var rep crashReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	t.Logf("%+v", rep)
	if rep.Kills != kills || rep.Concurrency != concurrency {
		t.Errorf("kills %d at concurrency %d, want %d at %d", rep.Kills, rep.Concurrency, kills, concurrency)
	}
	if rep.Runs == 0 || rep.Completed != rep.Runs || rep.Lost != 0 || rep.DuplicateSaves != 0 || rep.Stuck != 0 {
		t.Errorf("runs %d, completed %d, lost %d, duplicate saves %d, stuck %d: want every run completed once", rep.Runs, rep.Completed, rep.Lost, rep.DuplicateSaves, rep.Stuck)
	}
	if rep.RebilledFinished != 0 || rep.RebilledCalls != rep.RebilledInFlight || rep.RebilledCalls != rep.LLMCalls-2*rep.Completed {
		t.Errorf("re-billed %d = %d in flight + %d finished, of %d calls for %d runs: want none finished, the rest two per run",
			rep.RebilledCalls, rep.RebilledInFlight, rep.RebilledFinished, rep.LLMCalls, rep.Completed)
	}
	if rep.MaxRebilledPerKill > concurrency {
		t.Errorf("a kill re-billed %d calls, more than the %d runs in flight", rep.MaxRebilledPerKill, concurrency)
	}
	return rep
}

func TestBenchCrash(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		benchCrash(t, "--db", filepath.Join(t.TempDir(), "crash.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		benchCrash(t, "--db", testenv.Postgres(t))
	})
	t.Run("faults", func(t *testing.T) {
		t.Parallel()
		rep := benchCrash(t, "--db", testenv.Postgres(t), "--faults", "--first-byte", "500ms")
		if !rep.Faults || rep.FaultedCalls == 0 {
			t.Errorf("faults %t, %d faulted calls: want the simulator to fail some", rep.Faults, rep.FaultedCalls)
		}
	})
	t.Run("db restart", func(t *testing.T) {
		t.Parallel()
		url, restart := privatePostgres(t)
		rep := benchCrash(t, "--db", url, "--db-restart", "--db-restart-cmd", restart)
		if rep.DBRestarts != rep.Kills {
			t.Errorf("%d database restarts, want one per kill (%d)", rep.DBRestarts, rep.Kills)
		}
	})
}

// privatePostgres starts a PostgreSQL cluster of the test's own, so that it
// can be restarted without disturbing the shared server, and returns its URL
// and the shell command that restarts it. initdb refuses to run as root:
// then the cluster belongs to the postgres user.
func privatePostgres(t *testing.T) (url, restart string) {
	t.Helper()
	bin := "/usr/lib/postgresql/15/bin"
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		unavailablePostgres(t, "PostgreSQL 15's initdb is not installed in %s", bin)
	}
	dir, err := os.MkdirTemp("", "sluice-pg") // not t.TempDir: its parents are closed to other users
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	as := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) } // #nosec G204 -- fixed programs
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailablePostgres(t, "running as root and there is no postgres user to own the cluster: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		as = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...) // #nosec G204 -- fixed programs
		}
	}
	data, sock := filepath.Join(dir, "data"), dir
	if out, err := as(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	pgCtl := filepath.Join(bin, "pg_ctl")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", port, sock)
	if out, err := as(pgCtl, "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "start").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := as(pgCtl, "-D", data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	// pg_ctl restart starts the server again with the options it was started with.
	cmd := as(pgCtl, "-D", data, "-l", filepath.Join(dir, "log"), "-m", "fast", "-w", "restart")
	quoted := make([]string, len(cmd.Args))
	for i, a := range cmd.Args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), strings.Join(quoted, " ")
}

// unavailablePostgres skips the test, or fails it under CI.
func unavailablePostgres(t *testing.T, format string, args ...any) {
	t.Helper()
	if testenv.InCI() {
		t.Fatalf(format+" (CI=true: this test must run)", args...)
	}
	t.Skipf(format, args...)
}
