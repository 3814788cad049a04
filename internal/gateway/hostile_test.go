package gateway

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sent is what an upstream was sent: how many calls, and the last body.
type sent struct {
	calls atomic.Int64
	last  atomic.Value
}

// plainUpstream answers every completion with a fixed usage, and every
// stream with one chunk, a usage chunk and [DONE].
func plainUpstream(t *testing.T, usage string) (*httptest.Server, *sent) {
	got := &sent{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.calls.Add(1)
		got.last.Store(string(body))
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n")
			io.WriteString(w, "data: {\"id\":\"c\",\"choices\":[],\"usage\":"+usage+"}\n\n")
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":`+usage+`}`)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// quietServer is an httptest server for gw whose panic logs are dropped:
// the tests that cause one check its outcome themselves.
func quietServer(t *testing.T, gw http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(gw)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(data)
}

// TestStreamOptionsNull: a stream whose stream_options is null (once: a
// panic on a nil map, an empty reply and a reservation held for good) is
// streamed, with the usage the gateway asks for.
func TestStreamOptionsNull(t *testing.T) {
	t.Parallel()
	up, got := plainUpstream(t, `{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`)
	gw, err := New(context.Background(), Config{Upstream: up.URL + "/v1", APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	srv := quietServer(t, gw)
	// Twice: with no limits configured, a reservation the first left
	// admitted would hold the key's only probe, and the second would wait.
	for i := range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions",
			strings.NewReader(chatBody("hi", 5, `,"stream":true,"stream_options":null`)))
		req.Header.Set(MaxWaitHeader, "0s")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasSuffix(string(data), "data: [DONE]\n\n") {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, data)
		}
		if strings.Contains(string(data), `"usage"`) {
			t.Errorf("request %d: the usage chunk the caller did not ask for was passed on: %s", i, data)
		}
		if s, _ := got.last.Load().(string); !strings.Contains(s, `"stream_options":{"include_usage":true}`) {
			t.Errorf("request %d: sent upstream %s, want stream_options.include_usage", i, s)
		}
	}
}

// panicOnce is a transport whose first call panics, as a bug anywhere in
// an upstream call would; the others go to the default transport.
type panicOnce struct{ done atomic.Bool }

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if !p.done.Swap(true) {
		panic("panicOnce: a bug in the upstream call")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestPanicEndsTheReservation: a call that panics on its way upstream ends
// its reservation. With no limits configured, the governor lets one call
// at a time reach the key until it has heard from it: a reservation the
// panic left admitted would hold it, and the next call, which may not
// wait, would be refused.
func TestPanicEndsTheReservation(t *testing.T) {
	t.Parallel()
	up, _ := plainUpstream(t, `{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`)
	gw, err := New(context.Background(), Config{Upstream: up.URL + "/v1", APIKey: upstreamKey,
		HTTPClient: &http.Client{Transport: &panicOnce{}}, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	srv := quietServer(t, gw)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("hi", 5, "")))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the call that panicked was answered %d", resp.StatusCode)
	}
	// The handler's deferred calls ran before its connection was closed.
	resp, data := post(t, srv.URL, chatBody("hi", 5, ""), MaxWaitHeader, "0s")
	if resp.StatusCode != 200 {
		t.Fatalf("the call after a panic: status %d: %s", resp.StatusCode, data)
	}
}

// hostileGateway starts a gateway on the upstream at base, its limits out
// of the way and its retries quick, and serves it.
func hostileGateway(t *testing.T, base string) (*Gateway, *httptest.Server) {
	t.Helper()
	gw, err := New(context.Background(), Config{Upstream: base + "/v1", APIKey: upstreamKey,
		Limits: limits("rpm=600,tpm=100000"), RetryBase: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	return gw, quietServer(t, gw)
}

// TestOddUsageIsNotBoughtAgain: a completion whose usage counts are not
// whole numbers (once: malformed, sent again 8 times, each a completion
// the provider bills, then 502; streamed, an error event after the
// content instead of [DONE]) is the answer: passed on as sent, after one
// call, with its charge as reserved.
func TestOddUsageIsNotBoughtAgain(t *testing.T) {
	t.Parallel()
	const usage = `{"prompt_tokens":10.0,"completion_tokens":1e30,"total_tokens":1.5}`
	for _, stream := range []bool{false, true} {
		up, got := plainUpstream(t, usage)
		gw, srv := hostileGateway(t, up.URL)
		extra := ""
		if stream {
			extra = `,"stream":true,"stream_options":{"include_usage":true}`
		}
		resp, data := post(t, srv.URL, chatBody("hi", 5, extra))
		if resp.StatusCode != 200 || !strings.Contains(data, usage) {
			t.Errorf("stream %v: status %d: %s: want 200 and the usage as sent", stream, resp.StatusCode, data)
		}
		if stream && !strings.HasSuffix(data, "data: [DONE]\n\n") {
			t.Errorf("stream: does not end with [DONE]: %s", data)
		}
		if n := got.calls.Load(); n != 1 {
			t.Errorf("stream %v: %d calls upstream, want 1", stream, n)
		}
		if f := gw.main.gov.Stats(gw.cfg.Now()).Flows; len(f) == 0 || f[0].Tokens.Output != 5 {
			t.Errorf("stream %v: flows %+v: want the 5 output tokens reserved charged", stream, f)
		}
	}
}

// TestUpstreamRedirectIsNotFollowed: an upstream's redirect (once:
// followed, the provider key sent to another port, a 302's GET answer
// passed on as a 200 completion, a loop of 307s 80 requests) is not
// followed, nor tried again: one call, and a 502 naming the redirect.
func TestUpstreamRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"elsewhere"}}]}`)
	}))
	t.Cleanup(other.Close)
	for _, code := range []int{302, 307} {
		for _, stream := range []bool{false, true} {
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				http.Redirect(w, r, other.URL+"/v1/chat/completions", code)
			}))
			t.Cleanup(up.Close)
			_, srv := hostileGateway(t, up.URL)
			extra := ""
			if stream {
				extra = `,"stream":true`
			}
			resp, data := post(t, srv.URL, chatBody("hi", 5, extra))
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(data, `"code":"upstream_redirect"`) ||
				!strings.Contains(data, other.URL) {
				t.Errorf("%d, stream %v: status %d: %s: want 502 upstream_redirect naming the Location", code, stream, resp.StatusCode, data)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("%d, stream %v: %d calls upstream, want 1", code, stream, n)
			}
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the place redirected to got %d requests, want none", n)
	}
}
