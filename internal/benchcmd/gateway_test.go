package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
)

// TestBenchGateway runs a short measurement and checks that every path
// answered every request and that the report holds the figures.
func TestBenchGateway(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := runBench(context.Background(), env, []string{"bench", "gateway", "--rate", "40", "--duration", "500ms",
		"--concurrency", "2", "--throughput-duration", "200ms", "--rounds", "1", "--json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep gatewayReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	for name, s := range map[string]latencyStats{"direct": rep.Direct, "proxy": rep.Proxy, "gateway": rep.Gateway} {
		if s.Requests < 15 || s.Errors != 0 || s.P50US <= 0 || s.P99US < s.P50US {
			t.Errorf("%s: %+v", name, s)
		}
	}
	if rep.ProxyRPS <= 0 || rep.GatewayRPS <= 0 || rep.ThroughputRatio != rep.GatewayRPS/rep.ProxyRPS {
		t.Errorf("throughput %+v", rep)
	}
	// One round: its ratio is the median and the ratio of the means.
	if len(rep.ThroughputRatios) != 1 || rep.ThroughputRatios[0] != rep.ThroughputRatio || rep.ThroughputRatioMedian != rep.ThroughputRatio {
		t.Errorf("ratios %v, median %v, want [%v] and %[3]v", rep.ThroughputRatios, rep.ThroughputRatioMedian, rep.ThroughputRatio)
	}
}

// TestThroughputRatios: each round's ratio is of the same round's two
// sides, and the median is the middle one, or the mean of the middle two.
func TestThroughputRatios(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		proxy, gateway, ratios []float64
		median                 float64
	}{
		{[]float64{100}, []float64{95}, []float64{0.95}, 0.95},
		// A slow round on both sides: the mean ratio would be 850/1000,
		// each round's is at least 0.8, the median 0.9.
		{[]float64{1000, 500, 1000}, []float64{900, 400, 1000}, []float64{0.9, 0.8, 1}, 0.9},
		{[]float64{100, 100, 100, 100}, []float64{90, 100, 96, 80}, []float64{0.9, 1, 0.96, 0.8}, 0.93},
	} {
		ratios, med := throughputRatios(tc.proxy, tc.gateway)
		if !slices.EqualFunc(ratios, tc.ratios, sameRatio) || !sameRatio(med, tc.median) {
			t.Errorf("proxy %v, gateway %v: ratios %v, median %v; want %v, %v", tc.proxy, tc.gateway, ratios, med, tc.ratios, tc.median)
		}
	}
}

func sameRatio(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestBenchGatewaySaturates: at a rate no path can answer with one request
// open at a time (a request due every 3 µs, each a round trip over HTTP),
// the latency phase holds at most --max-open requests of a path open and
// reports the rest as unsent, rather than opening one more connection for
// each until the process runs out of files.
func TestBenchGatewaySaturates(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := runBench(context.Background(), env, []string{"bench", "gateway", "--rate", "100000", "--duration", "300ms",
		"--max-open", "1", "--concurrency", "1", "--throughput-duration", "100ms", "--rounds", "1", "--json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep gatewayReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	due := int64(100000 * 0.3)
	for name, s := range map[string]latencyStats{"direct": rep.Direct, "proxy": rep.Proxy, "gateway": rep.Gateway} {
		if s.Errors != 0 || s.Unsent == 0 || s.Requests == 0 || s.Requests+s.Unsent < due-30 || s.Requests+s.Unsent > due+30 {
			t.Errorf("%s: %+v; want about %d due (the interval is cut to the nanosecond), some sent without error, the rest unsent", name, s, due)
		}
	}
	if rep.MaxOpen != 1 {
		t.Errorf("max_open %d, want 1", rep.MaxOpen)
	}
}
