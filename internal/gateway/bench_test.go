package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// BenchmarkWaitingRequestMemory measures what one request holds while it
// waits for admission: 40 requests with 1 MB prompts wait on a saturated
// rpm=1 key (the probe that once cost 2.7 MB each), and the live heap
// grows by B/waiting each, against their body's 1 MB (body-B/waiting).
func BenchmarkWaitingRequestMemory(b *testing.B) {
	const n = 40
	prompt := strings.Repeat("All work and no play makes a dull prompt. ", 1<<20/43)
	for _, stream := range []bool{false, true} {
		name := "plain"
		extra := ""
		if stream {
			name, extra = "stream", `,"stream":true`
		}
		body := chatBody(prompt, 10, extra)
		b.Run(name, func(b *testing.B) {
			var per float64
			for range b.N {
				bd := setup(b, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=1")},
					Config{Limits: limits("rpm=1"), MaxWait: time.Hour, MaxWaitingBytes: 1 << 30})
				if resp, _ := bd.do(b, "POST", "/v1/chat/completions", chatBody("fill the minute", 5, ""), nil); resp.StatusCode != 200 {
					b.Fatalf("first: %d", resp.StatusCode)
				}
				before := liveHeap()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel() // a failure must not leave requests holding the servers open
				var wg sync.WaitGroup
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						bd.doCtx(ctx, b, "POST", "/v1/chat/completions", body, nil)
					}()
				}
				// Pricing a 1 MB prompt takes a fraction of a CPU second: a
				// loaded machine may take a while over the 40.
				waitFor(b, fmt.Sprintf("all %d requests to wait", n), func() bool { return flowView(b, bd, DefaultFlow).Waiting == n })
				per = float64(liveHeap()-before) / n
				cancel()
				wg.Wait()
				bd.sim.Close()
				bd.srv.Close()
			}
			b.ReportMetric(per, "B/waiting")
			b.ReportMetric(float64(len(body)), "body-B/waiting")
		})
	}
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkAnswerHeaders measures the gateway's own headers on one answer:
// the governor's outlook for the flow and every limit's three headers.
func BenchmarkAnswerHeaders(b *testing.B) {
	g, err := New(context.Background(), Config{Upstream: "http://127.0.0.1:1/v1", Limits: limits("rpm=30,rpd=1000,tpm=8000,tpd=200000,otpm=1000"),
		Flows: []Flow{{Name: "a"}, {Name: "b", Weight: 3}}})
	if err != nil {
		b.Fatal(err)
	}
	start(b, g)
	w := httptest.NewRecorder()
	c := &chatCall{g: g, w: w, who: caller{flow: "a"}, cost: governor.Cost{Requests: 1, Input: 400, Output: 200}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.Header())
		c.limitHeaders()
	}
}

// BenchmarkChatRoundTrip measures one non-streamed chat completion served
// in process (ServeHTTP on a recorder) against a loopback upstream that
// answers at once, through the gateway (no limits: every request admitted
// at once) and through a plain httputil.ReverseProxy to the same upstream:
// what the gateway's own work costs per request, in time and allocations,
// beside the proxy's.
func BenchmarkChatRoundTrip(b *testing.B) {
	answer := []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"sim-model","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":"Rivers and their towns"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":31,"completion_tokens":5,"total_tokens":36}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer up.Close()
	body := chatBody("Give this article a title: rivers, bridges and the towns between them.", 16, "")
	g, err := New(context.Background(), Config{Upstream: up.URL + "/v1", Profile: "openai"})
	if err != nil {
		b.Fatal(err)
	}
	start(b, g)
	target, _ := url.Parse(up.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"gateway", g}, {"reverse-proxy", proxy}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				tc.h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("%s: %d %s", tc.name, w.Code, w.Body)
				}
			}
			// The process's CPU time (the upstream's too, the same for
			// both): on a machine shared with other work the wall time
			// a request takes moves with their load, its CPU much less.
			if cpu := processCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
