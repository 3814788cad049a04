package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/redact"
)

// keyForms are the ways a text can carry testKey: as sent, after "Bearer ",
// JSON-escaped (testKey has no character JSON escapes, so a key that has
// is in TestScrubberForms).
var keyForms = []string{testKey, "Bearer " + testKey}

func assertNoKey(t *testing.T, where, text string) {
	t.Helper()
	for _, f := range keyForms {
		if strings.Contains(text, f) {
			t.Errorf("%s carries the key:\n%s", where, text)
			return
		}
	}
}

func TestScrubberForms(t *testing.T) {
	t.Parallel()
	const key = `k3y/with"quote+&<`
	s := NewScrubber(key)
	for _, in := range []string{
		key,                             // as sent
		`k3y/with\"quote+\u0026\u003c`,  // JSON-escaped, as Go writes it
		`k3y\/with\"quote+\u0026\u003c`, // JSON-escaped with "/" escaped, as PHP writes it
		`k3y%2Fwith%22quote%2B%26%3C`,   // URL query-escaped
		`k3y%2Fwith%22quote+&%3C`,       // URL path-escaped
	} {
		if out := s.String("x " + in + " y"); out != "x "+redact.KeyMark+" y" {
			t.Errorf("String(%q) = %q", in, out)
		}
		if out := string(s.Bytes([]byte("Bearer " + in))); out != "Bearer "+redact.KeyMark {
			t.Errorf("Bytes(%q) = %q", in, out)
		}
	}
	p := []byte("nothing of the key here")
	if out := s.Bytes(p); &out[0] != &p[0] {
		t.Error("Bytes copied a text that holds no key")
	}
	if NewScrubber("") != nil {
		t.Error("NewScrubber(\"\") is not nil")
	}
	var none *Scrubber
	if got := none.String("as is " + key); got != "as is "+key {
		t.Errorf("a nil Scrubber changed text: %q", got)
	}
	h := http.Header{"X-Request-Id": {"req-" + key}, "X-Other": {"plain"}}
	s.Header(h)
	if h.Get("X-Request-Id") != "req-"+redact.KeyMark || h.Get("X-Other") != "plain" {
		t.Errorf("Header: %v", h)
	}
}

