package llm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// sseServer answers every chat request with the given event-stream text and
// the given headers, flushing after each event.
func sseServer(t *testing.T, h http.Header, events ...string) (*Client, *recorder) {
	t.Helper()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		for k, v := range h {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, e := range events {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	})
	return newTestClient(t, Config{BaseURL: srv.URL, Profile: Groq, DefaultMaxTokens: 100}), rec
}

func drain(s *Stream) (text string, chunks int) {
	var b strings.Builder
	for s.Next() {
		chunks++
		b.WriteString(s.Chunk().Text())
	}
	return b.String(), chunks
}

func TestChatStream(t *testing.T) {
	t.Parallel()
	c, rec := sseServer(t, header("x-ratelimit-remaining-tokens", "7000", "x-ratelimit-limit-tokens", "8000"),
		": keep-alive comment\n\n",
		`data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n",
		// One event split across two data lines, joined with "\n".
		"data: {\"id\":\"c1\",\"model\":\"m\",\n"+`data: "choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`+"\n\n",
		"event: message\r\n"+`data: {"id":"c1","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}`+"\r\n\r\n",
		"id: 7\nretry: 1000\n"+`data:{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n",
		`data: {"id":"c1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`+"\n\n",
		"data: [DONE]\n\n",
	)
	req := userRequest("m", "hi")
	req.Extra = map[string]any{"stream_options": map[string]any{"foo": "bar"}}
	s, err := c.ChatStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The header snapshot is there before the first chunk.
	if o := s.Snapshot()[governor.TPM]; !o.Known || o.Remaining != 7000 || o.Limit != 8000 {
		t.Errorf("snapshot = %+v", o)
	}
	if s.Header().Get("x-ratelimit-limit-tokens") != "8000" {
		t.Error("header missing")
	}
	body := rec.last(t).body
	if body["stream"] != true {
		t.Errorf("stream = %v", body["stream"])
	}
	opts, _ := body["stream_options"].(map[string]any)
	if opts["include_usage"] != true || opts["foo"] != "bar" {
		t.Errorf("stream_options = %v", body["stream_options"])
	}
	if body["max_completion_tokens"] != 100.0 || body["max_tokens"] != nil { // as OpenAI takes the default
		t.Errorf("max_completion_tokens = %v, max_tokens = %v", body["max_completion_tokens"], body["max_tokens"])
	}
	if _, ok := req.Extra["stream_options"].(map[string]any)["include_usage"]; ok || req.Stream {
		t.Error("ChatStream changed the caller's request")
	}

	text, chunks := drain(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if text != "Hello" || chunks != 5 {
		t.Errorf("text %q in %d chunks", text, chunks)
	}
	if u := s.Usage(); u == nil || *u != (Usage{PromptTokens: 9, CompletionTokens: 2, TotalTokens: 11}) {
		t.Errorf("usage = %+v", u)
	}
	if s.Next() {
		t.Error("Next after the end")
	}
}

func TestChatStreamGroqUsage(t *testing.T) {
	t.Parallel()
	c, _ := sseServer(t, nil,
		`data: {"id":"c1","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}}`+"\n\n",
		"data: [DONE]\n\n",
	)
	s, err := c.ChatStream(context.Background(), userRequest("m", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	drain(s)
	if u := s.Usage(); s.Err() != nil || u == nil || u.TotalTokens != 6 {
		t.Fatalf("usage %+v, err %v", u, s.Err())
	}
}

func TestChatStreamFailures(t *testing.T) {
	t.Parallel()
	first := `data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}` + "\n\n"
	tests := []struct {
		name   string
		events []string
		chunks int
		check  func(t *testing.T, err error)
	}{
		{"error event mid-stream", []string{first,
			`data: {"error":{"message":"Rate limit reached for model m on tokens per minute (TPM): Limit 8000, Used 8000, Requested 100. Please try again in 2s.","type":"tokens","code":"rate_limit_exceeded"}}` + "\n\n"},
			1, func(t *testing.T, err error) {
				var rl *RateLimitError
				if !errors.As(err, &rl) || rl.Limit != governor.TPM || rl.RetryAfter != 2*time.Second {
					t.Fatalf("err = %#v", err)
				}
			}},
		{"named error event (anthropic overload)", []string{first,
			"event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"},
			1, func(t *testing.T, err error) {
				var ov *OverloadedError
				if !errors.As(err, &ov) || !Retryable(err) {
					t.Fatalf("err = %#v", err)
				}
			}},
		{"unknown error event is retryable", []string{first,
			`data: {"error":{"message":"internal failure","type":"server_error"}}` + "\n\n"},
			1, func(t *testing.T, err error) {
				var se *StatusError
				if !errors.As(err, &se) || se.Status != 0 || !Retryable(err) {
					t.Fatalf("err = %#v", err)
				}
			}},
		{"malformed JSON", []string{first, `data: {"id":"c1","choices":[{"delta":` + "\n\n"},
			1, func(t *testing.T, err error) {
				var te *TransportError
				if !errors.As(err, &te) || te.Kind != Malformed || !Retryable(err) {
					t.Fatalf("err = %#v", err)
				}
			}},
		{"ends before any finish", []string{first},
			1, func(t *testing.T, err error) {
				var te *TransportError
				if !errors.As(err, &te) || te.Kind != Reset {
					t.Fatalf("err = %#v", err)
				}
			}},
		{"ends after finish without [DONE] is clean", []string{first,
			`data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
			2, func(t *testing.T, err error) {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := sseServer(t, nil, tt.events...)
			s, err := c.ChatStream(context.Background(), userRequest("m", "hi"))
			if err != nil {
				t.Fatal(err)
			}
			if _, n := drain(s); n != tt.chunks {
				t.Errorf("%d chunks, want %d", n, tt.chunks)
			}
			tt.check(t, s.Err())
		})
	}
}

func TestChatStreamErrorStatus(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("retry-after", "900")
		w.WriteHeader(429)
		io.WriteString(w, groqOTPMSeedBody)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL, Profile: Groq, DefaultMaxTokens: 2048})
	_, err := c.ChatStream(context.Background(), userRequest("m", "hi"))
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != governor.OTPM || tl.Requested != 1252 {
		t.Fatalf("err = %#v", err)
	}
}

func TestChatStreamJSONInsteadOfEvents(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completionBody)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10})
	_, err := c.ChatStream(context.Background(), userRequest("m", "hi"))
	var te *TransportError
	if !errors.As(err, &te) || te.Kind != Malformed {
		t.Fatalf("err = %#v", err)
	}
}

func TestStreamCloseFromAnotherGoroutine(t *testing.T) {
	t.Parallel()
	sent := make(chan struct{})
	release := make(chan struct{})
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c1","choices":[{"index":0,"delta":{"content":"a"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		close(sent)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10})
	s, err := c.ChatStream(context.Background(), userRequest("m", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatalf("first chunk: %v", s.Err())
	}
	<-sent
	done := make(chan bool)
	go func() { done <- s.Next() }()
	s.Close()
	select {
	case more := <-done:
		if more || s.Err() != nil {
			t.Fatalf("after Close: Next = %v, Err = %v", more, s.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return after Close")
	}
	s.Close() // twice is fine
}

// readerStream reads a stream body from r, as ChatStream would after the headers.
func readerStream(c *Client, r io.Reader) *Stream {
	return &Stream{client: c, ctx: context.Background(), body: io.NopCloser(r), r: bufio.NewReaderSize(r, 16<<10)}
}

// endless repeats its pattern forever.
type endless struct {
	pattern []byte
	off     int
}

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.pattern[e.off%len(e.pattern)]
		e.off++
	}
	return len(p), nil
}

// An upstream that never ends a line, or an event, ends the stream with an
// error after a bounded read, instead of taking all memory.
func TestStreamBoundsLinesAndEvents(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, Config{Profile: Groq})
	tests := []struct {
		name, pattern, want string
		perByte             int // bytes read for each byte kept
	}{
		{"a line without end", "a", "stream line longer than 8388608 bytes", 1},
		{"a data line without end", "data: {", "stream line longer than 8388608 bytes", 1},
		{"an event without end", "data: {\"a\":1}\n", "stream event larger than 8388608 bytes", 2},
		{"empty data lines", "data:\n", "stream event larger than 8388608 bytes", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := &endless{pattern: []byte(tt.pattern)}
			s := readerStream(c, src)
			if s.Next() {
				t.Fatal("Next read a chunk")
			}
			var te *TransportError
			if !errors.As(s.Err(), &te) || te.Kind != Malformed || !strings.Contains(s.Err().Error(), tt.want) {
				t.Fatalf("err = %v, want a Malformed error saying %q", s.Err(), tt.want)
			}
			// Reading stops within a buffer or so of the bound.
			if src.off > tt.perByte*maxEvent+64<<10 {
				t.Fatalf("read %d bytes for a bound of %d", src.off, maxEvent)
			}
		})
	}
}

// TestWithIncludeUsage: stream_options gets include_usage whatever the
// caller sent in its place; null (once: a panic on a nil map) and any
// value that is not an object are replaced, an object's other options
// kept.
func TestWithIncludeUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   any
		want string
	}{
		{nil, `{"include_usage":true}`},
		{json.RawMessage(`null`), `{"include_usage":true}`},
		{json.RawMessage(`[1]`), `{"include_usage":true}`},
		{json.RawMessage(`"x"`), `{"include_usage":true}`},
		{json.RawMessage(`{"include_usage":false,"x":1}`), `{"include_usage":true,"x":1}`},
		{map[string]any{"x": 1}, `{"include_usage":true,"x":1}`},
	} {
		got, err := json.Marshal(withIncludeUsage(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s %v, want %s", tc.in, got, err, tc.want)
		}
	}
}
