package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// upstreamKey is the provider key in every test; no answer, header or log
// line may ever contain it.
const upstreamKey = "sk-upstream-3f9a7c1e5b2d4068"

func limits(s string) governor.Limits {
	ls, err := govtext.Limits(s)
	if err != nil {
		panic(err)
	}
	return ls
}

// bundle is a simulator with a gateway in front of it.
type bundle struct {
	model *forecast.Model
	sim   *httptest.Server
	gw    *Gateway
	srv   *httptest.Server
	log   *testenv.Buffer

	mu   sync.Mutex
	seen bytes.Buffer // every answer's status line, headers and body
}

// setup starts the simulator (wire format on, the upstream key required)
// and a gateway in front of it; cfg's Upstream, APIKey and Logger are filled in.
func setup(t testing.TB, sc forecast.ModelConfig, cfg Config, before ...func(*Gateway)) *bundle {
	t.Helper()
	sc.Wire = true
	m, err := forecast.NewModel(sc)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{model: m, log: &testenv.Buffer{}}
	// The simulator runs on the gateway's clock, fast or not.
	b.sim = httptest.NewServer(sim.NewServer(m, sim.ServerConfig{APIKey: upstreamKey, Now: cfg.Now, Speed: cfg.Speed}))
	t.Cleanup(b.sim.Close)
	cfg.Upstream = b.sim.URL + "/v1"
	if cfg.APIKey == "" {
		cfg.APIKey = upstreamKey
	}
	cfg.Profile = sc.Profile
	cfg.Logger = slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.gw, err = New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(b.gw)
	}
	start(t, b.gw)
	b.srv = httptest.NewServer(b.gw)
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() { assertNoKey(t, "log", b.log.String()) })
	t.Cleanup(func() { assertNoKey(t, "answers", b.seen.String()) })
	return b
}

// start starts gw for the test and stops it when the test ends, after the
// servers registered later have closed.
func start(t testing.TB, gw *Gateway) {
	t.Helper()
	gw.Start(t.Context())
	t.Cleanup(func() {
		if err := gw.Stop(context.Background()); err != nil {
			t.Errorf("stop the gateway: %v", err)
		}
	})
}

func assertNoKey(t testing.TB, what, text string) {
	t.Helper()
	if strings.Contains(text, upstreamKey) || strings.Contains(text, upstreamKey[3:]) {
		t.Errorf("the upstream key appears in the %s", what)
	}
}

// do sends a request to the gateway and records the whole answer.
func (b *bundle) do(t testing.TB, method, path, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	return b.doCtx(context.Background(), t, method, path, body, header)
}

func (b *bundle) doCtx(ctx context.Context, t testing.TB, method, path, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = resp.Header.Write(&b.seen)
	b.seen.Write(data)
	return resp, data
}

func chatBody(content string, maxTokens int, extra string) string {
	mt := ""
	if maxTokens > 0 {
		mt = `,"max_tokens":` + strconv.Itoa(maxTokens)
	}
	return `{"model":"sim-model","messages":[{"role":"user","content":` + strconv.Quote(content) + `}]` + mt + extra + `}`
}

