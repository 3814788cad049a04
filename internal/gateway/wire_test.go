package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// bodyRecorder is an upstream that keeps the body of every chat request
// and answers it with a short completion, streamed when asked.
type bodyRecorder struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (u *bodyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(data, &body)
	u.mu.Lock()
	u.bodies = append(u.bodies, body)
	u.mu.Unlock()
	if body["stream"] == true {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi."},"finish_reason":"stop"}]}`+"\n\n")
		io.WriteString(w, `data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`+"\n\ndata: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
}

func (u *bodyRecorder) last(t *testing.T) map[string]any {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		t.Fatal("the upstream got no request")
	}
	return u.bodies[len(u.bodies)-1]
}

// The maximum the gateway gives a request that names none is named as the
// profile takes it for the model — acceptance: a request with no maximum
// to a gpt-5-style model reaches the provider with max_completion_tokens,
// never max_tokens — and a request that names its own keeps its name.
func TestGatewayAddsTheMaximumTheModelTakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		profile llm.Profile
		model   string
		extra   string // the request's own maximum, and stream
		field   string // the name the upstream must get, alone
		want    float64
	}{
		{"openai gpt-5, no maximum", llm.OpenAI, "gpt-5", "", "max_completion_tokens", 700},
		{"openai gpt-5, no maximum, streamed", llm.OpenAI, "gpt-5-mini", `,"stream":true`, "max_completion_tokens", 700},
		{"openai o3, no maximum", llm.OpenAI, "o3", "", "max_completion_tokens", 700},
		{"openai gpt-4o, no maximum", llm.OpenAI, "gpt-4o-mini", "", "max_completion_tokens", 700},
		{"groq, no maximum", llm.Groq, "llama-3.1-8b-instant", "", "max_completion_tokens", 700},
		{"anthropic, no maximum", llm.Anthropic, "claude-sonnet-4-5", "", "max_tokens", 700},
		{"anthropic, no maximum, streamed", llm.Anthropic, "claude-sonnet-4-5", `,"stream":true`, "max_tokens", 700},
		{"its own max_tokens", llm.OpenAI, "gpt-4o", `,"max_tokens":40`, "max_tokens", 40},
		{"its own max_tokens, streamed", llm.OpenAI, "gpt-4o", `,"max_tokens":40,"stream":true`, "max_tokens", 40},
		{"its own max_completion_tokens", llm.Anthropic, "claude-sonnet-4-5", `,"max_completion_tokens":40`, "max_completion_tokens", 40},
		{"its own max_completion_tokens, streamed", llm.Anthropic, "claude-sonnet-4-5", `,"max_completion_tokens":40,"stream":true`, "max_completion_tokens", 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := &bodyRecorder{}
			upstream := httptest.NewServer(up)
			t.Cleanup(upstream.Close)
			gw, err := New(context.Background(), Config{Upstream: upstream.URL + "/v1", Profile: tc.profile,
				Limits: limits("rpm=100,tpm=100000"), DefaultMaxTokens: 700})
			if err != nil {
				t.Fatal(err)
			}
			start(t, gw)
			srv := httptest.NewServer(gw)
			t.Cleanup(srv.Close)
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"`+tc.model+`","messages":[{"role":"user","content":"hi"}]`+tc.extra+`}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			got := up.last(t)
			other := "max_tokens"
			if tc.field == other {
				other = "max_completion_tokens"
			}
			if got[tc.field] != tc.want || got[other] != nil {
				t.Errorf("the upstream got %v; want %s %v and no %s", got, tc.field, tc.want, other)
			}
		})
	}
}

// A request that can never fit is told to lower the field it sent, by the
// name it sent it under.
func TestTooLargeNamesTheFieldSent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, extra string
		want        string
		wantNot     string
	}{
		{"max_completion_tokens", `,"max_completion_tokens":1252`, "Lower max_completion_tokens: max_completion_tokens ≤ 1,000 fits.", "max_tokens ≤"},
		{"max_completion_tokens, streamed", `,"max_completion_tokens":1252,"stream":true`, "Lower max_completion_tokens: max_completion_tokens ≤ 1,000 fits.", "max_tokens ≤"},
		{"max_completion_tokens and n", `,"max_completion_tokens":600,"n":2`, "Lower max_completion_tokens or n: with n = 2, max_completion_tokens ≤ 500 fits.", "max_tokens ≤"},
		{"max_tokens", `,"max_tokens":1252`, "Lower max_tokens: max_tokens ≤ 1,000 fits.", "max_completion_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("otpm=1000")}, Config{Limits: limits("otpm=1000")})
			resp, body := b.do(t, "POST", "/v1/chat/completions",
				`{"model":"gpt-5","messages":[{"role":"user","content":"Write a long essay."}]`+tc.extra+`}`, nil)
			if status(resp) != 413 || !strings.Contains(string(body), tc.want) || strings.Contains(string(body), tc.wantNot) {
				t.Errorf("%d %s\nwant 413 saying %q, never %q", status(resp), body, tc.want, tc.wantNot)
			}
			// The refusal counts once under its flow, as every refusal
			// the governor makes up front does.
			var refused int64
			for _, f := range b.gw.Governor().Stats(b.gw.cfg.Now()).Flows {
				refused += f.Refusals[governor.OTPM]
			}
			if refused != 1 {
				t.Errorf("OTPM refusals counted: %d, want 1", refused)
			}
		})
	}
}

