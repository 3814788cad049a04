package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestMain lets the crash and backfill benches re-execute this test binary
// as their worker. The worker stops on SIGINT or SIGTERM as sluice's main
// does.
func TestMain(m *testing.M) {
	env := &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	for variable, bench := range map[string]string{crashWorkerEnv: "crash", backfillWorkerEnv: "backfill"} {
		if os.Getenv(variable) != "" {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			context.AfterFunc(ctx, stop)
			code := runBench(ctx, env, []string{"bench", bench})
			stop()
			os.Exit(code)
		}
	}
	code := m.Run()
	if upgradeBuilds.dir != "" {
		os.RemoveAll(upgradeBuilds.dir)
	}
	os.Exit(code)
}

func TestBenchCrashSplitsRebills(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// by(w, ms...) are calls worker w began at those milliseconds.
	by := func(w int, ms ...int) []sentCall {
		var cs []sentCall
		for _, m := range ms {
			cs = append(cs, sentCall{at(m), w})
		}
		return cs
	}
	stop := func(ms, w int, kind string) crashBreak { return crashBreak{at(ms), w, kind} }
	a, b := stepKey{"doc-000001", "summarize"}, stepKey{"doc-000002", "classify"}
	for _, tc := range []struct {
		name               string
		calls              map[stepKey][]sentCall
		recorded           map[stepKey]time.Time
		breaks             []crashBreak
		inFlight, finished int
		perBreak           []int
	}{
		{"one call per step is no re-bill",
			map[stepKey][]sentCall{a: by(0, 0), b: by(0, 5)}, map[stepKey]time.Time{a: at(20), b: at(30)}, nil, 0, 0, []int{}},
		{"a call cut by a kill is in flight",
			map[stepKey][]sentCall{a: append(by(1, 100), by(0, 0)...), b: append(by(0, 10), by(1, 120)...)}, map[stepKey]time.Time{a: at(130), b: at(140)},
			[]crashBreak{stop(50, 0, breakKill)}, 2, 0, []int{2}},
		{"cuts are charged to the stop of the worker that sent them",
			map[stepKey][]sentCall{a: slices.Concat(by(0, 0), by(1, 100), by(2, 200)), b: slices.Concat(by(0, 10), by(2, 300))},
			map[stepKey]time.Time{a: at(230), b: at(330)},
			[]crashBreak{stop(50, 0, breakKill), stop(150, 1, breakGraceful)}, 3, 0, []int{2, 1}},
		{"a call read after its worker's kill is still that kill's",
			// Worker 0's call reached the simulator at 60, after the kill
			// at 50 and while worker 1 ran; worker 1's stop cut nothing.
			map[stepKey][]sentCall{a: slices.Concat(by(0, 60), by(2, 200))}, map[stepKey]time.Time{a: at(230)},
			[]crashBreak{stop(50, 0, breakKill), stop(150, 1, breakGraceful)}, 1, 0, []int{1, 0}},
		{"a database restart cuts the calls begun before it",
			map[stepKey][]sentCall{a: by(0, 10, 100), b: by(0, 40, 150)}, map[stepKey]time.Time{a: at(130), b: at(160)},
			[]crashBreak{stop(30, 0, breakDBRestart), stop(200, 0, breakKill)}, 2, 0, []int{1, 1}},
		{"a stop that cut nothing counts zero",
			map[stepKey][]sentCall{a: slices.Concat(by(0, 0), by(2, 200))}, map[stepKey]time.Time{a: at(230)},
			[]crashBreak{stop(50, 0, breakKill), stop(100, 1, breakKill)}, 1, 0, []int{1, 0}},
		{"a call after the record is finished",
			map[stepKey][]sentCall{a: slices.Concat(by(0, 0), by(1, 100))}, map[stepKey]time.Time{a: at(30)},
			[]crashBreak{stop(50, 0, breakKill)}, 0, 1, []int{0}},
		{"the record's millisecond is not after it",
			map[stepKey][]sentCall{a: by(0, 0, 30)}, map[stepKey]time.Time{a: at(30)}, nil, 1, 0, []int{}},
		{"an unrecorded step's calls but one are in flight",
			map[stepKey][]sentCall{a: slices.Concat(by(0, 0), by(1, 100))}, nil, []crashBreak{stop(50, 0, breakKill)}, 1, 0, []int{1}},
		{"a cut call of a worker never stopped is in flight only",
			map[stepKey][]sentCall{a: by(1, 100, 110)}, map[stepKey]time.Time{a: at(130)}, []crashBreak{stop(50, 0, breakKill)}, 1, 0, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, fin, per := splitRebills(tc.calls, tc.recorded, tc.breaks)
			if in != tc.inFlight || fin != tc.finished || !slices.Equal(per, tc.perBreak) {
				t.Fatalf("in flight %d, finished %d, per break %v; want %d, %d, %v", in, fin, per, tc.inFlight, tc.finished, tc.perBreak)
			}
		})
	}
}

