package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestMain lets the crash bench re-execute this test binary as its worker.
func TestMain(m *testing.M) {
	if os.Getenv(crashWorkerEnv) != "" {
		env := &cmdEnv{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
		os.Exit(runMain(context.Background(), env, []string{"bench", "crash"}))
	}
	os.Exit(m.Run())
}

func TestBenchCrash(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			url := filepath.Join(t.TempDir(), "crash.db")
			if db == "postgres" {
				url = testenv.Postgres(t)
			}
			var out, errb bytes.Buffer
			env := &cmdEnv{stdout: &out, stderr: &errb, getenv: os.Getenv}
			code := runMain(context.Background(), env, []string{"bench", "crash", "--kills", "10", "--events", "60", "--db", url, "--json"})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var rep crashReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%s: %v", out.String(), err)
			}
			t.Logf("%+v", rep)
			if rep.Runs != 60 || rep.Lost != 0 || rep.DuplicateSaves != 0 || rep.RebilledCalls > rep.Kills || rep.Completed != 60 {
				t.Fatalf("report %+v: want 60 runs completed, none lost, no duplicate saves, re-billed ≤ kills", rep)
			}
			if rep.Kills < 5 {
				t.Fatalf("only %d kills landed before the work finished: the workload is too small to test recovery", rep.Kills)
			}
		})
	}
}
