package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
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
}

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