// benchCrash runs the crash bench with small sizes and checks what must
// hold whatever happens: exactly the stops asked for, every run completed,
// none cancelled, nothing lost or saved twice, no step's call billed after
// it was recorded, no kill re-billing more calls than were in flight, no
// graceful stop cutting a call or lasting longer than its grace plus 2s
// (the bench's grace, 5s, is 250 times its calls' mean latency), and one
// version for every run.
func benchCrash(t *testing.T, args ...string) crashReport {
	t.Helper()
	const stops, concurrency = crashTestStops, 5
	var out, errb bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: os.Getenv}
	args = append([]string{"bench", "crash", "--stops", strconv.Itoa(stops), "--concurrency", strconv.Itoa(concurrency), "--json"}, args...)
	if code := runBench(context.Background(), env, args); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	var rep crashReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	t.Logf("%+v", rep)
	if rep.Stops != stops || rep.Kills+rep.GracefulStops != stops || rep.Concurrency != concurrency {
		t.Errorf("stops %d (kills %d, graceful %d) at concurrency %d, want %d at %d", rep.Stops, rep.Kills, rep.GracefulStops, rep.Concurrency, stops, concurrency)
	}
	if rep.Runs == 0 || rep.Completed != rep.Runs || rep.Lost != 0 || rep.DuplicateSaves != 0 || rep.Stuck != 0 || rep.Cancelled != 0 {
		t.Errorf("runs %d, completed %d, lost %d, duplicate saves %d, stuck %d, cancelled %d: want every run completed once",
			rep.Runs, rep.Completed, rep.Lost, rep.DuplicateSaves, rep.Stuck, rep.Cancelled)
	}
	if rep.RebilledFinished != 0 || rep.RebilledCalls != rep.RebilledInFlight || rep.RebilledCalls != rep.LLMCalls-2*rep.Completed {
		t.Errorf("re-billed %d = %d in flight + %d finished, of %d calls for %d runs: want none finished, the rest two per run",
			rep.RebilledCalls, rep.RebilledInFlight, rep.RebilledFinished, rep.LLMCalls, rep.Completed)
	}
	if rep.MaxRebilledPerKill > concurrency {
		t.Errorf("a kill re-billed %d calls, more than the %d runs in flight", rep.MaxRebilledPerKill, concurrency)
	}
	if rep.RebilledByGracefulStops != 0 {
		t.Errorf("graceful stops cut %d calls in flight, want none: every call ends within the grace", rep.RebilledByGracefulStops)
	}
	if limit := rep.StopGraceSeconds + termSlack.Seconds(); rep.MaxStopSeconds > limit {
		t.Errorf("a graceful stop took %.2fs, want at most %.2fs", rep.MaxStopSeconds, limit)
	}
	if len(rep.Versions) != 1 {
		t.Errorf("runs recorded under versions %q, want one", rep.Versions)
	}
	return rep
}

// crashTestStops is how many times the tests stop the worker.
const crashTestStops = 3

// upgradeBuilds are the builds of sluice the upgrade tests share, made once
// per test process and removed by TestMain.
var upgradeBuilds struct {
	once sync.Once
	dir  string
	err  error
}

// sharedBuilds returns the folder of crashTestStops+1 builds of sluice,
// each different (bench crash --builds).
func sharedBuilds(t *testing.T) string {
	t.Helper()
	upgradeBuilds.once.Do(func() {
		if upgradeBuilds.dir, upgradeBuilds.err = os.MkdirTemp("", "sluice-upgrade-test"); upgradeBuilds.err != nil {
			return
		}
		upgradeBuilds.err = buildSluice(context.Background(), "", upgradeBuilds.dir, crashTestStops+1)
	})
	if upgradeBuilds.err != nil {
		t.Fatal(upgradeBuilds.err)
	}
	return upgradeBuilds.dir
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
	databases := []struct {
		name string
		url  func(t testing.TB) string
	}{
		{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "crash.db") }},
		{"postgres", testenv.Postgres},
	}
	for _, db := range databases {
		t.Run("graceful/"+db.name, func(t *testing.T) {
			t.Parallel()
			rep := benchCrash(t, "--db", db.url(t), "--stop", "term")
			if rep.GracefulStops != crashTestStops || rep.Kills != 0 {
				t.Errorf("%d graceful stops and %d kills, want %d and 0", rep.GracefulStops, rep.Kills, crashTestStops)
			}
		})
		// Seed 4 draws a kill, a graceful stop and a kill.
		t.Run("upgrade/"+db.name, func(t *testing.T) {
			t.Parallel()
			rep := benchCrash(t, "--db", db.url(t), "--stop", "mix", "--seed", "4", "--upgrade", "--builds", sharedBuilds(t))
			if rep.Kills == 0 || rep.GracefulStops == 0 {
				t.Errorf("%d kills and %d graceful stops, want some of each", rep.Kills, rep.GracefulStops)
			}
			if !rep.Upgrade || rep.Builds != crashTestStops+1 || !slices.Equal(rep.Versions, []string{"bench-upgrade"}) {
				t.Errorf("upgrade %t, %d builds, versions %q: want every worker a build of its own, every run under bench-upgrade",
					rep.Upgrade, rep.Builds, rep.Versions)
			}
		})
	}
	// Without a declared version, every build derives the same one from
	// the app's functions: a run one build left, the next one resumes.
	t.Run("upgrade/default version", func(t *testing.T) {
		t.Parallel()
		rep := benchCrash(t, "--db", filepath.Join(t.TempDir(), "crash.db"), "--stop", "mix", "--seed", "4", "--upgrade", "--builds", sharedBuilds(t), "--app-version", "")
		if rep.Builds != crashTestStops+1 || rep.AppVersion != "" || len(rep.Versions) != 1 || rep.Versions[0] == "bench-upgrade" {
			t.Errorf("%d builds, declared version %q, versions %q: want the default version, one for every build", rep.Builds, rep.AppVersion, rep.Versions)
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
