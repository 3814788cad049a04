package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/redact"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// echoUpstream answers with the caller's key in every place a provider's
// answer has: the body of a completion, a stream's events, an error's
// message, type and code, the request id header, a model list. The prompt
// picks the answer.
func echoUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("X-Request-Id", "req-"+key)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			fmt.Fprintf(w, `{"object":"list","data":[{"id":"model-%s","object":"model","owned_by":"%s"}]}`, key, key)
			return
		}
		body, _ := io.ReadAll(r.Body)
		errBody := func(status int) {
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"bad key %s","type":"%s","code":"%s","param":"%s"}}`, key, key, key, key)
		}
		switch {
		case strings.Contains(string(body), "say-400"):
			errBody(400)
		case strings.Contains(string(body), "say-500"):
			errBody(500)
		case strings.Contains(string(body), "say-429"):
			w.Header().Set("Retry-After", "0")
			errBody(429)
		case strings.Contains(string(body), `"stream":true`):
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"id\":\"c-%s\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}\n\n", key, key)
			if strings.Contains(string(body), "stream-error") {
				fmt.Fprintf(w, "data: {\"error\":{\"message\":\"failed %s\",\"type\":\"%s\",\"code\":\"%s\"}}\n\n", key, key, key)
				return
			}
			fmt.Fprintf(w, "data: [DONE]\n\n")
		default:
			fmt.Fprintf(w, `{"id":"c-%s","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, key, key)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEchoedKeyScrubbedEverywhere: whatever part of an answer the provider
// echoes the key in, the client gets [redacted] in its place.
func TestEchoedKeyScrubbedEverywhere(t *testing.T) {
	t.Parallel()
	up := echoUpstream(t)
	log := &testenv.Buffer{}
	gw, err := New(context.Background(), Config{Upstream: up.URL + "/v1", APIKey: upstreamKey, MaxWait: 100 * time.Millisecond, RetryBase: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	srv := httptest.NewServer(gw)
	defer srv.Close()
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"completion", "POST", "/v1/chat/completions", chatBody("hello", 5, ""), 200},
		{"stream", "POST", "/v1/chat/completions", chatBody("hello", 5, `,"stream":true`), 200},
		{"stream error event", "POST", "/v1/chat/completions", chatBody("stream-error", 5, `,"stream":true`), 200},
		{"400", "POST", "/v1/chat/completions", chatBody("say-400", 5, ""), 400},
		{"500", "POST", "/v1/chat/completions", chatBody("say-500", 5, ""), 500},
		// The provider's 429 holds the key's line until the max wait ends:
		// the gateway's own 429 answers, with nothing of the provider's.
		{"429", "POST", "/v1/chat/completions", chatBody("say-429", 5, ""), 429},
		{"models", "GET", "/v1/models", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var all strings.Builder
			_ = resp.Header.Write(&all)
			all.Write(data)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tc.status, data)
			}
			assertNoKey(t, tc.name, all.String())
			if tc.status != 429 && !strings.Contains(all.String(), redact.KeyMark) {
				t.Errorf("the echoed key was dropped rather than redacted, or the answer lost its field:\n%s", all.String())
			}
		})
	}
	assertNoKey(t, "log", log.String())
}