func flowView(t testing.TB, b *bundle, name string) FlowView {
	t.Helper()
	for _, f := range b.gw.Flows().Flows {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no flow %q in /v1/flows", name)
	return FlowView{}
}

func TestChatPlain(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=30,tpm=6000")},
		Config{Limits: limits("rpm=30,tpm=6000"), Flows: []Flow{{Name: "summary", Weight: 2}}})
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Say hello.", 40, `,"seed":7`),
		map[string]string{FlowHeader: "summary"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var c struct {
		Object string `json:"object"`
		Usage  struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &c); err != nil || c.Object != "chat.completion" || c.Usage.Prompt == 0 {
		t.Fatalf("body %s (%v)", body, err)
	}
	if _, err := strconv.ParseInt(resp.Header.Get(WaitHeader), 10, 64); err != nil {
		t.Errorf("%s = %q, want whole milliseconds", WaitHeader, resp.Header.Get(WaitHeader))
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("the upstream request id is not passed on")
	}
	f := flowView(t, b, "summary")
	// Settled the way Groq counts: the provider's input count, max_tokens reserved.
	if f.Admitted != 1 || f.Tokens["input"] != c.Usage.Prompt || f.Tokens["output"] != 40 || f.Weight != 2 {
		t.Errorf("flow summary = %+v, usage %+v", f, c.Usage)
	}
	if st := b.model.Stats(); st.Requests != 1 || st.Charged.Output != 40 {
		t.Errorf("simulator saw %+v", st)
	}
}

// events reads a server-sent event stream into its data lines.
func events(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestStream(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=30,tpm=6000")}, Config{Limits: limits("rpm=30,tpm=6000")})
	for _, tc := range []struct {
		name  string
		extra string
		usage bool
	}{
		{"without usage", `,"stream":true`, false},
		{"with usage", `,"stream":true,"stream_options":{"include_usage":true}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Stream a few words.", 30, tc.extra), nil)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			ev := events(t, body)
			if len(ev) < 4 || ev[len(ev)-1] != "[DONE]" {
				t.Fatalf("events %q", ev)
			}
			var usage *llm.Usage
			var text strings.Builder
			for _, e := range ev[:len(ev)-1] {
				var ch llm.ChatChunk
				if err := json.Unmarshal([]byte(e), &ch); err != nil {
					t.Fatalf("event %q: %v", e, err)
				}
				text.WriteString(ch.Text())
				if ch.Usage != nil {
					usage = ch.Usage
				}
			}
			if (usage != nil) != tc.usage {
				t.Fatalf("usage chunk passed on: %v, want %v", usage != nil, tc.usage)
			}
			n := int64(llm.CountTokens("sim-model", text.String()))
			if n < 15 || (usage != nil && usage.CompletionTokens != n) {
				t.Errorf("streamed %d tokens %q, usage %+v", n, text.String(), usage)
			}
		})
	}
	// Both streams were settled with the usage the gateway asked for.
	f := flowView(t, b, DefaultFlow)
	if f.Admitted != 2 || f.Tokens["output"] != 60 || f.Tokens["input"] != 2*(int64(llm.CountTokens("sim-model", "Stream a few words."))+6) {
		t.Errorf("default flow = %+v", f)
	}
}

func TestDefaultMaxTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=30,tpm=20000,otpm=1000")},
		Config{Limits: limits("rpm=30,tpm=20000,otpm=1000"), DefaultMaxTokens: 300,
			Flows: []Flow{{Name: "title", DefaultMaxTokens: 50}, {Name: "analysis"}}})
	for _, tc := range []struct {
		flow string
		want int64
	}{
		{"title", 50},
		{"analysis", 300},
	} {
		resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Title this.", 0, ""), map[string]string{FlowHeader: tc.flow})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", tc.flow, resp.StatusCode, body)
		}
		if got := flowView(t, b, tc.flow).Tokens["output"]; got != tc.want {
			t.Errorf("%s: output reserved %d, want the flow's default %d", tc.flow, got, tc.want)
		}
	}
	if st := b.model.Stats(); st.Charged.Output != 350 {
		t.Errorf("upstream charged output %d, want 350: the default max_tokens was not sent", st.Charged.Output)
	}

	// A default larger than the output limit is lowered to what fits: the
	// provider's own default would make the call too large forever.
	b2 := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("otpm=1000")}, Config{Limits: limits("otpm=1000")})
	resp, body := b2.do(t, "POST", "/v1/chat/completions", chatBody("Analyse this.", 0, ""), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if st := b2.model.Stats(); st.Charged.Output != 1000 || st.Rejected != 0 {
		t.Errorf("upstream saw %+v; want max_tokens lowered to 1000", st)
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile, limits string
		maxTokens       int
		want            []string
	}{
		{"groq", "tpm=6000,otpm=1000", 1252, []string{"Request too large for model `sim-model` on output tokens per minute (OTPM): Limit 1000, Requested 1252.", "max_tokens ≤ 1,000 fits"}},
		{"groq", "tpm=2000", 1990, []string{"on tokens per minute (TPM): Limit 2000, Requested ", "max_tokens ≤ 1,9"}},
		{"openai", "tpm=2000", 3000, []string{"Request too large for sim-model on tokens per min (TPM): Limit 2000, Requested "}},
		{"anthropic", "otpm=800", 900, []string{"this request needs 900 output tokens, more than your organization's rate limit of 800 output tokens per minute"}},
	} {
		t.Run(tc.profile+"/"+tc.limits, func(t *testing.T) {
			t.Parallel()
			b := setup(t, forecast.ModelConfig{Profile: llm.Profile(tc.profile), Limits: limits(tc.limits)}, Config{Limits: limits(tc.limits)})
			resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Write a long essay.", tc.maxTokens, ""), nil)
			if resp.StatusCode != 413 || resp.Header.Get("Retry-After") != "" {
				t.Fatalf("status %d retry-after %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			// The caller's client reads it as the provider's own error.
			err := llm.Profile(tc.profile).Classify(resp.StatusCode, resp.Header, body)
			tl, ok := err.(*llm.TooLargeError)
			if !ok || !tl.LimitKnown {
				t.Fatalf("classified as %T %v", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(tl.Message, w) {
					t.Errorf("message %q lacks %q", tl.Message, w)
				}
			}
			if st := b.model.Stats(); st.Requests != 0 {
				t.Errorf("the upstream was called %d times for a request that can never fit", st.Requests)
			}
		})
	}
}

func TestNotAdmittedInTime(t *testing.T) {
	t.Parallel()
	// The clock stands still: the retry-after is exactly the minute's
	// end, however long the steps take.
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=1")}, Config{Limits: limits("rpm=1"), Now: newManualClock().Now})
	if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("one", 10, ""), nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("two", 10, ""), map[string]string{MaxWaitHeader: "50ms"})
	if resp.StatusCode != 429 {
		t.Fatalf("second: %d %s", resp.StatusCode, body)
	}
	// Honest: the minute's one request comes back about a minute after the first.
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 50 || ra > 61 {
		t.Errorf("retry-after %q, want about 60", resp.Header.Get("Retry-After"))
	}
	rl, ok := llm.Groq.Classify(resp.StatusCode, resp.Header, body).(*llm.RateLimitError)
	if !ok || rl.RetryAfter < 50*time.Second || !strings.Contains(rl.Message, `flow "default"`) {
		t.Errorf("classified %+v", rl)
	}
	// It says what it waited on: the minute's one request.
	if got := resp.Header.Get(WaitingOnHeader); got != "rpm" || !strings.Contains(string(body), "It waits on rpm until ") {
		t.Errorf("waiting on %q, body %s; want rpm named", got, body)
	}
	if f := flowView(t, b, DefaultFlow); f.Waiting != 0 || f.Admitted != 1 {
		t.Errorf("after the timeout the flow is %+v", f)
	}
	if st := b.model.Stats(); st.Requests != 1 {
		t.Errorf("upstream saw %d requests, want 1", st.Requests)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "openai"}, Config{MaxBodyBytes: 2000})
	for _, tc := range []struct {
		name, body string
		header     map[string]string
		status     int
		want       string
	}{
		{"not JSON", `{"model":`, nil, 400, "request body must be a JSON object"},
		{"no messages", `{"model":"m"}`, nil, 400, `"messages" is missing`},
		{"bad field", `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"many"}`, nil, 400, `"max_tokens"`},
		{"too big", chatBody(strings.Repeat("x", 3000), 5, ""), nil, 413, "larger than 2000 bytes"},
		{"bad max wait", chatBody("x", 5, ""), map[string]string{MaxWaitHeader: "soon"}, 400, MaxWaitHeader},
		{"negative max wait", chatBody("x", 5, ""), map[string]string{MaxWaitHeader: "-Inf"}, 400, "must not be negative"},
		{"not-a-number max wait", chatBody("x", 5, ""), map[string]string{MaxWaitHeader: "NaN"}, 400, MaxWaitHeader},
		{"trailing garbage", chatBody("x", 5, "") + `{"model":"m"}`, nil, 400, "data after the JSON object"},
		{"trailing garbage, read in part", chatBody("x", 5, "") + "xx", nil, 400, "data after the JSON object"},
		{"unknown role", `{"model":"m","max_tokens":5,"messages":[{"role":"wizard","content":"x"}]}`, nil, 400, `"role" "wizard" is not one of`},
		{"empty message", `{"model":"m","max_tokens":5,"messages":[{}]}`, nil, 400, `"messages[0]": "role" is missing`},
		{"no content", `{"model":"m","messages":[{"role":"user"}]}`, nil, 400, `"content" is missing`},
		{"invalid UTF-8", "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", nil, 400, "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := b.do(t, "POST", "/v1/chat/completions", tc.body, tc.header)
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != tc.status || !strings.Contains(e.Error.Message, tc.want) {
				t.Errorf("status %d body %s; want %d naming %q", resp.StatusCode, body, tc.status, tc.want)
			}
		})
	}
	if st := b.model.Stats(); st.Requests != 0 {
		t.Errorf("upstream saw %d requests", st.Requests)
	}
}

func TestClientKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "groq"}, Config{
		Flows:      []Flow{{Name: "summary"}, {Name: "title"}},
		ClientKeys: []ClientKey{{Key: "gw-title-key-0123456", Flow: "title"}, {Key: "gw-any-key-0123456789"}},
	})
	for _, tc := range []struct {
		name, auth, flowHeader string
		status                 int
	}{
		{"missing", "", "summary", 401},
		{"wrong", "Bearer gw-nope", "summary", 401},
		{"upstream key is not a client key", "Bearer " + upstreamKey, "summary", 401},
		{"mapped key wins over the header", "Bearer gw-title-key-0123456", "summary", 200},
		{"unmapped key takes the header", "Bearer gw-any-key-0123456789", "summary", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("hi", 5, ""),
				map[string]string{"Authorization": tc.auth, FlowHeader: tc.flowHeader})
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if tc.status == 401 && (strings.Contains(string(body), "gw-nope") || !strings.Contains(string(body), "client key")) {
				t.Errorf("401 body %s", body)
			}
		})
	}
	if a, s := flowView(t, b, "title").Admitted, flowView(t, b, "summary").Admitted; a != 1 || s != 1 {
		t.Errorf("admitted title %d summary %d, want 1 and 1", a, s)
	}
	if resp, _ := b.do(t, "GET", "/v1/flows", "", nil); resp.StatusCode != 401 {
		t.Errorf("/v1/flows without a key: %d", resp.StatusCode)
	}
}

// testBudget is a context that ends when the test's own budget does: at
// its deadline, less the time to report what went wrong. What it bounds
// (a client process, a run) is never cut shorter than the test is.
func testBudget(t *testing.T) context.Context {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		t.Cleanup(cancel)
	}
	return ctx
}

// waitFor polls cond until it holds or testenv.Budget passes: what it
// waits for is a state the test has set in motion, which a busy machine may
// make slow but not stop.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.WaitUntil(t, 5*time.Millisecond, func() (bool, string) { return cond(), "waiting for " + what })
}

func TestDisconnectLeavesTheLine(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=1")}, Config{Limits: limits("rpm=1")})
	if resp, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("one", 10, ""), nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.doCtx(ctx, t, "POST", "/v1/chat/completions", chatBody("two", 10, ""), nil)
	}()
	waitFor(t, "the second request to wait", func() bool { return flowView(t, b, DefaultFlow).Waiting == 1 })
	if f := flowView(t, b, DefaultFlow); f.WaitingOn != "rpm" || f.WaitingUntil.IsZero() || f.WaitingUntil.Before(time.Now()) {
		t.Errorf("/v1/flows while a request waits on rpm: waiting_on %q until %v", f.WaitingOn, f.WaitingUntil)
	}
	if _, m := b.do(t, "GET", "/metrics", "", nil); !strings.Contains(string(m), `sluice_flow_waiting_on{flow="default",key="groq",on="rpm"} 1`) {
		t.Errorf("metrics do not say the waiting request waits on rpm:\n%s", m)
	}
	cancel()
	<-done
	waitFor(t, "the line to empty", func() bool { return flowView(t, b, DefaultFlow).Waiting == 0 })
	if f := flowView(t, b, DefaultFlow); f.Admitted != 1 {
		t.Errorf("flow after the disconnect: %+v", f)
	}
	waitFor(t, "the departure to be counted", func() bool {
		_, m := b.do(t, "GET", "/metrics", "", nil)
		return strings.Contains(string(m), `sluice_gateway_requests_total{code="499",flow="default",key="groq"} 1`)
	})
	if st := b.model.Stats(); st.Requests != 1 {
		t.Errorf("upstream saw %d requests", st.Requests)
	}
}

func TestUpstreamRejectionFeedsBack(t *testing.T) {
	t.Parallel()
	// The provider enforces an RPM the gateway was not told of, and Groq's
	// headers never report RPM: the 429's text is the only way to learn it.
	// The clock stands still: the provider's retry-after, and the
	// gateway's, are exactly the minute's end.
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=1,tpm=50000")}, Config{Limits: limits("tpm=50000"),
		Flows: []Flow{{Name: "summary"}}, Now: newManualClock().Now})
	h := map[string]string{FlowHeader: "summary", MaxWaitHeader: "100ms"}
	if resp, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("one", 10, ""), h); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("two", 10, ""), h)
	if resp.StatusCode != 429 {
		t.Fatalf("second: %d %s", resp.StatusCode, body)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 50 {
		t.Errorf("retry-after %q", resp.Header.Get("Retry-After"))
	}
	// The next call waits in the gateway instead of hitting the provider again.
	resp, _ = b.do(t, "POST", "/v1/chat/completions", chatBody("three", 10, ""), h)
	if resp.StatusCode != 429 {
		t.Fatalf("third: %d", resp.StatusCode)
	}
	if st := b.model.Stats(); st.Requests != 2 {
		t.Errorf("upstream saw %d requests, want 2", st.Requests)
	}
	if f := flowView(t, b, "summary"); f.Rejections["rpm"] != 1 {
		t.Errorf("flow rejections %v", f.Rejections)
	}
	_, metrics := b.do(t, "GET", "/metrics", "", nil)
	if !strings.Contains(string(metrics), `sluice_provider_rejections_total{key="groq",limit="rpm",status="429"} 1`) {
		t.Errorf("metrics lack the rejection:\n%s", metrics)
	}
}

func TestTransientFailuresRetried(t *testing.T) {
	t.Parallel()
	// Retries happen within the max wait: two minutes, so that a busy
	// machine's slow attempts do not use it up before the eight attempts.
	b := setup(t, forecast.ModelConfig{Profile: "openai", Seed: 3, Faults: forecast.Faults{Error5xx: 0.5, Reset: 0.2}},
		Config{RetryBase: time.Millisecond, MaxWait: 2 * time.Minute})
	for i := range 10 {
		resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("try "+strconv.Itoa(i), 10, ""), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	st := b.model.Stats()
	if st.Succeeded != 10 || st.Requests <= 10 {
		t.Errorf("upstream saw %+v: want failures retried to 10 successes", st)
	}
	// A failed call may have been counted by the provider: its charge stands.
	if f := flowView(t, b, DefaultFlow); f.Admitted != st.Requests {
		t.Errorf("admitted %d, upstream requests %d", f.Admitted, st.Requests)
	}
}

func TestModelsAndMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=30,tpm=6000")}, Config{Limits: limits("rpm=30,tpm=6000")})
	resp, body := b.do(t, "GET", "/v1/models", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"id":"sim-model"`) {
		t.Fatalf("models: %d %s", resp.StatusCode, body)
	}
	b.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, ""), nil)
	_, m := b.do(t, "GET", "/metrics", "", nil)
	for _, want := range []string{
		`sluice_limit_capacity{key="groq",limit="tpm"} 6000`,
		`sluice_limit_used{key="groq",limit="rpm"} 1`,
		`sluice_flow_admissions_total{flow="default",key="groq"} 1`,
		`sluice_flow_admission_wait_seconds_count{flow="default",key="groq"} 1`,
		`sluice_flow_tokens_total{flow="default",key="groq",kind="output"} 10`,
		`sluice_gateway_requests_total{code="200",flow="default",key="groq"} 1`,
		`sluice_flow_waiting{flow="default",key="groq"} 0`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, line := range strings.Split(string(m), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "sluice_") {
			t.Errorf("metric not named sluice_…: %s", line)
		}
	}
	if resp, body := b.do(t, "GET", "/nope", "", nil); resp.StatusCode != 404 || !strings.Contains(string(body), "unknown request URL") {
		t.Errorf("unknown path: %d %s", resp.StatusCode, body)
	}
}

func TestUpstreamKeyNeverLeaks(t *testing.T) {
	t.Parallel()
	// The gateway holds a key the provider refuses: its 401 travels back.
	b := setup(t, forecast.ModelConfig{Profile: "openai"}, Config{APIKey: "sk-wrong-" + upstreamKey})
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, ""), nil)
	if resp.StatusCode != 401 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	b.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, `,"stream":true`), nil)
	b.do(t, "GET", "/v1/models", "", nil)
	b.do(t, "GET", "/v1/flows", "", nil)
	b.do(t, "GET", "/metrics", "", nil)
	if s := b.gw.cfg.String() + b.gw.client.String(); strings.Contains(s, upstreamKey) {
		t.Errorf("config string carries the key: %s", s)
	}
	// setup's cleanups grep every answer and the log.
}

