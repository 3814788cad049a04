package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
)

// TestBenchSoak runs a short soak on SQLite: every run completes despite the
// faults, and no series grows.
//
// Not parallel: the heap, goroutines and descriptors it samples are the
// whole test binary's, and the package's other tests (benches of their own)
// would be counted as the soak's growth. Go runs the sequential tests before
// it releases the parallel ones, so this one has the process to itself.
func TestBenchSoak(t *testing.T) {
	var out, errb bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: os.Getenv}
	code := runBench(context.Background(), env, []string{"bench", "soak",
		"--duration", "3m", "--warmup", "1m", "--speed", "60", "--rate", "20", "--sample-every", "500ms",
		// Deadlines compressed 60 times would be shorter than what a
		// loaded CI machine takes under -race; the faults still come.
		"--first-byte", "2m", "--run-timeout", "1h",
		"--db", filepath.Join(t.TempDir(), "soak.db"), "--json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep soakReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	rep.Samples = nil
	t.Logf("%+v", rep)
	if rep.Sent != 80 || rep.Completed != rep.Sent || rep.Failed != 0 {
		t.Errorf("sent %d, completed %d, failed %d %q: want 80 sent, all completed", rep.Sent, rep.Completed, rep.Failed, rep.Failures)
	}
	var faults int64
	for _, n := range rep.LLMFaults {
		faults += n
	}
	if faults == 0 {
		t.Errorf("no faults injected in %d calls: the soak tests nothing", rep.LLMRequests)
	}
	if len(rep.Series) != 4 {
		t.Fatalf("series %+v: want heap, goroutines, descriptors and connections", rep.Series)
	}
	for _, s := range rep.Series {
		if s.First <= 0 || s.Max < s.Last || !s.Flat {
			t.Errorf("series %+v: want measured and flat", s)
		}
	}
	if !rep.Flat {
		t.Error("report not flat")
	}
}

func TestBenchSoakRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limits", "rpm=10,rpd=1000"}, "rpd counts over a day"},
		{[]string{"--speed", "0.5"}, "--speed"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--warmup", "2h"}, "--warmup"},
		{[]string{"--rate", "10000", "--duration", "24h"}, "at most a million"},
		{[]string{"--faults", "timeout=2"}, "--faults"},
		{[]string{"--first-byte", "0s"}, "--first-byte"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(append([]string{"bench", "soak"}, tc.args...)...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q: want a failure naming %q", code, errOut, tc.want)
			}
		})
	}
}
