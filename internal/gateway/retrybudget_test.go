package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/internal/testenv/cookbook"
	"github.com/sluice-dev/sluice/llm"
)

// The retry budget runs: 200 requests on a key of 5 requests a minute, a
// 40-minute line, sent by the cookbook client through the gateway (its
// defaults: a 4-minute max wait) in compressed time.
const (
	budgetItems = 200
	budgetRPM   = 5
	budgetSpeed = 30 // a minute of the key is two seconds of the wall clock
)

// budgetCase is one way to run the cookbook client through the gateway.
type budgetCase struct {
	name        string
	rpm, tpm    float64 // the limits the client is told
	maxAttempts int
}

var budgetCases = []budgetCase{
	// (a) told the key's own limits, it never sends more than the key
	// admits: the line stays short and no request meets a 429.
	{name: "rate at the key's limits", rpm: budgetRPM, tpm: 1e6, maxAttempts: 5},
	// (b) told limits far above the key's, with the script's 5 attempts:
	// everything is sent at once, and a request's 5 tries of a 4-minute
	// wait (20 minutes) end before the 40-minute line does.
	{name: "limits high, 5 attempts", rpm: 10000, tpm: 1e7, maxAttempts: 5},
	// (c) the same with 12 attempts: 48 minutes of tries, longer than the
	// line.
	{name: "limits high, 12 attempts", rpm: 10000, tpm: 1e7, maxAttempts: 12},
}

// BenchmarkCookbookRetryBudget measures when a batch client finishes
// through the gateway: when it keeps to the key's limits or when its retry
// budget (tries × max wait) outlasts the line; with limits set high and the
// script's 5 tries, requests fail for good after the gateway's 429s, and
// the gateway names the client: the 429s that gave up. Its figures are in
// docs/gateway.md and docs/benchmarks.md:
//
//	go test ./internal/gateway -run XXX -bench CookbookRetryBudget -benchtime 1x -v
//
// It is a benchmark, not a test: the client keeps its own time on the wall
// clock, compressed 30 times, so a machine too busy to run it at that pace
// changes its figures (its timeouts fire first). What it checks holds on
// any machine: each 429 came back or gave up, a 429 gave up only for a
// request that failed, and a request that failed on a 429 it received
// never came back.
func BenchmarkCookbookRetryBudget(b *testing.B) {
	warmUp(b)
	prompts := batchPrompts(budgetItems)
	bodies := make([][]byte, len(prompts))
	for i, p := range prompts {
		bodies[i] = fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d}`, batchModel, p, batchMaxTokens)
	}
	for range b.N {
		var wg sync.WaitGroup
		for _, bc := range budgetCases {
			wg.Go(func() { runBudgetCase(b, bc, bodies) })
		}
		wg.Wait()
	}
}

func runBudgetCase(t testing.TB, bc budgetCase, bodies [][]byte) {
	lim, err := govtext.Limits(fmt.Sprintf("rpm=%d", budgetRPM))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.New(budgetSpeed)
	m, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: lim, Latency: batchLatency, Model: batchModel, Seed: 7, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	simSrv := httptest.NewServer(sim.NewServer(m, sim.ServerConfig{APIKey: batchKey, Now: clk.Now, Speed: budgetSpeed}))
	t.Cleanup(simSrv.Close)
	gw, err := New(context.Background(), Config{Upstream: simSrv.URL + "/v1", APIKey: batchKey, Profile: llm.Groq, Limits: lim,
		ClientKeys: []ClientKey{{Key: batchClientKey}}, Now: clk.Now, Speed: budgetSpeed,
		Logger: slog.New(slog.NewTextHandler(&testenv.Buffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	wall := func(d time.Duration) time.Duration { return d / budgetSpeed }
	c := &cookbook.Client{URL: front.URL + "/v1/chat/completions", APIKey: batchClientKey,
		MaxRequestsPerMinute: bc.rpm, MaxTokensPerMinute: bc.tpm, MaxAttempts: bc.maxAttempts,
		Minute: wall(time.Minute), Pause: wall(15 * time.Second), Timeout: wall(300 * time.Second), Tick: time.Millisecond}
	out := c.Run(t.Context(), bodies)
	// The last 429s' windows close on the gateway's clock: every refusal
	// then came back or gave up.
	var rs metrics.ClientRetries
	waitFor(t, "every 429's window closed", func() bool {
		rows := gw.retries.snapshot(clk.Now())
		rs = metrics.ClientRetries{}
		if len(rows) == 1 {
			rs = rows[0]
		}
		return rs.Pending == 0
	})
	t.Logf("%s: %d of %d done, %d failed; %d attempts; the gateway's 429s: %d, came back %d, gave up %d; upstream 429s %d; %.0f minutes of the key",
		bc.name, out.Succeeded, len(bodies), out.Failed, attempts(out), rs.Refused, rs.CameBack, rs.GaveUp, m.Stats().Rejected,
		float64(out.Wall)*budgetSpeed/float64(time.Minute))
	// The failed requests whose last try got the gateway's 429: each such
	// 429 was counted and never followed by the request again.
	lastRefused := 0
	for _, r := range out.Results {
		if !r.OK && len(r.Errors) > 0 && strings.Contains(r.Errors[len(r.Errors)-1], "sluice gateway") {
			lastRefused++
		}
	}
	t.Logf("%s: the client's failed tries: %d rate-limit errors, %d API errors, %d others (its own timeout); %d failed requests ended on the gateway's 429",
		bc.name, out.RateLimitErrors, out.APIErrors, out.Others, lastRefused)
	if out.Succeeded+out.Failed != len(bodies) {
		t.Fatalf("%d succeeded and %d failed of %d", out.Succeeded, out.Failed, len(bodies))
	}
	// Each 429 came back or gave up; a 429 gave up only when its request
	// was never sent again, so failed for good; and a request that failed
	// on a 429 it received never came back.
	if rs.CameBack+rs.GaveUp != rs.Refused || rs.Untracked != 0 || rs.GaveUp > int64(out.Failed) || rs.GaveUp < int64(lastRefused) {
		t.Errorf("%s: the gateway counted %+v for %d failed requests, %d of them on its 429", bc.name, rs, out.Failed, lastRefused)
	}
}

// attempts is the tries the client made in all.
func attempts(o *cookbook.Outcome) int {
	n := 0
	for _, r := range o.Results {
		n += r.Attempts
	}
	return n
}