// TestEchoedKeyScrubbed: a provider (or a proxy before it) that echoes the
// key in its error messages does not get it to the caller or the log.
func TestEchoedKeyScrubbed(t *testing.T) {
	t.Parallel()
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		status := http.StatusUnauthorized
		if r.Header.Get("Accept") == "text/event-stream" {
			status = http.StatusInternalServerError
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(forecast.ErrorBody("openai", "invalid_request_error", "invalid_api_key", "Incorrect API key provided: "+key+".", 0))
	}))
	defer echo.Close()
	log := &testenv.Buffer{}
	gw, err := New(context.Background(), Config{Upstream: echo.URL + "/v1", APIKey: upstreamKey, MaxWait: 50 * time.Millisecond, RetryBase: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	srv := httptest.NewServer(gw)
	defer srv.Close()
	var seen strings.Builder
	for _, body := range []string{chatBody("hi", 5, ""), chatBody("hi", 5, `,"stream":true`)} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = resp.Header.Write(&seen)
		seen.Write(data)
		if !strings.Contains(string(data), "[redacted]") {
			t.Errorf("status %d body %s: want the provider's message with the key scrubbed", resp.StatusCode, data)
		}
	}
	assertNoKey(t, "answers", seen.String())
	assertNoKey(t, "log", log.String())
}

