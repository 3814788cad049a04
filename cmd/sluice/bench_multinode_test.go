package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/sluice-dev/sluice/internal/benchcmd"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// The multinode bench starts its nodes as this binary with
// benchcmd.MultinodeNodeEnv set: "serve --node NAME …". Under go test the
// binary is the test binary, so a node is dispatched here, before the tests
// start (the test files' init functions run after every command has
// registered itself). The node stops on SIGINT or SIGTERM as sluice's main
// does.
func init() {
	if os.Getenv(benchcmd.MultinodeNodeEnv) == "" {
		return
	}
	if commands["serve"] == nil {
		panic("sluice: the serve command is not registered when the multinode bench's node starts")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	code := runMain(ctx, env, os.Args[1:])
	stop()
	os.Exit(code)
}

// TestBenchMultinode runs three nodes on one key and kills one midway for
// good, and checks what must hold: the live nodes took over the dead one's
// unfinished runs, the provider refused nothing, no window of any limit
// held more than the limit, every run completed and saved once, and the
// cluster used the bottleneck limit about as well as a single node did on
// the same work. The limits make otpm the bottleneck,
// with about 1.7 minutes of its allowance of work: under a rolling minute
// window the work cannot end before the first minute's charges age out, so
// each of the two runs takes a little over a minute.
func TestBenchMultinode(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("two runs of over a minute each")
	}
	rep := benchMultinode(t, "--nodes", "3", "--kill", "1", "--events", "120",
		"--limits", "rpm=1000,tpm=1000000,otpm=15500", "--timeout", "4m")
	if rep.Nodes != 3 || rep.Killed != 1 || rep.Events != 120 {
		t.Errorf("nodes %d, killed %d, events %d: want 3, 1, 120", rep.Nodes, rep.Killed, rep.Events)
	}
	if rep.Requests < 2*rep.Events || rep.SingleNodeRequests < 2*rep.Events {
		t.Errorf("the simulator answered %d calls of the cluster and %d of the single node, want at least two per document (%d)",
			rep.Requests, rep.SingleNodeRequests, 2*rep.Events)
	}
	if rep.SingleNodeProviderRejections != 0 {
		t.Errorf("the provider refused %d calls of the single node: want none", rep.SingleNodeProviderRejections)
	}
	if rep.ProviderRejections != 0 {
		t.Errorf("the provider refused %d calls of the cluster (%v): want none", rep.ProviderRejections, rep.ProviderRejectionsByLimit)
	}
	// Runs wait for OTPM, so at the kill each node has runs under way.
	if rep.AdoptedRuns == 0 {
		t.Errorf("the live nodes handed none of the killed node's runs back to their queues")
	}
	if rep.MaxAggregateRatio > 1 || rep.MaxAggregateRatio <= 0 {
		t.Errorf("max aggregate ratio %v (%s): want in (0, 1]", rep.MaxAggregateRatio, rep.MaxAggregateLimit)
	}
	if rep.Lost != 0 || rep.Duplicates != 0 || rep.Stuck != 0 || rep.RebilledFinished != 0 {
		t.Errorf("lost %d, duplicates %d, stuck %d, re-billed after their record %d: want none (%v)",
			rep.Lost, rep.Duplicates, rep.Stuck, rep.RebilledFinished, rep.StuckRuns)
	}
	if rep.Bottleneck != "otpm" {
		t.Errorf("bottleneck %s, want otpm", rep.Bottleneck)
	}
	// The limit, not the machine, bounds both runs: a minute's allowance
	// of output tokens is spent at once, the rest when it ages out.
	if rep.SingleNodeMaxAggregateRatio < 0.95 {
		t.Errorf("the single node's fullest otpm window held %v of the limit: the limit did not bind", rep.SingleNodeMaxAggregateRatio)
	}
	if rep.Utilization < 0.9*rep.SingleNodeUtilization {
		t.Errorf("utilization %v, want at least 0.9 × the single node's %v", rep.Utilization, rep.SingleNodeUtilization)
	}
}

// A rolling deploy on PostgreSQL loses nothing: two nodes, each stopped in
// turn with SIGTERM and started again as a new build of the binary (its
// hash differs) while documents keep arriving. Every run completes once:
// a stop pauses the runs in flight instead of cancelling them, and the new
// build records runs under the same version as the old one, so it resumes
// them. Each stop ends within its grace plus 2s.
func TestBenchMultinodeRollingDeploy(t *testing.T) {
	t.Parallel()
	rep := benchMultinode(t, "--nodes", "2", "--kill", "0", "--rolling", "--events", "400",
		"--latency", "200ms", "--limits", "rpm=20000,tpm=10000000,otpm=1000000", "--stop-grace", "10s", "--timeout", "4m")
	if rep.Rolled != 2 || rep.RunsAtStops < 2 {
		t.Errorf("%d nodes rolled with %d runs under way at their stops, want 2 with some on each", rep.Rolled, rep.RunsAtStops)
	}
	if rep.Lost != 0 || rep.Duplicates != 0 || rep.Stuck != 0 || rep.RebilledFinished != 0 {
		t.Errorf("lost %d, duplicates %d, stuck %d, re-billed after their record %d: want none (%v)",
			rep.Lost, rep.Duplicates, rep.Stuck, rep.RebilledFinished, rep.StuckRuns)
	}
	if rep.Requests < 2*rep.Events {
		t.Errorf("the simulator answered %d calls, want at least two per document (%d)", rep.Requests, 2*rep.Events)
	}
	if rep.MaxStopSeconds > 12 {
		t.Errorf("the longest stop took %.2fs, want at most the grace (10s) plus 2s", rep.MaxStopSeconds)
	}
}

// benchMultinode runs the multinode bench with args on a fresh database
// server's (the bench makes its databases on it) and returns its report;
// a non-zero exit fails the test.
func benchMultinode(t *testing.T, args ...string) benchcmd.MultinodeReport {
	t.Helper()
	db := testenv.Postgres(t)
	var out, errb bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: os.Getenv}
	code := runMain(context.Background(), env, append([]string{"bench", "multinode", "--db", db, "--json"}, args...))
	var rep benchcmd.MultinodeReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d: %s\n%s: %v", code, errb.String(), out.String(), err)
	}
	t.Logf("%s", bytes.TrimSpace(out.Bytes()))
	if code != 0 {
		t.Errorf("exit %d: %s", code, errb.String())
	}
	return rep
}
