package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
)

// The dashboard bench at a tiny size: it seeds runs, items and samples
// through the app, and every path it times answered 200 (any other answer
// fails the bench) with every figure measured.
func TestBenchDashboard(t *testing.T) {
	t.Parallel()
	for _, tc := range benchDatabases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const runs, items, samples = 50, 500, 3
			args := append([]string{"bench", "dashboard", "--runs", "50", "--items", "500", "--samples", "3", "--json"}, tc.db(t)...)
			var out, errb bytes.Buffer
			env := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: os.Getenv}
			if code := runBench(context.Background(), env, args); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var rep scaleReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%s: %v", out.String(), err)
			}
			if rep.DatabaseKind != tc.kind || rep.Samples != samples || rep.Dropped < 1 || rep.HistorySamples != len(scaleFlows)*24*60 {
				t.Fatalf("report %+v", rep)
			}
			// Runs 10, 20, 30 and 40 fail; the first, the rate-limited
			// function's, completes.
			if rep.Runs["completed"] != runs-4 || rep.Runs["failed"] != 4 || len(rep.Runs) != 2 {
				t.Errorf("runs %v, want %d completed and 4 failed", rep.Runs, runs-4)
			}
			if rep.Items["saved"] != items-1 || rep.Items["parked"] != 1 || rep.Items["pending"] != 0 || rep.Items["rejected"] != 0 {
				t.Errorf("items %v, want %d saved and the one refused parked", rep.Items, items-1)
			}
			s := rep.Seeding
			if s.Method == "" || !(s.ItemsS > 0) || !(s.RunsS > 0) || !(s.TotalS >= s.ItemsS+s.RunsS) || s.DatabaseBytes <= 0 || !(s.ServeStartS > 0) {
				t.Errorf("seeding %+v: want every figure measured", s)
			}
			kinds := map[string]int{}
			missed := 0
			for _, p := range rep.Paths {
				kinds[p.Kind]++
				want := float64(scalePageTargetMS)
				if p.Kind == "metrics" {
					want = scaleMetricsTargetMS
				}
				if p.Samples != samples || !(p.P50 > 0) || p.P95 < p.P50 || p.Max < p.P95 || p.TargetMS != want || p.Holds != (p.P95 <= want) || p.Label == "" {
					t.Errorf("%s: %+v: want %d samples, 0 < p50 ≤ p95 ≤ max, target %v", p.Path, p, samples, want)
				}
				if !p.Holds {
					missed++
				}
			}
			if kinds["page"] != 12 || kinds["json"] != 16 || kinds["metrics"] != 1 || rep.Missed != missed {
				t.Errorf("paths by kind %v, missed %d (counted %d): want 12 pages, 16 JSON endpoints, /metrics", kinds, rep.Missed, missed)
			}
			for _, want := range []string{"/", "/flows", "/flows/" + scaleBackfill, "/runs?status=failed", "/plan", "/send", "/v1/runs", "/v1/flows", "/v1/dropped", "/readyz", "/metrics",
				"/v1/runs?function=" + scaleFail + "&reason=no+text+to+summarize&status=failed", "/v1/runs?reason=no+text+to+summarize"} {
				found := false
				for _, p := range rep.Paths {
					found = found || p.Path == want
				}
				if !found {
					t.Errorf("%s was not timed", want)
				}
			}
			deep := 0
			for _, p := range rep.Paths {
				if strings.Contains(p.Path, "before_at=") {
					deep++
				}
			}
			if deep != 1 {
				t.Errorf("%d deep pages of the items timed, want 1", deep)
			}
		})
	}
}

// The text report names every path with its verdict.
func TestBenchDashboardText(t *testing.T) {
	var out bytes.Buffer
	printScaleReport(&out, scaleReport{DatabaseKind: "sqlite", Samples: 2, Missed: 1, Paths: []scalePath{
		{Path: "/", Label: "/", Kind: "page", P50: 1, P95: 2, Max: 3, Samples: 2, TargetMS: 300, Holds: true},
		{Path: "/metrics", Label: "/metrics", Kind: "metrics", P50: 90, P95: 120, Max: 130, Samples: 2, TargetMS: 100},
	}})
	for _, want := range []string{"holds", "MISSED", "1 of 2 targets missed", "/metrics"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