// TestWaitLineBounded: a key saturated for long holds at most the line's
// bounds of waiting requests; one more gets 429 naming the bound, with a
// retry-after, and other flows keep their places.
func TestWaitLineBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=1")},
		Config{Limits: limits("rpm=1"), MaxWait: time.Minute, MaxWaiting: 5, MaxFlowWaiting: 3,
			Flows: []Flow{{Name: "a"}, {Name: "b"}}})
	if resp, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("fill the minute", 5, ""), nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wait := func(flow string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.doCtx(ctx, t, "POST", "/v1/chat/completions", chatBody("wait", 5, ""), map[string]string{FlowHeader: flow})
		}()
	}
	for range 3 {
		wait("a")
	}
	waitFor(t, "three of flow a to wait", func() bool { return flowView(t, b, "a").Waiting == 3 })

	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("one more", 5, ""), map[string]string{FlowHeader: "a"})
	if resp.StatusCode != 429 || !strings.Contains(string(body), `flow \"a\" is full`) || !strings.Contains(string(body), "max_flow_waiting") {
		t.Fatalf("a fourth request of flow a: %d %s; want 429 naming the per-flow bound", resp.StatusCode, body)
	}
	if resp.Header.Get("Retry-After") != "1" {
		t.Errorf("retry-after %q, want 1", resp.Header.Get("Retry-After"))
	}
	for range 2 {
		wait("b")
	}
	waitFor(t, "two of flow b to wait", func() bool { return flowView(t, b, "b").Waiting == 2 })
	resp, body = b.do(t, "POST", "/v1/chat/completions", chatBody("one more", 5, ""), map[string]string{FlowHeader: "default"})
	if resp.StatusCode != 429 || !strings.Contains(string(body), "max_waiting") || strings.Contains(string(body), "max_flow_waiting") {
		t.Fatalf("a sixth request on the key: %d %s; want 429 naming the key's bound", resp.StatusCode, body)
	}
	cancel()
	wg.Wait()
	waitFor(t, "the line to empty", func() bool {
		b.gw.line.mu.Lock()
		defer b.gw.line.mu.Unlock()
		return b.gw.line.n == 0 && b.gw.line.bytes == 0 && len(b.gw.line.perFlow) == 0
	})
}

func TestWaitLineBytes(t *testing.T) {
	t.Parallel()
	l := newLine(Config{MaxWaiting: 10, MaxFlowWaiting: 10, MaxWaitingBytes: 1000})
	if full := l.enter("a", 2000); full != "" {
		t.Fatalf("a request larger than the bound, alone: %s", full)
	}
	if full := l.enter("a", 1); !strings.Contains(full, "max_waiting_bytes") {
		t.Fatalf("a second request past the byte bound: %q", full)
	}
	l.leave("a", 2000)
	for i := range 2 {
		if full := l.enter("b", 500); full != "" {
			t.Fatalf("request %d within the bound: %s", i, full)
		}
	}
	if full := l.enter("b", 1); full == "" {
		t.Fatal("1,001 bytes admitted under a bound of 1,000")
	}
}

// TestHugeNumbersCannotDisableALimit is the probe that once turned off a
// key's TPM for everyone: max_tokens 2^63−1 wrapped the cost negative.
func TestHugeNumbersCannotDisableALimit(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=600,tpm=1000")},
		Config{Limits: limits("rpm=600,tpm=1000"), MaxWait: 300 * time.Millisecond})
	for _, tc := range []struct{ extra, field string }{
		{`,"max_tokens":9223372036854775807`, `max_tokens`},
		{`,"max_tokens":4611686018427387904,"n":2`, `max_tokens`},
		{`,"max_tokens":10,"n":9223372036854775807`, `n`},
		{`,"max_tokens":-5`, `max_tokens`},
		{`,"max_tokens":0`, `max_tokens`},
		{`,"max_completion_tokens":0`, `max_completion_tokens`},
		{`,"max_tokens":1e7`, `max_tokens`},
	} {
		body := `{"model":"sim-model","messages":[{"role":"user","content":"x"}]` + tc.extra + `}`
		resp, data := b.do(t, "POST", "/v1/chat/completions", body, nil)
		if resp.StatusCode != 400 || !strings.Contains(string(data), `\"`+tc.field+`\"`) {
			t.Errorf("%s: %d %s; want 400 naming %s", tc.extra, resp.StatusCode, data, tc.field)
		}
		if strings.Contains(string(data), "negative cost") || strings.Contains(string(data), "Output:") {
			t.Errorf("%s: the answer shows the governor's internals: %s", tc.extra, data)
		}
	}
	if u := b.gw.Flows().Limits["tpm"]; u.Used < 0 || u.Used > 1000 {
		t.Fatalf("tpm after the probes: %+v", u)
	}
	// Ten calls of about 309 tokens under TPM 1,000: three fit.
	prompt := strings.Repeat("word ", 290)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, _ := b.do(t, "POST", "/v1/chat/completions", chatBody(prompt, 10, ""), nil); resp != nil && resp.StatusCode == 200 {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok > 3 || ok == 0 {
		t.Errorf("%d of 10 calls of ~309 tokens admitted under TPM 1,000; want 1 to 3", ok)
	}
	if st := b.model.Stats(); st.Rejected > 0 {
		t.Errorf("the provider rejected %d calls", st.Rejected)
	}
}

