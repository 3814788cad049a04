package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// benchDatabases are the databases a bench runs on in tests: db gives its
// flags, kind what its report calls it.
var benchDatabases = []struct {
	name string
	db   func(t *testing.T) []string
	kind string
}{
	{"sqlite", func(*testing.T) []string { return nil }, "sqlite"},
	{"postgres", func(t *testing.T) []string { return []string{"--db", testenv.Postgres(t)} }, "postgres"},
}

func TestBenchEngine(t *testing.T) {
	t.Parallel()
	for _, tc := range benchDatabases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.db(t)
			args := append([]string{"bench", "engine", "--runs", "20", "--rounds", "2", "--json"}, db...)
			// Twice on one database: the second invocation's runs must be
			// new runs, not the first one's found again.
			for range 2 {
				var out, errb bytes.Buffer
				env := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: os.Getenv}
				if code := runBench(context.Background(), env, args); code != 0 {
					t.Fatalf("exit %d: %s", code, errb.String())
				}
				var rep engineReport
				if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
					t.Fatalf("%s: %v", out.String(), err)
				}
				if rep.Runs != 20 || rep.Rounds != 2 || rep.DatabaseKind != tc.kind || rep.SluiceRunsPS <= 0 || rep.DBOSRunsPS <= 0 || rep.Ratio <= 0 {
					t.Fatalf("report %+v", rep)
				}
				if len(rep.Ratios) != 2 || rep.RatioMedian != median(rep.Ratios) || rep.Ratios[0] <= 0 || rep.Ratios[1] <= 0 {
					t.Fatalf("ratios %v, median %v: want one positive ratio a round and their median", rep.Ratios, rep.RatioMedian)
				}
				// Bare DBOS on sluice's handle is a side on SQLite only.
				if sqlite := tc.kind == "sqlite"; sqlite != (rep.SameHandleRunsPS > 0) || sqlite != (len(rep.SameHandleRatios) == 2) ||
					rep.SameHandleRatioMedian != median(rep.SameHandleRatios) {
					t.Fatalf("same-handle side: %v runs/s, ratios %v, median %v", rep.SameHandleRunsPS, rep.SameHandleRatios, rep.SameHandleRatioMedian)
				}
			}
			if len(db) == 0 {
				return
			}
			conn, err := pgx.Connect(context.Background(), db[1])
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			for _, name := range []string{"three-steps", "%benchWorkflow"} {
				var n int
				if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM dbos.workflow_status WHERE name LIKE $1 AND status = 'SUCCESS'`, name).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 2*2*20 {
					t.Errorf("%d runs of %s completed on the database, want 80 (two invocations of 2 rounds of 20)", n, name)
				}
			}
		})
	}
}