// The gateway's own 429 is typed after what holds the request, in the
// profile's words: "tokens" while a token limit holds it, "requests" while
// a request limit or the gateway's line does, Anthropic's rate_limit_error
// with the limit named in the message.
func TestOwnRateLimitTypeNamesTheLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile       llm.Profile
		limits        string
		typ, code, on string
	}{
		{llm.OpenAI, "tpm=1000", "tokens", "rate_limit_exceeded", "tpm"},
		{llm.OpenAI, "rpm=1", "requests", "rate_limit_exceeded", "rpm"},
		{llm.Groq, "otpm=1000", "tokens", "rate_limit_exceeded", "otpm"},
		{llm.Groq, "rpm=1", "requests", "rate_limit_exceeded", "rpm"},
		{llm.Anthropic, "itpm=1000,otpm=1000", "rate_limit_error", "", "otpm"},
	} {
		t.Run(string(tc.profile)+"/"+tc.limits, func(t *testing.T) {
			t.Parallel()
			now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			b := setup(t, forecast.ModelConfig{Profile: tc.profile, Limits: limits(tc.limits)},
				Config{Limits: limits(tc.limits), Now: func() time.Time { return now }})
			if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("first", 900, ""), nil); status(resp) != 200 {
				t.Fatalf("first: %d %s", status(resp), body)
			}
			resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("second", 900, ""), map[string]string{MaxWaitHeader: "1ms"})
			if status(resp) != 429 || resp.Header.Get(WaitingOnHeader) != tc.on {
				t.Fatalf("%d waiting on %q: %s; want 429 waiting on %s", status(resp), resp.Header.Get(WaitingOnHeader), body, tc.on)
			}
			typ, code, msg := errorFields(t, tc.profile, body)
			if typ != tc.typ || code != tc.code || !strings.Contains(msg, "It waits on "+tc.on) {
				t.Errorf("type %q code %q message %q; want type %q code %q and %s named", typ, code, msg, tc.typ, tc.code, tc.on)
			}
		})
	}
}

// What the gateway writes of its own and of the provider's refusals is
// typed as the profile types the limit: a table over the writers.
func TestRefusalTypes(t *testing.T) {
	t.Parallel()
	tpm := governor.Blocker{Kind: "limit", Limit: governor.TPM}
	for _, tc := range []struct {
		name      string
		profile   llm.Profile
		e         *apiError
		typ, code string
	}{
		{"waiting on tpm", llm.OpenAI, notAdmitted(llm.OpenAI, "f", time.Second, time.Minute, tpm, ""), "tokens", "rate_limit_exceeded"},
		{"tpd pacing", llm.Groq, notAdmitted(llm.Groq, "f", time.Second, time.Minute, governor.Blocker{Kind: "pacing", Limit: governor.TPD}, ""), "tokens", "rate_limit_exceeded"},
		{"waiting on rpd", llm.Groq, notAdmitted(llm.Groq, "f", time.Second, time.Minute, governor.Blocker{Kind: "limit", Limit: governor.RPD}, ""), "requests", "rate_limit_exceeded"},
		{"its turn", llm.OpenAI, notAdmitted(llm.OpenAI, "f", time.Second, time.Minute, governor.Blocker{Kind: "turn"}, ""), "requests", "rate_limit_exceeded"},
		{"anthropic", llm.Anthropic, notAdmitted(llm.Anthropic, "f", time.Second, time.Minute, tpm, ""), "rate_limit_error", ""},
		{"line full", llm.OpenAI, lineFull(llm.OpenAI, "too many waiting"), "requests", "rate_limit_exceeded"},
		{"upstream rpm", llm.OpenAI, upstreamError(llm.OpenAI, &llm.RateLimitError{Limit: governor.RPM, LimitKnown: true, Message: "m"}), "requests", "rate_limit_exceeded"},
		{"upstream tpm", llm.Groq, upstreamError(llm.Groq, &llm.RateLimitError{Limit: governor.TPM, LimitKnown: true, Message: "m"}), "tokens", "rate_limit_exceeded"},
		{"upstream, no limit named", llm.OpenAI, upstreamError(llm.OpenAI, &llm.RateLimitError{Message: "m"}), "tokens", "rate_limit_exceeded"},
		{"upstream, anthropic", llm.Anthropic, upstreamError(llm.Anthropic, &llm.RateLimitError{Limit: governor.OTPM, LimitKnown: true, Message: "m"}), "rate_limit_error", ""},
		{"upstream too large rpd", llm.Groq, upstreamError(llm.Groq, &llm.TooLargeError{Limit: governor.RPD, LimitKnown: true, Message: "m"}), "requests", "rate_limit_exceeded"},
		{"upstream too large, anthropic", llm.Anthropic, upstreamError(llm.Anthropic, &llm.TooLargeError{Limit: governor.OTPM, LimitKnown: true, Message: "m"}), "invalid_request_error", ""},
		{"upstream overloaded, anthropic", llm.Anthropic, upstreamError(llm.Anthropic, &llm.OverloadedError{Status: 529}), "overloaded_error", ""},
		{"upstream overloaded, openai", llm.OpenAI, upstreamError(llm.OpenAI, &llm.OverloadedError{Status: 503}), "server_error", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			tc.e.write(w, tc.profile)
			typ, code, _ := errorFields(t, tc.profile, w.Body.Bytes())
			if typ != tc.typ || code != tc.code {
				t.Errorf("type %q code %q, want %q %q: %s", typ, code, tc.typ, tc.code, w.Body)
			}
		})
	}
}