// TestStreamToAClientThatStopsReading: behind the server's write deadline,
// a stream whose client reads nothing more ends, and with it the upstream
// call: no upstream connection is held for a client that is not there.
func TestStreamToAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	upstreamDone := make(chan struct{})
	chunk := strings.Repeat("x", 16<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamDone)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			_, err := fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}\n\n", chunk)
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}))
	defer up.Close()
	gw, err := New(context.Background(), Config{Upstream: up.URL + "/v1", APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := guard.NewServer(gw, guard.Config{Addr: ln.Addr().String(), WriteTimeout: 300 * time.Millisecond})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := chatBody("go on forever", 100, `,"stream":true`)
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatal(err)
	}
	// Read nothing more.
	select {
	case <-upstreamDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream stream still runs 30 s after its client stopped reading")
	}
}

// TestCaseVariantKeysArePricedAsSent: encoding/json reads "Max_Tokens" (or
// "max_toKens" with a Kelvin sign) as max_tokens; a provider does not. Such
// a request is priced as the provider will read it — without max_tokens,
// so it is given the default and sent with it — never by the variant.
func TestCaseVariantKeysArePricedAsSent(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["max_tokens"],"Max_Tokens":1}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,\"max_to\u212aens\":1}",
	} {
		part, err := decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		whole, err := llm.DecodeChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if part.MaxTokens != whole.MaxTokens {
			t.Errorf("%s: read in part with max_tokens %d, as the provider reads it %d", body, part.MaxTokens, whole.MaxTokens)
		}
	}
	for body, want := range map[string]bool{
		`{"max_tokens":1,"x":{"Max_Tokens":2}}`:      true, // nested keys are not the request's
		`{"Max_Tokens":1}`:                           false,
		`{"max_tokens":1,"MAX_COMPLETION_TOKENS":3}`: false,
		`{"max\u005ftokens":1}`:                      false, // an escaped key: the whole decoder decides
		`{"a":"\"Max_Tokens\"","max_tokens":1}`:      true,
		`{"a":["Max_Tokens"],"max_tokens":1}`:        true,
		`{"messAges":[],"max_tokens":1}`:             false, // every key the fast reader reads
		`{"Model":"m","max_tokens":1}`:               false,
	} {
		if got := readKeysExact([]byte(body)); got != want {
			t.Errorf("readKeysExact(%s) = %v, want %v", body, got, want)
		}
	}
}

// TestCleanPath: a path is clean when path.Clean leaves it as it is (a
// final slash kept), whether or not it takes the quick check.
func TestCleanPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/", "/v1/chat/completions", "/v1/models/", "", "v1", "//v1", "/v1//x", "/v1/./x", "/v1/../x",
		"/v1/.", "/v1/..", "/.", "/..", "/v1/.x", "/v1/..x/", "/v1/x.", "/a/b/../"} {
		c := path.Clean("/" + p)
		if strings.HasSuffix(p, "/") && c != "/" {
			c += "/"
		}
		if got, want := cleanPath(p), c == p; got != want {
			t.Errorf("cleanPath(%q) = %v, want %v", p, got, want)
		}
	}
}
