package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRedirectsAreNotFollowed: an upstream that answers with a redirect
// (once: followed, the key sent to another port of the same host, a 302's
// GET answer read as the completion, a loop of 307s made 10 requests a
// call) gets one request, and the caller an error that names the
// redirect and is not retryable; the place it points to gets nothing.
// The same holds with an http.Client of the caller's, which is left as
// it was.
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	const key = "sk-redirect-test-0123456789"
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"elsewhere"}}],"object":"list","data":[]}`)
	}))
	t.Cleanup(other.Close)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		code, _ := strconv.Atoi(r.Header.Get("X-Code"))
		http.Redirect(w, r, other.URL+"/v1/chat/completions?key="+key, code)
	}))
	t.Cleanup(up.Close)
	own := &http.Client{}
	for _, hc := range []*http.Client{nil, own} {
		for _, code := range []int{301, 302, 303, 307, 308} {
			c, err := NewClient(Config{BaseURL: up.URL, APIKey: key, HTTPClient: hc,
				Header: http.Header{"X-Code": {strconv.Itoa(code)}}})
			if err != nil {
				t.Fatal(err)
			}
			calls.Store(0)
			req := &ChatRequest{Model: "m", MaxTokens: 5, Messages: []Message{{Role: "user", Content: "hi"}}}
			_, chatErr := c.Chat(context.Background(), req)
			_, rawErr := c.ChatRaw(context.Background(), []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
			_, streamErr := c.ChatStream(context.Background(), req)
			_, modelsErr := c.Models(context.Background())
			for i, err := range []error{chatErr, rawErr, streamErr, modelsErr} {
				var se *StatusError
				if !errors.As(err, &se) || se.Status != code || Retryable(err) {
					t.Errorf("own client %v, %d, call %d: %v: want a StatusError %d, not retryable", hc != nil, code, i, err, code)
					continue
				}
				if msg := err.Error(); !strings.Contains(msg, "redirect") || !strings.Contains(msg, other.URL) ||
					strings.Contains(msg, key) || !strings.Contains(msg, "[redacted]") {
					t.Errorf("own client %v, %d, call %d: %q: want the redirect and its Location, without the key", hc != nil, code, i, msg)
				}
			}
			if n := calls.Load(); n != 4 {
				t.Errorf("own client %v, %d: %d requests upstream, want 4: one a call", hc != nil, code, n)
			}
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the place redirected to got %d requests, want none", n)
	}
	if own.CheckRedirect != nil {
		t.Error("the caller's http.Client was changed")
	}
}