// errorFields reads an error body in profile p's shape, failing the test
// when it is not one.
func errorFields(t *testing.T, p llm.Profile, body []byte) (typ, code, message string) {
	t.Helper()
	var b struct {
		Type  string `json:"type"`
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Error == nil || b.Error.Message == "" || b.Error.Type == "" {
		t.Fatalf("not an error body: %s", body)
	}
	if (p == llm.Anthropic) != (b.Type == "error") {
		t.Fatalf("%s: not in the %s shape: %s", p, p, body)
	}
	if b.Error.Code != nil {
		code = *b.Error.Code
	}
	return b.Error.Type, code, b.Error.Message
}

// Every method on every route of the gateway answers in the profile's
// error shape: 405 with Allow on a route it serves with another method,
// as OpenAI answers GET /v1/chat/completions; 404 unknown_url on a URL it
// does not serve, however it is spelled — never the mux's text/plain or its
// redirect.
func TestEveryRouteAnswersTheProfilesJSON(t *testing.T) {
	t.Parallel()
	type call struct {
		method, path string
		status       int
		allow, code  string
	}
	calls := []call{
		{"GET", "/v1/chat/completions", 405, "POST", "method_not_allowed"},
		{"HEAD", "/v1/chat/completions", 405, "POST", ""},
		{"PUT", "/v1/chat/completions", 405, "POST", "method_not_allowed"},
		{"DELETE", "/v1/chat/completions", 405, "POST", "method_not_allowed"},
		{"PATCH", "/v1/chat/completions", 405, "POST", "method_not_allowed"},
		{"OPTIONS", "/v1/chat/completions", 405, "POST", "method_not_allowed"},
		{"POST", "/v1/models", 405, "GET, HEAD", "method_not_allowed"},
		{"DELETE", "/v1/flows", 405, "GET, HEAD", "method_not_allowed"},
		{"POST", "/metrics", 405, "GET, HEAD", "method_not_allowed"},
		{"POST", "/v1/responses", 404, "", "unknown_url"},
		{"POST", "/v1/embeddings", 404, "", "unknown_url"},
		{"POST", "/v1/completions", 404, "", "unknown_url"},
		{"GET", "/v1/models/gpt-4o", 404, "", "unknown_url"},
		{"GET", "/", 404, "", "unknown_url"},
		{"POST", "/v1/chat/completions/", 404, "", "unknown_url"},
		{"POST", "//v1/chat/completions", 404, "", "unknown_url"},
		{"POST", "/v1/./chat/completions", 404, "", "unknown_url"},
		{"GET", "/v1/../v1/models", 404, "", "unknown_url"},
		{"BREW", "/v1/chat/completions", 405, "POST", "method_not_allowed"},
	}
	for _, p := range llm.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			b := setup(t, forecast.ModelConfig{Profile: p}, Config{})
			client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			for _, c := range calls {
				req, err := http.NewRequest(c.method, b.srv.URL, strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				req.URL.Opaque = c.path // sent as written, not cleaned
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				what := c.method + " " + c.path
				if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("%s: %d, Allow %q, %s; want %d, Allow %q, application/json", what, resp.StatusCode, resp.Header.Get("Allow"),
						resp.Header.Get("Content-Type"), c.status, c.allow)
					continue
				}
				if c.method == "HEAD" {
					continue // no body
				}
				_, code, msg := errorFields(t, p, body)
				if p != llm.Anthropic && code != c.code || !strings.Contains(msg, "sluice gateway") {
					t.Errorf("%s: code %q message %q; want %q", what, code, msg, c.code)
				}
			}
		})
	}
}
