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