// TestDecodePricesLikeTheWholeRequest: a plain request read in part is
// priced exactly as the same request decoded whole.
func TestDecodePricesLikeTheWholeRequest(t *testing.T) {
	t.Parallel()
	est, err := llm.NewEstimator(llm.EstimatorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		chatBody("Say hello.", 40, ""),
		chatBody("Say hello.", 40, `,"n":3,"seed":1,"temperature":0.2`),
		`{"model":"gpt-4o","max_completion_tokens":70,"messages":[{"role":"system","content":"Be brief."},{"role":"user","name":"ann","content":[{"type":"text","text":"Two parts"},{"type":"text","text":"of text."}]}]}`,
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"Weather?"}],"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object"}}}],"tool_choice":"auto","response_format":{"type":"json_object"}}`,
		`{"model":"m","max_tokens":9,"max_completion_tokens":12,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`,
	} {
		whole, err := llm.DecodeChatRequest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		part, err := decode([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if a, b := est.Cost(part), est.Cost(whole); a != b || part.Extra != nil && whole.Extra == nil {
			t.Errorf("%s: priced %+v read in part, %+v whole", body, a, b)
		}
	}
	// Streams, requests without max_tokens and ones that do not read are decoded whole.
	for _, body := range []string{chatBody("x", 5, `,"stream":true`), chatBody("x", 0, ""), `{"model":"m","messages":[],"max_tokens":5}`, `{"model":"m","Max_Tokens":5,"messages":[{"role":"user","content":"x"}]}`} {
		whole, werr := llm.DecodeChatRequest([]byte(body))
		part, perr := decode([]byte(body))
		if (werr == nil) != (perr == nil) || werr == nil && (part.Stream != whole.Stream || part.MaxTokens != whole.MaxTokens || len(part.Extra) != len(whole.Extra)) {
			t.Errorf("%s: read %+v %v, want %+v %v", body, part, perr, whole, werr)
		}
	}
}

// TestRestartRemembersTheDay: a gateway with a store spends part of the
// day's TPD; a new gateway on the same store starts from that usage.
func TestRestartRemembersTheDay(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gw.db")
	open := func() store.Store {
		st, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// A large day budget: paced over the day, a call of ~530 tokens waits
	// under half a second for the next.
	lim := limits("tpd=100000000")
	st := open()
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: lim}, Config{Key: "groq-day", Limits: lim, Store: st})
	for i := range 3 {
		resp, body := b.do(t, "POST", "/v1/chat/completions",
			fmt.Sprintf(`{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"item %d"}]}`, i), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	used := b.gw.Governor().Stats(time.Now()).Limits[governor.TPD].Used
	if used < 1500 {
		t.Fatalf("TPD used %d after three calls of max_tokens 500", used)
	}
	if err := b.gw.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.gw.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	st.Close()

	st2 := open()
	defer st2.Close()
	gw2, err := New(context.Background(), Config{Key: "groq-day", Upstream: b.sim.URL + "/v1", APIKey: upstreamKey, Profile: llm.Groq, Limits: lim, Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw2)
	if got := gw2.Governor().Stats(time.Now()).Limits[governor.TPD].Used; got != used {
		t.Fatalf("restarted gateway starts with TPD used %d, want the day's %d", got, used)
	}
}

// TestStopEndsTheWriter: the gateway writes its charges to its store only
// from Start to Stop. New starts no writer; a Stop that finds the writer
// mid-write does not report done while it writes; once Stop returns nil,
// every charge, as settled, is in the store.
func TestStopEndsTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	held := &heldStore{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
	lim := limits("tpd=100000000")
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: lim}, Config{Key: "groq-stop", Limits: lim, Store: held}, func(*Gateway) {
		if n := writersStartedHere(); n != 0 {
			t.Errorf("New started %d background writers, want none before Start", n)
		}
	})
	if n := writersStartedHere(); n != 1 {
		t.Fatalf("%d background writers after Start, want 1", n)
	}
	call := func(i int) {
		t.Helper()
		resp, body := b.do(t, "POST", "/v1/chat/completions", fmt.Sprintf(`{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"item %d"}]}`, i), nil)
		if resp == nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %s", i, resp, body)
		}
	}
	call(1)
	select {
	case <-held.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no charges written 30s after Start")
	}
	call(2) // its charge is left for Stop to write

	// The writer is in the store: a Stop whose context has ended cannot
	// wait for it, and must say so rather than report done.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- b.gw.Stop(cancelled) }()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Stop while the writer was writing: %v, want the context's end", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Stop with an ended context blocked behind the writer")
	}
	close(held.release)
	if err := b.gw.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	saved, err := st.Charges(ctx, "groq-stop", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var tokens int64
	for _, c := range saved {
		tokens += c.Cost.Tokens()
	}
	if used := b.gw.Governor().Stats(time.Now()).Limits[governor.TPD].Used; len(saved) != 2 || tokens != used {
		t.Fatalf("the store holds %d charges of %d tokens after Stop, want the two calls' settled %d", len(saved), tokens, used)
	}
}

// heldStore holds its first write of charges until release is closed, so a
// test can stop a gateway while its background writer is writing.
type heldStore struct {
	store.Store
	once    sync.Once
	entered chan struct{} // closed when the first write begins
	release chan struct{}
}

func (s *heldStore) UpsertCharges(ctx context.Context, key string, charges []store.Charge) error {
	first := false
	s.once.Do(func() { first = true; close(s.entered) })
	if first {
		<-s.release
	}
	return s.Store.UpsertCharges(ctx, key, charges)
}

// writersStartedHere counts the running goroutines of quota's background
// writer that the calling goroutine started.
func writersStartedHere() int {
	self := make([]byte, 64)
	self = self[:runtime.Stack(self, false)] // "goroutine 7 [running]: …"
	id := strings.Fields(string(self))[1]
	all := make([]byte, 1<<16)
	for {
		n := runtime.Stack(all, true)
		if n < len(all) {
			all = all[:n]
			break
		}
		all = make([]byte, 2*len(all))
	}
	return strings.Count(string(all), "quota.(*Ledger).Start in goroutine "+id+"\n")
}

// /v1/flows answers each flow's health in the shape the event and run
// API answers its jobs', next to the fields it has always answered.
func TestFlowsHealth(t *testing.T) {
	t.Parallel()
	// A window of a nanosecond: a flow is progressing only at the moment
	// of an admission, so the test sees it wait and go idle.
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=1")},
		Config{Limits: limits("rpm=1"), ProgressWindow: time.Nanosecond, Flows: []Flow{{Name: "titles"}}})
	get := func() map[string]map[string]any {
		t.Helper()
		resp, body := b.do(t, "GET", "/v1/flows", "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("/v1/flows: %d %s", resp.StatusCode, body)
		}
		var v struct{ Flows []map[string]any }
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]any{}
		for _, f := range v.Flows {
			out[f["name"].(string)] = f
		}
		return out
	}
	fs := get()
	if f := fs["titles"]; f["state"] != "idle" || f["done"] != 0.0 || f["remaining"] != 0.0 || f["last_progress_at"] != nil {
		t.Errorf("a flow before any request: %v", f)
	}
	before := time.Now().UTC()
	if resp, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("one", 10, ""), map[string]string{FlowHeader: "titles"}); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.doCtx(ctx, t, "POST", "/v1/chat/completions", chatBody("two", 10, ""), map[string]string{FlowHeader: "titles"})
	}()
	waitFor(t, "the second request to wait", func() bool { return flowView(t, b, "titles").Waiting == 1 })
	f := get()["titles"]
	last, err := time.Parse(time.RFC3339, fmt.Sprint(f["last_progress_at"]))
	if err != nil || last.Before(before.Add(-time.Second)) || last.After(time.Now()) || !strings.HasSuffix(f["last_progress_at"].(string), "Z") {
		t.Errorf("last_progress_at %v (%v), want the first admission, in UTC", f["last_progress_at"], err)
	}
	if f["state"] != "waiting-for-quota" || f["done"] != 1.0 || f["remaining"] != 1.0 || f["waiting_on"] != "rpm" || f["waiting_until"] == nil {
		t.Errorf("a flow whose request waits: %v", f)
	}
	// The fields it answered before are still there.
	for _, k := range []string{"weight", "priority", "waiting", "parked", "admitted", "tokens", "rejections"} {
		if _, ok := f[k]; !ok {
			t.Errorf("no %q in %v", k, f)
		}
	}
	cancel()
	<-done
	waitFor(t, "the line to empty", func() bool { return flowView(t, b, "titles").Waiting == 0 })
	if f := get()["titles"]; f["state"] != "idle" || f["waiting_on"] != nil || f["eta"] != nil || f["rate_per_hour"] != nil {
		t.Errorf("a flow with nothing waiting: %v", f)
	}
}

// /v1/flows says the gateway's clock, which its flows' times are on: a
// clock of its own, or the wall clock at its pace.
func TestFlowsSayTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.At(60, time.Date(2031, 6, 15, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name  string
		now   func() time.Time
		speed float64
	}{{"a clock of its own", clk.Now, 60}, {"the wall clock", time.Now, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=10")},
				Config{Limits: limits("rpm=10"), Now: tc.now, Speed: tc.speed})
			before := tc.now()
			resp, body := b.do(t, "GET", "/v1/flows", "", nil)
			after := tc.now()
			var v struct {
				Now   time.Time
				Speed float64
			}
			if err := json.Unmarshal(body, &v); err != nil || resp.StatusCode != 200 {
				t.Fatalf("/v1/flows: %d %s (%v)", resp.StatusCode, body, err)
			}
			if v.Now.Before(before) || v.Now.After(after) || v.Speed != tc.speed {
				t.Errorf("/v1/flows says %s at ×%v, want from %s to %s at ×%v", v.Now, v.Speed, before, after, tc.speed)
			}
		})
	}
}

func TestFlowState(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		lastAdmit time.Time
		waiting   int
		want      health.State
	}{
		{"admitted within the window", now.Add(-4 * time.Minute), 0, health.Progressing},
		{"admitted within the window while others wait", now.Add(-4 * time.Minute), 3, health.Progressing},
		{"nothing admitted within the window while calls wait", now.Add(-5 * time.Minute), 3, health.WaitingForQuota},
		{"never admitted while calls wait", time.Time{}, 1, health.WaitingForQuota},
		{"nothing admitted within the window, nothing waits", now.Add(-5 * time.Minute), 0, health.Idle},
		{"never admitted, nothing waits", time.Time{}, 0, health.Idle},
	} {
		if got := flowState(now, c.lastAdmit, 5*time.Minute, c.waiting); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// A gateway given its owner's governor admits against it: what its callers
// spend is the owner's key's, and a flow it serves must be configured there
// alike.
func TestSharedGovernor(t *testing.T) {
	t.Parallel()
	gov, err := governor.New(governor.Config{Key: "groq", Limits: limits("rpm=30,tpm=6000"),
		Flows: []governor.FlowConfig{{Name: "summary", Weight: 2}, {Name: DefaultFlow}}})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=30,tpm=6000")},
		Config{Governor: gov, Flows: []Flow{{Name: "summary", Weight: 2}}})
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Say hello.", 40, ""), map[string]string{FlowHeader: "summary"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var admitted int64
	for _, f := range gov.Stats(time.Now()).Flows {
		if f.Name == "summary" {
			admitted = f.Admitted
		}
	}
	if admitted != 1 {
		t.Errorf("the owner's governor admitted %d calls of summary, want 1", admitted)
	}
	if f := flowView(t, b, "summary"); f.Admitted != 1 || f.Weight != 2 {
		t.Errorf("gateway's view of summary = %+v", f)
	}

	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"limits given too", Config{Governor: gov, Limits: limits("rpm=5")}, "leave them zero"},
		{"an unknown flow", Config{Governor: gov, Flows: []Flow{{Name: "title"}}}, `flow "title" is not one of the governor's`},
		{"another weight", Config{Governor: gov, Flows: []Flow{{Name: "summary", Weight: 1}}}, `flow "summary" has weight 2 and priority 0 in the governor, 1 and 0 here`},
	} {
		tt.cfg.Upstream = "http://127.0.0.1:1/v1"
		if _, err := New(context.Background(), tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.want)
		}
	}
}
