package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hang is a provider that accepts a request and never answers it.
func hang(w http.ResponseWriter, r *http.Request, body map[string]any) { <-r.Context().Done() }

// stall sends the headers and the start of a body, then nothing more.
func stall(contentType, start string) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, start)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

// answerAfter answers a completion after d.
func answerAfter(d time.Duration) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completionBody)
	}
}

const firstEvent = `data: {"id":"c1","choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"

// wantDeadline fails the test unless err is the retryable Timeout of the
// named phase's deadline d, returned no sooner than d after start.
func wantDeadline(t *testing.T, err error, start time.Time, phase string, d time.Duration) {
	t.Helper()
	took := time.Since(start)
	var te *TransportError
	if !errors.As(err, &te) || te.Kind != Timeout {
		t.Fatalf("err = %#v, want a *TransportError of kind Timeout", err)
	}
	if want := fmt.Sprintf("within %v (%s deadline)", d, phase); !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to say %q", err, want)
	}
	if !Retryable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v: Retryable %v, is DeadlineExceeded %v", err, Retryable(err), errors.Is(err, context.DeadlineExceeded))
	}
	if took < d {
		t.Fatalf("failed after %v, before the %v deadline", took, d)
	}
	t.Logf("%v after %v", err, took)
}

func TestDeadlines(t *testing.T) {
	t.Parallel()
	req := userRequest("m", "hi")
	calls := []struct {
		name string
		call func(*Client) error
	}{
		{"Chat", func(c *Client) error { _, err := c.Chat(context.Background(), req); return err }},
		{"ChatRaw", func(c *Client) error { _, err := c.ChatRaw(context.Background(), []byte(`{"model":"m"}`)); return err }},
		{"Models", func(c *Client) error { _, err := c.Models(context.Background()); return err }},
		{"ChatStream", func(c *Client) error { _, err := c.ChatStream(context.Background(), req); return err }},
	}
	for _, call := range calls {
		t.Run("first byte: a server that never answers, "+call.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, hang)
			c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10, Timeouts: Timeouts{FirstByte: 100 * time.Millisecond}})
			start := time.Now()
			err := call.call(c)
			wantDeadline(t, err, start, "first-byte", 100*time.Millisecond)
			if !strings.HasPrefix(err.Error(), "llm: transport: timeout: no first byte of the response within 100ms") {
				t.Errorf("message %q", err)
			}
		})
	}
	for _, call := range calls[:3] { // a stream's body stalling is not ChatStream's error: see below
		t.Run("total: a body that stalls, "+call.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, stall("application/json", `{"id":"c1","choices":[`))
			c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10, Timeouts: Timeouts{Total: 200 * time.Millisecond}})
			start := time.Now()
			wantDeadline(t, call.call(c), start, "total", 200*time.Millisecond)
		})
	}
	t.Run("total: a stream that stalls", func(t *testing.T) {
		t.Parallel()
		srv, _ := newServer(t, stall("text/event-stream", firstEvent))
		// Long enough for the first event to come on a loaded machine
		// before the whole call's deadline.
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10, Timeouts: Timeouts{Total: time.Second}})
		start := time.Now()
		s, err := c.ChatStream(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Next() || s.Chunk().Text() != "a" {
			t.Fatalf("first chunk: %v", s.Err())
		}
		if s.Next() {
			t.Fatal("a second chunk from a stream that stalled")
		}
		wantDeadline(t, s.Err(), start, "total", time.Second)
	})
	t.Run("connect: a TLS handshake that never answers", func(t *testing.T) {
		t.Parallel()
		// A listener that accepts TCP and never speaks: the handshake
		// hangs as it would against a black-holed host.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var held []net.Conn
		t.Cleanup(func() {
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, conn := range held {
				conn.Close()
			}
		})
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, conn)
				mu.Unlock()
			}
		}()
		c := newTestClient(t, Config{BaseURL: "https://" + ln.Addr().String(), DefaultMaxTokens: 10,
			Timeouts: Timeouts{Connect: 100 * time.Millisecond}})
		start := time.Now()
		_, err = c.Chat(context.Background(), req)
		wantDeadline(t, err, start, "connect", 100*time.Millisecond)
	})
	t.Run("connect: a dial that never completes, with the caller's own client", func(t *testing.T) {
		t.Parallel()
		// A TCP connect to a black-holed address cannot be made to hang
		// here reliably (an unroutable address may fail at once), so the
		// dial itself hangs.
		gone := make(chan struct{})
		t.Cleanup(func() { close(gone) })
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case <-ctx.Done():
			case <-gone:
			}
			return nil, errors.New("black hole")
		}}
		t.Cleanup(tr.CloseIdleConnections)
		c := newTestClient(t, Config{BaseURL: "http://192.0.2.1/v1", DefaultMaxTokens: 10,
			HTTPClient: &http.Client{Transport: tr}, Timeouts: Timeouts{Connect: 100 * time.Millisecond}})
		start := time.Now()
		_, err := c.Chat(context.Background(), req)
		wantDeadline(t, err, start, "connect", 100*time.Millisecond)
	})
}

func TestWithTimeouts(t *testing.T) {
	t.Parallel()
	req := userRequest("m", "hi")
	t.Run("a shorter deadline per call wins", func(t *testing.T) {
		t.Parallel()
		srv, _ := newServer(t, hang)
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10, Timeouts: Timeouts{FirstByte: time.Minute}})
		ctx := WithTimeouts(context.Background(), Timeouts{FirstByte: 100 * time.Millisecond})
		start := time.Now()
		_, err := c.Chat(ctx, req)
		wantDeadline(t, err, start, "first-byte", 100*time.Millisecond)
	})
	t.Run("a longer deadline per call wins", func(t *testing.T) {
		t.Parallel()
		srv, _ := newServer(t, answerAfter(300*time.Millisecond))
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10, Timeouts: Timeouts{FirstByte: 50 * time.Millisecond}})
		if _, err := c.Chat(context.Background(), req); err == nil {
			t.Fatal("the client's 50ms first-byte deadline did not fire: the test shows nothing")
		}
		ctx := WithTimeouts(context.Background(), Timeouts{FirstByte: time.Minute})
		if _, err := c.Chat(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a negative deadline per call removes it", func(t *testing.T) {
		t.Parallel()
		srv, _ := newServer(t, answerAfter(300*time.Millisecond))
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10,
			Timeouts: Timeouts{FirstByte: 50 * time.Millisecond, Total: 100 * time.Millisecond}})
		ctx := WithTimeouts(context.Background(), Timeouts{FirstByte: -1, Total: -1})
		if _, err := c.Chat(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the caller's deadline still applies", func(t *testing.T) {
		t.Parallel()
		srv, _ := newServer(t, hang)
		c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10})
		ctx, cancel := context.WithTimeout(WithTimeouts(context.Background(), Timeouts{FirstByte: -1}), 100*time.Millisecond)
		defer cancel()
		_, err := c.Chat(ctx, req)
		var te *TransportError
		if !errors.As(err, &te) || te.Kind != Timeout || !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline)") {
			t.Fatalf("err = %v, want the context's deadline", err)
		}
	})
}

func TestTimeoutsResolve(t *testing.T) {
	t.Parallel()
	client := func(t Timeouts) Timeouts { return Config{Timeouts: t}.withDefaults().Timeouts }
	tests := []struct {
		name      string
		got, want Timeouts
	}{
		{"zero is the defaults", client(Timeouts{}),
			Timeouts{Connect: 10 * time.Second, FirstByte: 2 * time.Minute, Total: 10 * time.Minute}},
		{"a field set keeps the others' defaults", client(Timeouts{FirstByte: time.Second}),
			Timeouts{Connect: 10 * time.Second, FirstByte: time.Second, Total: 10 * time.Minute}},
		{"negative stays: no deadline", client(Timeouts{Total: -1}),
			Timeouts{Connect: 10 * time.Second, FirstByte: 2 * time.Minute, Total: -1}},
		{"per call, fields set win", Timeouts{Total: time.Hour, Connect: -1}.or(client(Timeouts{FirstByte: time.Second})),
			Timeouts{Connect: -1, FirstByte: time.Second, Total: time.Hour}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, tt.got, tt.want)
		}
	}
	ctx := WithTimeouts(WithTimeouts(context.Background(), Timeouts{Connect: time.Second, Total: time.Hour}), Timeouts{Total: time.Minute})
	if got, want := ctx.Value(timeoutsKey{}).(Timeouts), (Timeouts{Connect: time.Second, Total: time.Minute}); got != want {
		t.Errorf("nested WithTimeouts: %+v, want %+v", got, want)
	}
}

// ctxRecorder is a real transport that keeps the context of the last
// request it sent.
type ctxRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	ctx  context.Context
}

func (r *ctxRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.ctx = req.Context()
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

// running reports whether the last call's deadlines still run, and what
// ended them if not.
func (r *ctxRecorder) running() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx.Err() == nil, context.Cause(r.ctx)
}

// Every way a call ends releases its deadlines at once: no timer is left
// to fire into a call that is over.
func TestDeadlinesReleased(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if body["stream"] != true {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, completionBody)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, firstEvent)
		w.(http.Flusher).Flush()
		if body["model"] == "stall" {
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	rec := &ctxRecorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(rec.next.(*http.Transport).CloseIdleConnections)
	c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10, HTTPClient: &http.Client{Transport: rec}})
	released := func(t *testing.T) {
		t.Helper()
		if running, cause := rec.running(); running || cause != context.Canceled {
			t.Fatalf("deadlines running %v, ended by %v; want released", running, cause)
		}
	}

	if _, err := c.Chat(context.Background(), userRequest("m", "hi")); err != nil {
		t.Fatal(err)
	}
	released(t)

	s, err := c.ChatStream(context.Background(), userRequest("m", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if _, n := drain(s); n != 1 || s.Err() != nil {
		t.Fatalf("stream: %d chunks, %v", n, s.Err())
	}
	released(t)

	s, err = c.ChatStream(context.Background(), userRequest("stall", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatal(s.Err())
	}
	if running, _ := rec.running(); !running {
		t.Fatal("a stream still being read lost its deadlines")
	}
	s.Close()
	released(t)
}

// Calls that end every way leave no goroutine behind. Not parallel: it
// counts the goroutines of the whole process.
func TestDeadlinesLeaveNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	var active atomic.Int64 // requests the server still serves
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		active.Add(1)
		defer active.Add(-1)
		switch body["model"] {
		case "hang":
			hang(w, r, body)
		case "stall":
			stall("text/event-stream", firstEvent)(w, r, body)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, firstEvent+"data: [DONE]\n\n")
		}
	})
	// Total outlasts the waits below: only releasing a call ends it in time.
	c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 10,
		Timeouts: Timeouts{FirstByte: 100 * time.Millisecond, Total: time.Hour}})
	ctx := context.Background()
	if _, err := c.Chat(ctx, userRequest("hang", "hi")); err == nil {
		t.Fatal("a call that hangs succeeded")
	}
	for _, model := range []string{"stall", "m"} {
		s, err := c.ChatStream(WithTimeouts(ctx, Timeouts{Total: 200 * time.Millisecond}), userRequest(model, "hi"))
		if err != nil {
			t.Fatal(err)
		}
		if _, n := drain(s); n != 1 || (s.Err() == nil) != (model == "m") {
			t.Fatalf("%s: %d chunks, %v", model, n, s.Err())
		}
	}
	s, err := c.ChatStream(ctx, userRequest("stall", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatal(s.Err())
	}
	s.Close()

	// The connections' goroutines end on their own once closed: wait for
	// it, as long as the test may take, far less than Total.
	settle := func(done func() bool) {
		for wait := time.Now().Add(2 * time.Minute); !done() && time.Now().Before(wait); {
			time.Sleep(10 * time.Millisecond) // poll interval: until done holds (the loop's deadline bounds it)
		}
	}
	settle(func() bool { return active.Load() == 0 })
	if n := active.Load(); n > 0 {
		t.Fatalf("%d calls still hold their connection", n)
	}
	c.cfg.HTTPClient.CloseIdleConnections()
	srv.Close()
	n := runtime.NumGoroutine()
	settle(func() bool { n = runtime.NumGoroutine(); return n <= before })
	if n > before {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("%d goroutines before the calls, %d after:\n%s", before, n, b.String())
	}
}
