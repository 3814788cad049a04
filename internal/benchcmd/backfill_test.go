package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
)

// The backfill bench on a few items: both sides process every item once,
// in workers of their own, and every figure is measured.
func TestBenchBackfill(t *testing.T) {
	t.Parallel()
	for _, tc := range benchDatabases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const items, rounds = 200, 2
			args := append([]string{"bench", "backfill", "--items", "200", "--batch", "7", "--rounds", "2", "--json"}, tc.db(t)...)
			var out, errb bytes.Buffer
			env := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: os.Getenv}
			if code := runBench(context.Background(), env, args); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var rep backfillReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%s: %v", out.String(), err)
			}
			if rep.Items != items || rep.Batch != 7 || rep.Rounds != rounds || rep.DatabaseKind != tc.kind || rep.Concurrency != 10 || !(rep.Ratio > 0) {
				t.Fatalf("report %+v", rep)
			}
			// Each round's ratio, and their median between the two.
			if len(rep.Ratios) != rounds || !(rep.Ratios[0] > 0) || !(rep.Ratios[1] > 0) ||
				rep.RatioMedian != (rep.Ratios[0]+rep.Ratios[1])/2 {
				t.Errorf("ratios %v, median %v: want one per round, and their median", rep.Ratios, rep.RatioMedian)
			}
			for name, s := range map[string]backfillSide{"sluice": rep.Sluice, "plain DBOS": rep.DBOS} {
				if s.Processed != items*rounds || s.Saves != items*rounds {
					t.Errorf("%s processed %d items and saved %d outputs, want each of %d items saved once in each of %d rounds", name, s.Processed, s.Saves, items, rounds)
				}
				if !(s.ItemsPerS > 0) || !(s.WallSeconds > 0) || !(s.StoreBytesPerItem > 0) || !(s.DatabaseBytesPerItem > 0) || !(s.PeakRSSMB > 0) {
					t.Errorf("%s: %+v: want every figure measured", name, s)
				}
			}
			for name, l := range map[string]latency{"stall check": rep.StallCheck, "GET /v1/flows": rep.Flows} {
				if l.Samples != rounds*backfillSamples || !(l.P50 > 0) || l.P95 < l.P50 {
					t.Errorf("%s: %+v: want %d samples, 0 < p50 ≤ p95", name, l, rounds*backfillSamples)
				}
			}
		})
	}
}
