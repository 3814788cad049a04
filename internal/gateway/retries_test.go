package gateway

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/metrics"
)

// The two callers of the retries tests, each a client key of its own.
const (
	retryClientA = "gw-retry-client-a-5c2e9f71"
	retryClientB = "gw-retry-client-b-0d84a3b6"
)

// TestClientRetriesAfterGateway429s: clients sent 429 by the gateway's own
// line, some of whose requests come back and some of which never do, are
// told apart per flow and client key, in /v1/flows and in /metrics: a
// request sent again by the same key is back, one not seen again within
// the window gave up once the window closes, and the same body from
// another key is not the first key's request coming back.
func TestClientRetriesAfterGateway429s(t *testing.T) {
	t.Parallel()
	clk := newManualClock()
	window := time.Minute
	b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=1")},
		Config{Limits: limits("rpm=1"), Now: clk.Now, RetryWindow: window,
			ClientKeys: []ClientKey{{Key: retryClientA}, {Key: retryClientB}}})
	send := func(key, content string, want int) {
		t.Helper()
		resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody(content, 5, ""),
			map[string]string{"Authorization": "Bearer " + key, MaxWaitHeader: "1ms"})
		if status(resp) != want {
			t.Fatalf("%s from %s: %d %s, want %d", content, key[:18], status(resp), body, want)
		}
	}
	send(retryClientA, "takes the minute", 200)
	// The key's minute is taken: every request below gets the gateway's 429.
	send(retryClientA, "x: comes back", 429)
	send(retryClientA, "z: never again", 429)
	send(retryClientB, "y: never again", 429)
	send(retryClientB, "x: comes back", 429) // A's body from B: B's own request
	send(retryClientA, "x: comes back", 429) // back, and refused again
	rows := func() map[int]metrics.ClientRetries {
		out := map[int]metrics.ClientRetries{}
		for _, r := range flowView(t, b, DefaultFlow).ClientRetries {
			if r.Flow != DefaultFlow {
				t.Errorf("row %+v in flow %s", r, DefaultFlow)
			}
			out[r.Client] = r
		}
		return out
	}
	got := rows()
	want := map[int]metrics.ClientRetries{
		1: {Flow: DefaultFlow, Client: 1, Refused: 3, CameBack: 1, Pending: 2},
		2: {Flow: DefaultFlow, Client: 2, Refused: 2, Pending: 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("before the window closes: %+v, want %+v", got, want)
	}
	// A 429's window is the retry-after it gave (here about the minute
	// until the key has room, bounded by the window) and the window again.
	clk.advance(b, 2*window+time.Second)
	got = rows()
	want = map[int]metrics.ClientRetries{
		1: {Flow: DefaultFlow, Client: 1, Refused: 3, CameBack: 1, GaveUp: 2},
		2: {Flow: DefaultFlow, Client: 2, Refused: 2, GaveUp: 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the window: %+v, want %+v", got, want)
	}
	resp, err := http.Get(b.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`sluice_gateway_client_refused_total{client="1",flow="default",key="openai"} 3`,
		`sluice_gateway_client_retries_total{client="1",flow="default",key="openai",outcome="came_back"} 1`,
		`sluice_gateway_client_retries_total{client="1",flow="default",key="openai",outcome="gave_up"} 2`,
		`sluice_gateway_client_retries_total{client="2",flow="default",key="openai",outcome="gave_up"} 2`,
		`sluice_gateway_client_refused_pending{client="2",flow="default",key="openai"} 0`,
	} {
		if !strings.Contains(string(text), line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(string(text), retryClientA) || strings.Contains(string(text), retryClientB) {
		t.Error("/metrics shows a client key")
	}
}

// TestRetriesBounded: past its bound the tracker follows no more 429s,
// counts them as untracked, and drops none it follows; a request refused
// twice before either comes back is two refusals, taken back oldest first.
func TestRetriesBounded(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r := newRetries(time.Minute, 2)
	who := caller{client: 1, flow: "batch"}
	key := func(s string) placeKey { return sha256.Sum256([]byte(s)) }
	r.refused(key("a"), who, 0, t0)
	r.refused(key("a"), who, 10*time.Second, t0.Add(time.Second))
	r.refused(key("b"), who, 0, t0.Add(2*time.Second)) // past the bound of 2
	if got := r.snapshot(t0.Add(2 * time.Second)); !slices.Equal(got, []metrics.ClientRetries{
		{Flow: "batch", Client: 1, Refused: 3, Untracked: 1, Pending: 2}}) {
		t.Errorf("at the bound: %+v", got)
	}
	r.arrived(key("b"), t0.Add(3*time.Second)) // untracked: not back
	r.arrived(key("a"), t0.Add(4*time.Second)) // the first of the two
	// The second a's window ends at 1 s + 10 s + 1 min.
	if got := r.snapshot(t0.Add(70 * time.Second)); !slices.Equal(got, []metrics.ClientRetries{
		{Flow: "batch", Client: 1, Refused: 3, CameBack: 1, Untracked: 1, Pending: 1}}) {
		t.Errorf("before the second window ends: %+v", got)
	}
	if got := r.snapshot(t0.Add(71 * time.Second)); !slices.Equal(got, []metrics.ClientRetries{
		{Flow: "batch", Client: 1, Refused: 3, CameBack: 1, GaveUp: 1, Untracked: 1}}) {
		t.Errorf("after it: %+v", got)
	}
	r.arrived(key("a"), t0.Add(72*time.Second)) // too late: nothing followed
	if len(r.due) != 0 || len(r.byKey) != 0 {
		t.Errorf("%d followed, %d keys, want none", len(r.due), len(r.byKey))
	}
}
