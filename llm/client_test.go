package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

const testKey = "sk-test-5up3r53cr3t-k3y"

// recorder is a fake provider: it records every request it receives and
// answers with handle.
type recorder struct {
	mu       sync.Mutex
	requests []recorded
	count    atomic.Int64
}

type recorded struct {
	method, path, auth string
	header             http.Header
	body               map[string]any
}

func (rec *recorder) last(t *testing.T) recorded {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.requests) == 0 {
		t.Fatal("the server received no request")
	}
	return rec.requests[len(rec.requests)-1]
}

func newServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body map[string]any)) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.count.Add(1)
		var body map[string]any
		if r.Body != nil {
			data, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(data, &body)
		}
		rec.mu.Lock()
		rec.requests = append(rec.requests, recorded{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Clone(), body})
		rec.mu.Unlock()
		handle(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func userRequest(model, text string) *ChatRequest {
	return &ChatRequest{Model: model, Messages: []Message{{Role: "user", Content: text}}}
}

const completionBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1760846400,"model":"llama-3.1-8b-instant",
"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],
"usage":{"queue_time":0.01,"prompt_tokens":12,"prompt_time":0.001,"completion_tokens":3,"completion_time":0.002,"total_tokens":15}}`

func TestChat(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-ratelimit-limit-requests", "14400")
		w.Header().Set("x-ratelimit-remaining-requests", "14399")
		w.Header().Set("x-ratelimit-reset-requests", "6s")
		w.Header().Set("x-ratelimit-limit-tokens", "8000")
		w.Header().Set("x-ratelimit-remaining-tokens", "7985")
		w.Header().Set("x-ratelimit-reset-tokens", "112.5ms")
		io.WriteString(w, completionBody)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL + "/openai/v1/", APIKey: testKey, Profile: Groq,
		Header: http.Header{"X-Team": {"search"}}})
	temp := 0.2
	req := userRequest("llama-3.1-8b-instant", "Say hello.")
	req.MaxTokens = 64
	req.Temperature = &temp
	req.Stop = []string{"\n\n"}
	req.Stream = true // Chat is never a stream
	req.Extra = map[string]any{"seed": 7}

	resp, err := c.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.last(t)
	if got.method != http.MethodPost || got.path != "/openai/v1/chat/completions" {
		t.Errorf("request %s %s", got.method, got.path)
	}
	if got.auth != "Bearer "+testKey {
		t.Errorf("Authorization = %q", got.auth)
	}
	if got.header.Get("X-Team") != "search" || got.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers = %v", got.header)
	}
	wantBody := map[string]any{"model": "llama-3.1-8b-instant", "max_tokens": 64.0, "temperature": 0.2,
		"stop": []any{"\n\n"}, "seed": 7.0,
		"messages": []any{map[string]any{"role": "user", "content": "Say hello."}}}
	if fmt.Sprint(got.body) != fmt.Sprint(wantBody) {
		t.Errorf("body = %v\nwant %v", got.body, wantBody)
	}
	if !req.Stream {
		t.Error("Chat changed the caller's request")
	}
	if resp.Text() != "Hello there." || resp.Choices[0].FinishReason != "stop" || resp.ID != "chatcmpl-1" {
		t.Errorf("response = %+v", resp)
	}
	if resp.Usage != (Usage{PromptTokens: 12, CompletionTokens: 3, TotalTokens: 15}) {
		t.Errorf("usage = %+v", resp.Usage)
	}
	if u := resp.Usage.Governor(); u != (governor.Cost{Input: 12, Output: 3}) {
		t.Errorf("governor usage = %+v", u)
	}
	wantSnap := governor.Snapshot{
		governor.RPD: {Known: true, Limit: 14400, Remaining: 14399, Reset: 6 * time.Second, Source: "X-Ratelimit-Limit-Requests"},
		governor.TPM: {Known: true, Limit: 8000, Remaining: 7985, Reset: 112500 * time.Microsecond, Source: "X-Ratelimit-Limit-Tokens"},
	}
	if resp.Snapshot != wantSnap {
		t.Errorf("snapshot = %+v", resp.Snapshot)
	}
	if resp.Header.Get("x-ratelimit-limit-tokens") != "8000" || string(resp.Body) != completionBody {
		t.Error("header or raw body not kept")
	}
}

func TestChatMaxTokens(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		io.WriteString(w, completionBody)
	})
	tests := []struct {
		name    string
		cfg     Config
		req     *ChatRequest
		wantMax float64
		wantErr error
	}{
		{"request's own wins", Config{DefaultMaxTokens: 500, ModelMaxTokens: map[string]int{"m": 300}},
			&ChatRequest{Model: "m", MaxTokens: 42}, 42, nil},
		{"per-model default", Config{DefaultMaxTokens: 500, ModelMaxTokens: map[string]int{"m": 300}},
			&ChatRequest{Model: "m"}, 300, nil},
		{"global default", Config{DefaultMaxTokens: 500, ModelMaxTokens: map[string]int{"other": 300}},
			&ChatRequest{Model: "m"}, 500, nil},
		{"none: nothing is sent", Config{ModelMaxTokens: map[string]int{"other": 300}},
			&ChatRequest{Model: "m"}, 0, ErrNoMaxTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.BaseURL = srv.URL
			c := newTestClient(t, cfg)
			before := rec.count.Load()
			tt.req.Messages = []Message{{Role: "user", Content: "hi"}}
			_, err := c.Chat(context.Background(), tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				if n := rec.count.Load() - before; n != 0 {
					t.Fatalf("%d requests were sent", n)
				}
				if _, err := c.ChatStream(context.Background(), tt.req); !errors.Is(err, ErrNoMaxTokens) {
					t.Fatalf("ChatStream err = %v", err)
				}
				if n := rec.count.Load() - before; n != 0 {
					t.Fatalf("%d requests were sent by ChatStream", n)
				}
				if !strings.Contains(err.Error(), "max_tokens") {
					t.Errorf("error should say what to set: %v", err)
				}
				return
			}
			name := "max_completion_tokens" // a default, named as OpenAI takes it
			if tt.req.MaxTokens != 0 {
				name = "max_tokens" // the caller's, named as it was
			}
			if got := rec.last(t).body[name]; got != tt.wantMax {
				t.Errorf("%s sent = %v, want %v", name, got, tt.wantMax)
			}
			if tt.req.MaxTokens != 0 && tt.req.MaxTokens != int(tt.wantMax) {
				t.Error("the caller's request was changed")
			}
		})
	}
}

func TestChatCompletionTokensName(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		io.WriteString(w, completionBody)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 99})
	req := userRequest("o3-mini", "hi")
	req.CompletionTokensName = true
	if _, err := c.Chat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	body := rec.last(t).body
	if body["max_completion_tokens"] != 99.0 || body["max_tokens"] != nil {
		t.Fatalf("body = %v", body)
	}
}

func TestChatErrors(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 3, 59, 0, 0, time.UTC)
	tests := []struct {
		name    string
		profile Profile
		status  int
		header  http.Header
		body    string
		check   func(t *testing.T, err error)
	}{
		{"groq TPM 429", Groq, 429, header("retry-after", "6"), groqTPMBody, func(t *testing.T, err error) {
			var rl *RateLimitError
			if !errors.As(err, &rl) || rl.Limit != governor.TPM || rl.RetryAfter != 6*time.Second {
				t.Fatalf("err = %#v", err)
			}
		}},
		{"seed OTPM 429", Groq, 429, header("retry-after", "900"), groqOTPMSeedBody, func(t *testing.T, err error) {
			var tl *TooLargeError
			if !errors.As(err, &tl) || tl.Limit != governor.OTPM || Retryable(err) {
				t.Fatalf("err = %#v", err)
			}
		}},
		{"http-date retry-after uses the client's clock", OpenAI, 429,
			header("retry-after", now.Add(42*time.Second).Format(http.TimeFormat)), "", func(t *testing.T, err error) {
				if d, ok := RetryAfter(err); !ok || d != 42*time.Second {
					t.Fatalf("RetryAfter = %v, %v (err %v)", d, ok, err)
				}
			}},
		{"malformed 2xx body", OpenAI, 200, nil, `{"id":"x","choices":[{"message":`, func(t *testing.T, err error) {
			var te *TransportError
			if !errors.As(err, &te) || te.Kind != Malformed || !Retryable(err) {
				t.Fatalf("err = %#v", err)
			}
		}},
		{"2xx without choices", OpenAI, 200, nil, `{"id":"x"}`, func(t *testing.T, err error) {
			var te *TransportError
			if !errors.As(err, &te) || te.Kind != Malformed {
				t.Fatalf("err = %#v", err)
			}
		}},
		{"2xx carrying an error object", OpenAI, 200, nil, openaiTPMBody, func(t *testing.T, err error) {
			if l, ok := LimitOf(err); !ok || l != governor.TPM {
				t.Fatalf("err = %#v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				for k, v := range tt.header {
					w.Header()[k] = v
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			c := newTestClient(t, Config{BaseURL: srv.URL, Profile: tt.profile, DefaultMaxTokens: 10,
				Now: func() time.Time { return now }})
			_, err := c.Chat(context.Background(), userRequest("m", "hi"))
			if err == nil {
				t.Fatal("no error")
			}
			tt.check(t, err)
		})
	}
}

func TestChatTransportFailures(t *testing.T) {
	t.Parallel()
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10,
			HTTPClient: &http.Client{Timeout: 50 * time.Millisecond}})
		_, err := c.Chat(context.Background(), userRequest("m", "hi"))
		var te *TransportError
		if !errors.As(err, &te) || te.Kind != Timeout || !Retryable(err) {
			t.Fatalf("err = %#v", err)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Chat(ctx, userRequest("m", "hi"))
		var te *TransportError
		if !errors.As(err, &te) || te.Kind != Timeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %#v", err)
		}
	})
	t.Run("cancelled context is not retryable", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{})
		srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			close(arrived)
			<-r.Context().Done()
		})
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-arrived; cancel() }()
		_, err := c.Chat(ctx, userRequest("m", "hi"))
		var te *TransportError
		if !errors.Is(err, context.Canceled) || errors.As(err, &te) || Retryable(err) {
			t.Fatalf("err = %#v, want context.Canceled", err)
		}
	})
	t.Run("connection closed mid-response", func(t *testing.T) {
		t.Parallel()
		srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"id\":")
			buf.Flush()
			conn.Close()
		})
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10})
		_, err := c.Chat(context.Background(), userRequest("m", "hi"))
		var te *TransportError
		if !errors.As(err, &te) || te.Kind != Reset || !Retryable(err) {
			t.Fatalf("err = %#v", err)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		c := newTestClient(t, Config{BaseURL: url, DefaultMaxTokens: 10})
		_, err := c.Chat(context.Background(), userRequest("m", "hi"))
		var te *TransportError
		if !errors.As(err, &te) || !Retryable(err) {
			t.Fatalf("err = %#v", err)
		}
	})
}

func TestModels(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		io.WriteString(w, `{"object":"list","data":[
			{"id":"llama-3.1-8b-instant","object":"model","created":1693721698,"owned_by":"Meta","context_window":131072},
			{"id":"openai/gpt-oss-20b","object":"model","created":1754407957,"owned_by":"OpenAI"}]}`)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL, APIKey: testKey, Profile: Groq})
	models, err := c.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := rec.last(t)
	if got.method != http.MethodGet || got.path != "/models" || got.auth != "Bearer "+testKey {
		t.Errorf("request %s %s %q", got.method, got.path, got.auth)
	}
	if len(models) != 2 || models[0].ID != "llama-3.1-8b-instant" || models[0].OwnedBy != "Meta" ||
		models[0].Created != 1693721698 || models[1].ID != "openai/gpt-oss-20b" {
		t.Fatalf("models = %+v", models)
	}
	if !strings.Contains(string(models[0].Raw), `"context_window":131072`) {
		t.Errorf("raw entry lost provider fields: %s", models[0].Raw)
	}
}

func TestModelsError(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.WriteHeader(401)
		io.WriteString(w, `{"error":{"message":"Invalid API Key","type":"invalid_request_error","code":"invalid_api_key"}}`)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL})
	_, err := c.Models(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 401 || Retryable(err) {
		t.Fatalf("err = %#v", err)
	}
}

// TestKeyNeverInErrors drives every kind of failure with a server that
// echoes the key back and checks no error string, nor the printed config,
// carries it.
func TestKeyNeverInErrors(t *testing.T) {
	t.Parallel()
	echo := func(status int, shape string) func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			w.WriteHeader(status)
			fmt.Fprintf(w, shape, key)
		}
	}
	cases := map[string]func(w http.ResponseWriter, r *http.Request, body map[string]any){
		"401":          echo(401, `{"error":{"message":"Incorrect API key provided: %s.","type":"invalid_request_error","code":"invalid_api_key"}}`),
		"429":          echo(429, `{"error":{"message":"Rate limit reached for key %s on tokens per minute (TPM): Limit 1, Used 1, Requested 1."}}`),
		"413":          echo(413, `{"error":{"message":"Request too large for key %s"}}`),
		"quota":        echo(429, `{"error":{"message":"You exceeded your current quota, key %s","code":"insufficient_quota"}}`),
		"529":          echo(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded %s"}}`),
		"500 text":     echo(500, `upstream saw %s`),
		"bad stream":   echo(200, "data: {\"error\":{\"message\":\"stream broke for %s\"}}\n\n"),
		"bad json 2xx": echo(200, `{"oops": "%s"`),
	}
	for name, handle := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, handle)
			c := newTestClient(t, Config{BaseURL: srv.URL, APIKey: testKey, DefaultMaxTokens: 10})
			_, err := c.Chat(context.Background(), userRequest("m", "hi"))
			s, serr := c.ChatStream(context.Background(), userRequest("m", "hi"))
			if serr == nil {
				for s.Next() {
				}
				serr = s.Err()
			}
			_, merr := c.Models(context.Background())
			for _, e := range []error{err, serr, merr} {
				if e == nil {
					continue
				}
				if strings.Contains(e.Error(), testKey) || strings.Contains(fmt.Sprintf("%#v %+v", e, e), testKey) {
					t.Errorf("error carries the key: %v", e)
				}
			}
			if err == nil && serr == nil {
				t.Error("no error at all")
			}
		})
	}
	t.Run("transport error with the key in the URL path", func(t *testing.T) {
		t.Parallel()
		// A misconfigured BaseURL that embeds the key must not leak it either.
		c := newTestClient(t, Config{BaseURL: "http://127.0.0.1:1/" + testKey, APIKey: testKey, DefaultMaxTokens: 10})
		_, err := c.Chat(context.Background(), userRequest("m", "hi"))
		if err == nil || strings.Contains(err.Error(), testKey) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("printing the config or client", func(t *testing.T) {
		t.Parallel()
		cfg := Config{BaseURL: "http://example.invalid/" + testKey, APIKey: testKey}
		c := newTestClient(t, cfg)
		for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg),
			fmt.Sprintf("%v", &cfg), fmt.Sprint(c), fmt.Sprintf("%+v", c)} {
			if strings.Contains(s, testKey) {
				t.Errorf("printed form carries the key: %s", s)
			}
		}
	})
}

func TestNewClientValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"bad profile", Config{Profile: "mistral"}, `unknown profile "mistral"`},
		{"bad base url", Config{BaseURL: "api.groq.com/openai/v1"}, "is not an http(s) URL"},
		{"credentials in url", Config{BaseURL: "https://user:pw@example.com/v1"}, "must not carry credentials"},
		{"query in url", Config{BaseURL: "https://example.com/v1?key=x"}, "must not have a query"},
		{"negative default", Config{DefaultMaxTokens: -1}, "DefaultMaxTokens -1 is negative"},
		{"zero per model", Config{ModelMaxTokens: map[string]int{"m": 0}}, `ModelMaxTokens["m"] = 0`},
		{"two authorizations", Config{APIKey: "k", Header: http.Header{"Authorization": {"Bearer x"}}}, "Header sets Authorization"},
		{"timeout in bare nanoseconds", Config{Timeouts: Timeouts{Total: 600}}, "Timeouts.Total 600ns is under a millisecond"},
	}
	for _, tt := range tests {
		_, err := NewClient(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
	c, err := NewClient(Config{Profile: "GROQ"})
	if err != nil || c.Profile() != Groq || c.cfg.BaseURL != "https://api.groq.com/openai/v1" {
		t.Errorf("profile defaults: %v %v", c, err)
	}
	c, err = NewClient(Config{})
	if err != nil || c.Profile() != OpenAI || c.cfg.BaseURL != "https://api.openai.com/v1" {
		t.Errorf("zero config: %v %v", c, err)
	}
}

func TestChatRaw(t *testing.T) {
	t.Parallel()
	const answer = `{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15},"x_extra":{"kept":true}}`
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		switch {
		case r.Header.Get("Authorization") != "Bearer sk-raw-123456":
			w.WriteHeader(http.StatusUnauthorized)
		case bytes.Contains(got, []byte(`"limit"`)):
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached for model m on tokens per minute (TPM): Limit 8000, Used 7972, Requested 1351. Please try again in 5.289s.","type":"tokens","code":"rate_limit_exceeded"}}`))
		case bytes.Contains(got, []byte(`"nochoices"`)):
			_, _ = w.Write([]byte(`{"id":"c2"}`))
		default:
			w.Header().Set("x-ratelimit-limit-tokens", "8000")
			w.Header().Set("x-ratelimit-remaining-tokens", "7000")
			w.Header().Set("x-ratelimit-reset-tokens", "7.5s")
			_, _ = w.Write([]byte(answer))
		}
	}))
	defer srv.Close()
	c, err := NewClient(Config{BaseURL: srv.URL, APIKey: "sk-raw-123456", Profile: Groq})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"hello"}],"vendor_field":[1,2]}`)
	resp, err := c.ChatRaw(context.Background(), body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, body) {
		t.Errorf("sent %s, want the body unchanged: %s", got, body)
	}
	if string(resp.Body) != answer {
		t.Errorf("answer %s, want it unchanged", resp.Body)
	}
	if resp.Usage == nil || resp.Usage.PromptTokens != 12 || resp.Usage.CompletionTokens != 3 {
		t.Errorf("usage = %+v", resp.Usage)
	}
	if o := resp.Snapshot[governor.TPM]; !o.Known || o.Remaining != 7000 {
		t.Errorf("snapshot TPM = %+v", o)
	}
	_, err = c.ChatRaw(context.Background(), []byte(`{"model":"limit","max_tokens":1}`))
	var rl *RateLimitError
	if !errors.As(err, &rl) || rl.Limit != governor.TPM || rl.RetryAfter < 7*time.Second {
		t.Errorf("429 = %v, want a RateLimitError on TPM with the retry time", err)
	}
	_, err = c.ChatRaw(context.Background(), []byte(`{"model":"nochoices","max_tokens":1}`))
	var te *TransportError
	if !errors.As(err, &te) || te.Kind != Malformed {
		t.Errorf("answer without choices = %v, want a Malformed TransportError", err)
	}
}
