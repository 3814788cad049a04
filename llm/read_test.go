package llm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// countingBody closes reached once n bytes of it have been read.
type countingBody struct {
	io.ReadCloser
	read    atomic.Int64
	n       int64
	reached chan struct{}
	once    sync.Once
}

func (b *countingBody) Read(p []byte) (int, error) {
	m, err := b.ReadCloser.Read(p)
	if b.read.Add(int64(m)) >= b.n {
		b.once.Do(func() { close(b.reached) })
	}
	return m, err
}

// TestReadsAreBoundedAcrossCalls: the answers a client reads at once hold
// at most Config.MaxReadBytes between them (once: 64 MiB each, without a
// bound on the sum: 24 endless answers at once took 2.79 GB). An answer
// that would pass the bound fails at once, naming it; the one being read
// goes on, and once it is done its bytes are free for the next.
func TestReadsAreBoundedAcrossCalls(t *testing.T) {
	t.Parallel()
	const size = 2 << 20
	prefix := `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"`
	pad := strings.Repeat("a", size-len(prefix))
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, prefix+pad) // no Content-Length: chunked, as an endless body is
		if strings.Contains(string(body), `"held"`) {
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, `"}}]}`)
	}))
	t.Cleanup(srv.Close)
	held := &countingBody{n: size, reached: make(chan struct{})}
	var first atomic.Bool
	transport := roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && !first.Swap(true) {
			held.ReadCloser = resp.Body
			resp.Body = held
		}
		return resp, err
	})
	c, err := NewClient(Config{BaseURL: srv.URL, MaxReadBytes: 8 << 20, HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(model string) (*RawResponse, error) {
		return c.ChatRaw(context.Background(), []byte(`{"model":"`+model+`","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	}
	done := make(chan error, 1)
	go func() {
		_, err := call("held")
		done <- err
	}()
	<-held.reached // its first 2 MiB are read, and its next chunk held
	if _, err := call("next"); err == nil || !strings.Contains(err.Error(), "MaxReadBytes") {
		t.Errorf("a second 2 MiB answer while one is read under a bound of 8 MiB: %v, want an error naming the bound", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the answer being read: %v", err)
	}
	resp, err := call("next")
	if err != nil || len(resp.Body) != size+len(`"}}]}`) {
		t.Fatalf("after the first answer ended: %v, want the whole answer", err)
	}
	if n := c.reads.TryAcquire(8 << 20); !n {
		t.Error("bytes are still held after every answer was read")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestStreamEventsAreBounded: a stream's event being read is held on the
// same bound: an event larger than the bound ends the stream with an
// error naming it, and gives its bytes back.
func TestStreamEventsAreBounded(t *testing.T) {
	t.Parallel()
	big := "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("a", 2<<20) + "\"}}]}\n\n"
	c, _ := sseServer(t, nil, big, "data: [DONE]\n\n")
	c2, err := NewClient(Config{BaseURL: c.cfg.BaseURL, MaxReadBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c2.ChatStream(context.Background(), &ChatRequest{Model: "m", MaxTokens: 5, Messages: []Message{{Role: "user", Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	for s.Next() {
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "MaxReadBytes") {
		t.Errorf("a 2 MiB event under a bound of 1 MiB: %v, want an error naming the bound", err)
	}
	if !c2.reads.TryAcquire(1 << 20) {
		t.Error("the event's bytes are still held")
	}
}