// A key too short to replace everywhere is replaced where it follows
// "Bearer ", and nowhere else.
func TestScrubberShortKey(t *testing.T) {
	t.Parallel()
	s := NewScrubber("abc")
	for in, want := range map[string]string{
		"Authorization: Bearer abc": "Authorization: " + redact.KeyMark,
		`"Bearer abc"`:              `"` + redact.KeyMark + `"`,
		"Bearer+abc":                redact.KeyMark,
		"abc is ordinary text":      "abc is ordinary text",
	} {
		if got := s.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScrubberText(t *testing.T) {
	t.Parallel()
	s := NewScrubber(testKey)
	for _, tc := range []struct{ name, in, want string }{
		{"plain text is kept", "Rate limit reached: Limit 8000.", "Rate limit reached: Limit 8000."},
		{"the key", "bad key " + testKey, "bad key " + redact.KeyMark},
		{"line breaks and tabs become spaces", "a\nb\r\nc\td", "a b  c d"},
		{"a colour", "\x1b[31mred\x1b[0m text", "red text"},
		{"a cursor move and erase", "x\x1b[2J\x1b[1;1Hy", "xy"},
		{"a window title ended by BEL", "\x1b]0;pwned\x07after", "after"},
		{"a hyperlink ended by ST", "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", "click"},
		{"an unterminated string swallows the rest", "ok\x1bPdevice control", "ok"},
		{"a two-character escape", "a\x1bcb", "ab"},
		{"C1 CSI", "a\u009b31mb", "ab"},
		{"C1 OSC", "a\u009d0;t\u009cb", "ab"},
		{"NUL, BEL, DEL and backspace", "a\x00b\x07c\x7fd\be", "abcde"},
		{"bidi overrides", "user\u202Etxt.exe\u202C", "usertxt.exe"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"non-ASCII text is kept", "Zürich 東京 ✓", "Zürich 東京 ✓"},
		{"a key split by a control character", "sk-test-5up3r53cr3t\x00-k3y", redact.KeyMark},
		{"a key split by an escape sequence", "sk-test-\x1b[0m5up3r53cr3t-k3y", redact.KeyMark},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := s.Text(tc.in, 0); got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestScrubberBounds(t *testing.T) {
	t.Parallel()
	s := NewScrubber(testKey)
	long := strings.Repeat("é", 1000) // 2,000 bytes
	got := s.Text(long, MaxMessageBytes)
	if len(got) > MaxMessageBytes || !strings.HasSuffix(got, TruncatedMark) || !utf8.ValidString(got) {
		t.Errorf("Text of 2,000 bytes bounded to %d: %d bytes, ends %q, valid UTF-8 %v",
			MaxMessageBytes, len(got), got[max(len(got)-20, 0):], utf8.ValidString(got))
	}
	if got := s.Text("short", MaxFieldBytes); got != "short" {
		t.Errorf("a short text was changed: %q", got)
	}
	exact := strings.Repeat("x", MaxFieldBytes)
	if got := s.Text(exact, MaxFieldBytes); got != exact {
		t.Error("a text of exactly the bound was cut")
	}
	// The key straddling the bound: removed before the cut, so no part of
	// it is left.
	at := strings.Repeat("x", MaxFieldBytes-8) + testKey + strings.Repeat("y", 100)
	if got := s.Text(at, MaxFieldBytes); strings.Contains(got, testKey[:8]) || len(got) > MaxFieldBytes {
		t.Errorf("Text with the key across the bound = %q", got)
	}
}

func TestScrubberError(t *testing.T) {
	t.Parallel()
	s := NewScrubber(testKey)
	dirty := "\x1b[31m" + testKey + "\x1b[0m\n" + strings.Repeat("z", 3000)
	errs := []error{
		&RateLimitError{Message: dirty},
		&TooLargeError{Message: dirty},
		&QuotaError{Type: dirty, Code: dirty, Message: dirty},
		&OverloadedError{Message: dirty},
		&StatusError{Status: 400, Type: dirty, Code: dirty, Message: dirty},
		&TransportError{Kind: Other, Err: fmt.Errorf("dial %s: %w", testKey, context.DeadlineExceeded)},
	}
	for _, err := range errs {
		if got := s.Error(err); got != err {
			t.Errorf("Error(%T) returned another error", err)
		}
		text := fmt.Sprintf("%v %+v %#v", err, err, err)
		assertNoKey(t, fmt.Sprintf("%T", err), text)
		if strings.ContainsAny(text, "\x1b\n") {
			t.Errorf("%T keeps a control character: %q", err, text)
		}
	}
	if st := errs[4].(*StatusError); len(st.Type) > MaxFieldBytes || len(st.Code) > MaxFieldBytes || len(st.Message) > MaxMessageBytes {
		t.Errorf("StatusError fields not bounded: type %d, code %d, message %d bytes", len(st.Type), len(st.Code), len(st.Message))
	}
	if !errors.Is(errs[5], context.DeadlineExceeded) {
		t.Error("the scrubbed transport error no longer wraps its cause")
	}
	if (*Scrubber)(nil).Error(nil) != nil {
		t.Error("Error(nil) != nil")
	}
}

// Profile.Classify, without a key, still cleans and bounds the text.
func TestClassifyCleansText(t *testing.T) {
	t.Parallel()
	body := `{"error":{"message":"\u001b]0;owned\u0007bad ` + strings.Repeat("m", 5000) + `","type":"\u001b[2J` + strings.Repeat("t", 500) + `","code":"c\nd"}}`
	err := OpenAI.Classify(400, http.Header{}, []byte(body))
	st, ok := err.(*StatusError)
	if !ok {
		t.Fatalf("Classify = %T %v", err, err)
	}
	if strings.ContainsAny(st.Message+st.Type+st.Code, "\x1b\x07\n") || len(st.Message) > MaxMessageBytes ||
		len(st.Type) > MaxFieldBytes || st.Code != "c d" || !strings.HasPrefix(st.Message, "bad mmm") {
		t.Errorf("Classify kept %q / %q / %q", st.Message[:min(len(st.Message), 40)], st.Type[:min(len(st.Type), 40)], st.Code)
	}
}

// hostileProvider echoes the key it receives into every place of its
// answers: each field of an error, every header, the body of a
// completion, a stream's data and error events, a model list. The
// request's first message picks the answer.
func hostileProvider(w http.ResponseWriter, r *http.Request, body map[string]any) {
	auth := r.Header.Get("Authorization")
	key := strings.TrimPrefix(auth, "Bearer ")
	for _, h := range []string{"X-Request-Id", "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Reset-Tokens", "X-Echo"} {
		w.Header().Set(h, auth)
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/models" {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m-%s","object":"model","owned_by":"%s"}]}`, key, auth)
		return
	}
	text := ""
	if msgs, _ := body["messages"].([]any); len(msgs) > 0 {
		text, _ = msgs[0].(map[string]any)["content"].(string)
	}
	errBody := fmt.Sprintf(`{"error":{"message":"bad header %s","type":"%s","code":"%s","param":"%s"}}`, auth, auth, auth, key)
	switch {
	case text == "error" && body["stream"] == true:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"c-%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}\n\n", key, auth)
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", errBody)
	case text == "error":
		w.WriteHeader(400)
		fmt.Fprint(w, errBody)
	case body["stream"] == true:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"c-%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", key, auth)
	default:
		fmt.Fprintf(w, `{"id":"c-%s","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, key, auth)
	}
}

// TestClientScrubsWhatTheProviderSends: whatever a provider echoes the key
// in, nothing the client returns carries it: not an error's fields, a
// header, a completion, a stream's events or a model list.
func TestClientScrubsWhatTheProviderSends(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, hostileProvider)
	c := newTestClient(t, Config{BaseURL: srv.URL, APIKey: testKey, DefaultMaxTokens: 10})
	ctx := context.Background()
	show := func(v any) string { return fmt.Sprintf("%v\n%+v\n%#v", v, v, v) }

	_, err := c.Chat(ctx, userRequest("m", "error"))
	st, ok := err.(*StatusError)
	if !ok {
		t.Fatalf("Chat of an error = %T %v", err, err)
	}
	assertNoKey(t, "the error", show(st))
	if st.Type != "Bearer "+redact.KeyMark || !strings.Contains(st.Message, redact.KeyMark) {
		t.Errorf("the error lost its fields rather than their key: %+v", st)
	}

	resp, err := c.Chat(ctx, userRequest("m", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	assertNoKey(t, "a completion", show(resp)+string(resp.Body)+show(resp.Header))

	raw, err := c.ChatRaw(ctx, []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	assertNoKey(t, "a raw completion", string(raw.Body)+show(raw.Header))

	for _, prompt := range []string{"hi", "error"} {
		s, err := c.ChatStream(ctx, userRequest("m", prompt))
		if err != nil {
			t.Fatal(err)
		}
		seen := show(s.Header())
		for s.Next() {
			seen += string(s.Chunk().Raw) + s.Chunk().Text() + s.Chunk().ID
		}
		seen += show(s.Err())
		assertNoKey(t, "a stream ("+prompt+")", seen)
		if prompt == "error" && s.Err() == nil {
			t.Error("the stream's error event was not reported")
		}
	}

	models, err := c.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertNoKey(t, "the model list", show(models)+string(models[0].Raw))
}

// FuzzScrubberText: whatever the text, Text's result is valid UTF-8, has no
// control character, no escape sequence, no key, and keeps its bound.
func FuzzScrubberText(f *testing.F) {
	for _, seed := range []string{"plain", "\x1b[31mred", "\x1b]0;t\x07", "a\u009bb", testKey, "sk-test-\x00" + testKey[8:], "\xff\xfe", "é"} {
		f.Add(seed, uint8(16))
	}
	s := NewScrubber(testKey)
	f.Fuzz(func(t *testing.T, in string, limit uint8) {
		out := s.Text(in, int(limit))
		if limit > 0 && len(out) > int(limit) {
			t.Fatalf("Text(%q, %d) = %q: %d bytes", in, limit, out, len(out))
		}
		if !utf8.ValidString(out) {
			t.Fatalf("Text(%q) = %q: invalid UTF-8", in, out)
		}
		for _, r := range out {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) || isBidiControl(r) {
				t.Fatalf("Text(%q) = %q keeps %U", in, out, r)
			}
		}
		if strings.Contains(out, testKey) {
			t.Fatalf("Text(%q) = %q keeps the key", in, out)
		}
	})
}

// A completion's id and model, which callers keep (a backfill records the
// id), are cleaned and bounded like an error's type and code.
func TestClientCleansIDAndModel(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("i", 500)
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if body["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"id\":\"\\u001b[2J%s\",\"model\":\"m\\u0007\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", long)
			return
		}
		fmt.Fprintf(w, `{"id":"\u001b[2J%s","model":"m\u0007","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}]}`, long)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL, APIKey: testKey, DefaultMaxTokens: 10})
	resp, err := c.Chat(context.Background(), userRequest("m", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.ChatStream(context.Background(), userRequest("m", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatalf("no chunk: %v", s.Err())
	}
	for what, got := range map[string][2]string{"completion": {resp.ID, resp.Model}, "chunk": {s.Chunk().ID, s.Chunk().Model}} {
		id, model := got[0], got[1]
		if len(id) > MaxFieldBytes || !strings.HasPrefix(id, "iii") || !strings.HasSuffix(id, TruncatedMark) || model != "m" {
			t.Errorf("%s: id %q (%d bytes), model %q: want them cleaned and the id bounded to %d bytes", what, id, len(id), model, MaxFieldBytes)
		}
	}
	s.Close()
}
