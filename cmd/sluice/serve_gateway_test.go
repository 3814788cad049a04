package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/internal/testenv/cookbook"
	"github.com/sluice-dev/sluice/llm"
)

// startOpenAISim starts the provider simulator with the openai profile, so
// that serve's gateway speaks OpenAI's own error format to its callers.
func startOpenAISim(t *testing.T, limits string) (*forecast.Model, string) {
	t.Helper()
	return startSimProfile(t, "openai", limits)
}

// startSimProfile starts the provider simulator with profile and limits
// until the test ends.
func startSimProfile(t *testing.T, profile llm.Profile, limits string) (*forecast.Model, string) {
	t.Helper()
	ls, err := govtext.Limits(limits)
	if err != nil {
		t.Fatal(err)
	}
	m, err := forecast.NewModel(forecast.ModelConfig{Profile: profile, Limits: ls, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	s := sim.NewServer(m, sim.ServerConfig{})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return m, "http://" + s.Addr() + "/v1"
}

// wireAnswer is one HTTP answer as a client reads it.
type wireAnswer struct {
	status int
	header http.Header
	body   []byte
}

// openAIError is OpenAI's error object, with every field it always has.
type openAIError struct {
	Message *string         `json:"message"`
	Type    *string         `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// checkOpenAIError checks that a is OpenAI's error answer: JSON, an "error"
// object with a message, a type, a param and a code (code "" wants null).
func checkOpenAIError(t *testing.T, a wireAnswer, wantType, wantCode, wantMessage string) {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json; body %s", ct, a.body)
	}
	var got struct {
		Error *openAIError `json:"error"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil || got.Error == nil {
		t.Fatalf("body %s: want OpenAI's {\"error\": {…}} (%v)", a.body, err)
	}
	e := got.Error
	if e.Message == nil || !strings.Contains(*e.Message, wantMessage) {
		t.Errorf("message in %s: want one containing %q", a.body, wantMessage)
	}
	if e.Type == nil || *e.Type != wantType {
		t.Errorf("type in %s: want %q", a.body, wantType)
	}
	if e.Param == nil || e.Code == nil {
		t.Errorf("%s lacks param or code: OpenAI's error object always has both", a.body)
	}
	switch code := string(e.Code); {
	case wantCode == "":
		if code != "null" {
			t.Errorf("code %s, want null", code)
		}
	case code != `"`+wantCode+`"`:
		t.Errorf("code %s, want %q", code, wantCode)
	}
}

// checkSluiceError checks that a is the answer of sluice's own API: JSON
// {"error": "message"}.
func checkSluiceError(t *testing.T, a wireAnswer, wantMessage string) {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json; body %s", ct, a.body)
	}
	var got struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil || got.Error == nil {
		t.Fatalf("body %s: want sluice's {\"error\": \"…\"} (%v)", a.body, err)
	}
	if !strings.Contains(*got.Error, wantMessage) {
		t.Errorf("error %q: want one containing %q", *got.Error, wantMessage)
	}
}

// TestServeGatewayAnswersOnV1: with --gateway, every /v1 path but those of
// sluice's own API is the gateway's. What it does not serve gets the
// profile's JSON 404 (unknown_url) or 405, and what the server refuses
// before the gateway sees the request (Content-Type, Host, Origin) is in
// the profile's error format too; sluice's own API answers as it does
// without the gateway.
func TestServeGatewayAnswersOnV1(t *testing.T) {
	t.Parallel()
	_, provider := startOpenAISim(t, "rpm=600,tpm=200000")
	const token = "api-token-0123456789abcdef"
	env := map[string]string{"SLUICE_API_TOKEN": token}
	base := startServe(t, func(k string) string { return env[k] },
		"--db", filepath.Join(t.TempDir(), "s.db"), "--provider-url", provider, "--profile", "openai",
		"--limits", "rpm=600,tpm=200000", "--gateway", "--flow", "web=2")
	const chat = `{"model":"sim-model","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	do := func(t *testing.T, method, path, body string, header map[string]string) wireAnswer {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			switch {
			case k == "Host":
				req.Host = v
			case v == "":
				req.Header.Del(k)
			default:
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return wireAnswer{resp.StatusCode, resp.Header, b}
	}

	t.Run("the gateway's paths", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name         string
			method, path string
			body         string
			header       map[string]string
			status       int
			typ, code    string
			message      string
		}{
			{"the Responses API", "POST", "/v1/responses", `{"model":"sim-model","input":"hi"}`, nil,
				404, "invalid_request_error", "unknown_url", "unknown request URL: POST /v1/responses"},
			{"embeddings", "POST", "/v1/embeddings", `{"model":"sim-model","input":"hi"}`, nil,
				404, "invalid_request_error", "unknown_url", "POST /v1/embeddings"},
			{"legacy completions", "POST", "/v1/completions", `{"model":"sim-model","prompt":"hi"}`, nil,
				404, "invalid_request_error", "unknown_url", "POST /v1/completions"},
			{"one model", "GET", "/v1/models/sim-model", "", nil,
				404, "invalid_request_error", "unknown_url", "GET /v1/models/sim-model"},
			{"a path under a gateway route", "POST", "/v1/chat/completions/x", chat, nil,
				404, "invalid_request_error", "unknown_url", "/v1/chat/completions/x"},
			{"chat completions by GET", "GET", "/v1/chat/completions", "", nil,
				405, "invalid_request_error", "method_not_allowed", "method GET is not allowed for /v1/chat/completions"},
			{"a path to clean", "GET", "/v1//models", "", nil,
				404, "invalid_request_error", "unknown_url", "GET /v1//models"},
			{"text/plain", "POST", "/v1/chat/completions", chat, map[string]string{"Content-Type": "text/plain"},
				415, "invalid_request_error", "unsupported_media_type", `Content-Type "text/plain"`},
			{"no content type", "POST", "/v1/chat/completions", chat, map[string]string{"Content-Type": ""},
				415, "invalid_request_error", "unsupported_media_type", "must send Content-Type: application/json"},
			{"text/plain to an unknown path", "POST", "/v1/responses", `{}`, map[string]string{"Content-Type": "text/plain"},
				415, "invalid_request_error", "unsupported_media_type", `Content-Type "text/plain"`},
			{"a rebound host", "POST", "/v1/chat/completions", chat, map[string]string{"Host": "evil.example"},
				421, "invalid_request_error", "misdirected_request", `host "evil.example" is not served here`},
			{"a cross-site origin", "POST", "/v1/chat/completions", chat, map[string]string{"Origin": "https://evil.example"},
				403, "invalid_request_error", "forbidden", `origin "https://evil.example"`},
			{"no client key", "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": ""},
				401, "invalid_request_error", "invalid_api_key", "missing or unknown client key"},
			{"a body over the bound", "POST", "/v1/chat/completions", `{"model":"` + strings.Repeat("m", 5<<20) + `"}`, nil,
				413, "invalid_request_error", "", "request body larger than"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				a := do(t, tc.method, tc.path, tc.body, tc.header)
				if a.status != tc.status {
					t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, a.status, a.body, tc.status)
				}
				checkOpenAIError(t, a, tc.typ, tc.code, tc.message)
				if tc.status == 405 && a.header.Get("Allow") != "POST" {
					t.Errorf("Allow %q, want POST", a.header.Get("Allow"))
				}
			})
		}
		t.Run("served", func(t *testing.T) {
			t.Parallel()
			if a := do(t, "POST", "/v1/chat/completions", chat, nil); a.status != 200 || !strings.Contains(string(a.body), `"chat.completion"`) {
				t.Errorf("POST /v1/chat/completions: %d %s", a.status, a.body)
			}
			if a := do(t, "GET", "/v1/models", "", nil); a.status != 200 || !strings.Contains(string(a.body), `"object":"list"`) {
				t.Errorf("GET /v1/models: %d %s", a.status, a.body)
			}
		})
	})

	// Sluice's own API: its answers and errors as without the gateway,
	// including the mux's plain 405 for a method it does not serve.
	t.Run("sluice's own API", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name         string
			method, path string
			body         string
			header       map[string]string
			status       int
			message      string // of {"error": "…"}; empty: a 200 with JSON
		}{
			{"runs", "GET", "/v1/runs", "", nil, 200, ""},
			{"dropped", "GET", "/v1/dropped", "", nil, 200, ""},
			{"versions", "GET", "/v1/versions", "", nil, 200, ""},
			{"no token", "GET", "/v1/runs", "", map[string]string{"Authorization": ""}, 401, "missing or wrong bearer token"},
			{"an unknown run", "GET", "/v1/runs/nope", "", nil, 404, "run"},
			{"an unknown event", "POST", "/v1/events", `{"name":"nobody/listens"}`, nil, 404, "no function"},
			{"an event as text/plain", "POST", "/v1/events", `{}`, map[string]string{"Content-Type": "text/plain"}, 415, `Content-Type "text/plain"`},
			{"a rebound host", "GET", "/v1/runs", "", map[string]string{"Host": "evil.example"}, 421, `host "evil.example"`},
			{"resume an unknown version", "POST", "/v1/versions/nope/resume", `{}`, nil, 200, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				a := do(t, tc.method, tc.path, tc.body, tc.header)
				if a.status != tc.status {
					t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, a.status, a.body, tc.status)
				}
				if tc.message == "" {
					if ct := a.header.Get("Content-Type"); ct != "application/json" || !json.Valid(a.body) {
						t.Errorf("%s %s: %s %s, want JSON", tc.method, tc.path, ct, a.body)
					}
					return
				}
				checkSluiceError(t, a, tc.message)
			})
		}
		t.Run("a method the API does not serve", func(t *testing.T) {
			t.Parallel()
			a := do(t, "POST", "/v1/runs", `{}`, nil)
			if a.status != 405 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/plain") || a.header.Get("Allow") != "GET, HEAD" {
				t.Errorf("POST /v1/runs: %d %s Allow %q %s, want the mux's own 405", a.status, a.header.Get("Content-Type"), a.header.Get("Allow"), a.body)
			}
		})
		t.Run("flows with the gateway's", func(t *testing.T) {
			t.Parallel()
			if a := do(t, "GET", "/v1/flows", "", nil); a.status != 200 || !strings.Contains(string(a.body), `"name":"web"`) {
				t.Errorf("GET /v1/flows: %d %s", a.status, a.body)
			}
		})
	})
}

// TestServeFrontWhileStarting: until serve is ready, a request to a
// gateway path gets the profile's 503 with Retry-After, the API's paths
// sluice's own; once ready, the handler answers.
func TestServeFrontWhileStarting(t *testing.T) {
	t.Parallel()
	f, err := newServeFront("opening the database", true, "openai")
	if err != nil {
		t.Fatal(err)
	}
	srv := f.server(guard.Config{Addr: "127.0.0.1:0"})
	get := func(path string) wireAnswer {
		rec := httptest.NewRecorder()
		srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1"+path, nil))
		return wireAnswer{rec.Code, rec.Header(), rec.Body.Bytes()}
	}
	a := get("/v1/models")
	if a.status != 503 || a.header.Get("Retry-After") != "1" {
		t.Fatalf("GET /v1/models while starting: %d Retry-After %q %s", a.status, a.header.Get("Retry-After"), a.body)
	}
	checkOpenAIError(t, a, "server_error", "service_unavailable", "sluice is starting")
	a = get("/v1/runs")
	if a.status != 503 {
		t.Fatalf("GET /v1/runs while starting: %d %s", a.status, a.body)
	}
	checkSluiceError(t, a, "sluice is starting (opening the database")

	f.Ready(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, path := range []string{"/v1/models", "/v1/runs"} {
		if a := get(path); a.status != http.StatusTeapot {
			t.Errorf("GET %s once ready: %d %s", path, a.status, a.body)
		}
	}

	// Without the gateway, every path is the API's.
	f, err = newServeFront("opening the database", false, "openai")
	if err != nil {
		t.Fatal(err)
	}
	srv = f.server(guard.Config{Addr: "127.0.0.1:0"})
	if a := get("/v1/models"); a.status != 503 || !strings.Contains(string(a.body), `{"error":"sluice is starting`) {
		t.Errorf("GET /v1/models while starting, without the gateway: %d %s", a.status, a.body)
	}
}

// clientLeg is what serve-gateway-check.mjs reports of one call.
type clientLeg struct {
	OK         bool   `json:"ok"`
	TextLength int    `json:"text_length"`
	Chunks     int    `json:"chunks"`
	ToolCalls  int    `json:"tool_calls"`
	Name       string `json:"name"`
	Status     int    `json:"status"`
	Message    string `json:"message"`
	Usage      *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// TestServeGatewayRealClients drives serve --gateway, in front of the
// provider simulator, with four clients no one here wrote, each pointed at
// serve's base URL unchanged: the official openai npm client, the Vercel
// AI SDK and LangChain JS (clients/node/serve-gateway-check.mjs), and
// OpenAI's cookbook processor (internal/testenv/cookbook). Each gets its
// plain, streamed and tool-bearing completions answered with text and
// usage; the AI SDK's default factory, which calls the Responses API, and
// the openai client's responses and embeddings get the gateway's JSON 404,
// whose message each client shows; the cookbook processor reads that 404
// as an API error with its message, not as a body it cannot parse. (The
// simulator never answers with a tool call: the tool leg shows that tool
// definitions, a tool call and its result pass through and are answered.)
func TestServeGatewayRealClients(t *testing.T) {
	t.Parallel()
	node, modules := testenv.NodeModules(t)
	for _, pkg := range []string{"ai", "@ai-sdk/openai", "@langchain/openai", "@langchain/core"} {
		if _, err := os.Stat(filepath.Join(modules, pkg, "package.json")); err != nil {
			browserUnavailable(t, "the %s npm package is not installed in %s", pkg, modules)
		}
	}
	script, err := filepath.Abs("../../clients/node/serve-gateway-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	model, provider := startOpenAISim(t, "rpm=600,tpm=200000")
	const token = "api-token-0123456789abcdef"
	env := map[string]string{"SLUICE_API_TOKEN": token}
	base := startServe(t, func(k string) string { return env[k] },
		"--db", filepath.Join(t.TempDir(), "s.db"), "--provider-url", provider, "--profile", "openai",
		"--limits", "rpm=600,tpm=200000", "--gateway")

	// The clients get the test's own budget: on a busy machine, loading
	// four SDKs and running their calls may be slow, which is no failure.
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "GATEWAY_BASE_URL="+base+"/v1", "GATEWAY_API_KEY="+token,
		"GATEWAY_MODEL=sim-model", "GATEWAY_NODE_MODULES="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node serve-gateway-check.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	var report map[string]map[string]clientLeg
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("serve-gateway-check.mjs printed %q: %v\nstderr:\n%s", stdout.String(), err, stderr.String())
	}
	t.Logf("the clients saw: %s", stdout.String())
	for _, client := range []string{"openai", "ai_sdk", "langchain"} {
		for _, name := range []string{"plain", "stream", "tools"} {
			l, ok := report[client][name]
			switch {
			case !ok:
				t.Errorf("%s %s: not in the report", client, name)
			case !l.OK:
				t.Errorf("%s %s: failed: %s %d %s", client, name, l.Name, l.Status, l.Message)
			case l.TextLength == 0:
				t.Errorf("%s %s: no text", client, name)
			case l.Usage == nil || l.Usage.PromptTokens == 0 || l.Usage.CompletionTokens == 0:
				t.Errorf("%s %s: usage %+v, want the provider's counts", client, name, l.Usage)
			case name == "stream" && l.Chunks < 2:
				t.Errorf("%s %s: %d chunks, want a stream", client, name, l.Chunks)
			}
		}
	}
	for _, tc := range []struct{ client, leg, path string }{
		{"ai_sdk", "default_factory", "/v1/responses"},
		{"openai", "responses", "/v1/responses"},
		{"openai", "embeddings", "/v1/embeddings"},
	} {
		l := report[tc.client][tc.leg]
		if want := "sluice gateway: unknown request URL: POST " + tc.path; l.OK || l.Status != 404 || !strings.Contains(l.Message, want) {
			t.Errorf("%s %s: ok %v, %d %q; want a 404 whose message the client shows: %q", tc.client, tc.leg, l.OK, l.Status, l.Message, want)
		}
	}

	// The cookbook processor: a batch of chat completions, then a request
	// to an endpoint the gateway does not serve.
	bodies := make([][]byte, 20)
	for i := range bodies {
		bodies[i], _ = json.Marshal(map[string]any{"model": "sim-model", "max_tokens": 16,
			"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Summarise item %d.", i)}}})
	}
	cook := func(path string, bodies [][]byte) *cookbook.Outcome {
		c := &cookbook.Client{URL: base + path, APIKey: token, MaxRequestsPerMinute: 600, MaxTokensPerMinute: 200000,
			MaxAttempts: 1, Minute: time.Minute, Pause: 15 * time.Second, Timeout: 300 * time.Second, Tick: time.Millisecond}
		return c.Run(ctx, bodies)
	}
	run := cook("/v1/chat/completions", bodies)
	if run.Succeeded != len(bodies) || run.Failed != 0 {
		t.Errorf("the cookbook processor: %+v, want every request done at its first attempt", run)
	}
	run = cook("/v1/embeddings", [][]byte{[]byte(`{"model":"sim-model","input":"hello"}`)})
	if run.Failed != 1 || run.APIErrors != 1 || run.Others != 0 || len(run.Results[0].Errors) != 1 ||
		!strings.Contains(run.Results[0].Errors[0], "unknown request URL: POST /v1/embeddings") {
		t.Errorf("the cookbook processor on /v1/embeddings: %+v, want one API error naming the URL", run)
	}
	if st := model.Stats(); st.Rejected > 0 {
		t.Errorf("the provider refused calls: %+v", st)
	}
}

// sluice serve reads a file of its own, which has no models: a file that
// routes is refused naming the key and its line, never served without its
// routes. Routes are sluice gateway's (docs/gateway.md, "Routes").
func TestServeGatewayRefusesModels(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "serve.yaml")
	conf := "provider_url: http://127.0.0.1:1/v1\nmodels:\n  - name: fast\n    targets:\n      - {name: a, upstream: http://127.0.0.1:1/v1, model: m}\n"
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := runMain(context.Background(), env, []string{"serve", "--gateway", "--config", file, "--db", filepath.Join(t.TempDir(), "s.db")})
	if code == 0 || !strings.Contains(stderr.String(), file) || !strings.Contains(stderr.String(), "models: unknown key (line 2)") {
		t.Errorf("serve with models: exit %d, stderr %q; want the key refused with its line", code, stderr.String())
	}
}
