package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// When the server stops, a request waiting for admission is answered 503
// with a Retry-After at once — it was never sent, another process may take
// it — instead of holding the stop for as long as it may wait.
func TestStoppingAnswersWaitingRequests(t *testing.T) {
	t.Parallel()
	stopping := make(chan struct{})
	b := setup(t, forecast.ModelConfig{Profile: llm.OpenAI}, Config{Limits: limits("rpm=1"), Stopping: stopping, MaxWait: time.Hour, MaxWaitCap: time.Hour})
	if resp, body := b.do(t, http.MethodPost, "/v1/chat/completions", chatBody("first", 5, ""), nil); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %s", resp, body)
	}
	type answer struct {
		resp *http.Response
		body []byte
	}
	second := make(chan answer, 1)
	go func() {
		resp, body := b.do(t, http.MethodPost, "/v1/chat/completions", chatBody("second", 5, ""), nil)
		second <- answer{resp, body}
	}()
	waitFor(t, "the second request to wait in line", func() bool { return waiting(b.gw) > 0 })
	close(stopping)
	a := <-second
	if a.resp == nil || a.resp.StatusCode != http.StatusServiceUnavailable || a.resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(a.body), "server is stopping") {
		t.Fatalf("the waiting request at the stop: %v %s, want 503 with a Retry-After saying the server stops", a.resp, a.body)
	}
	if n := b.model.Stats().Requests; n != 1 {
		t.Fatalf("the provider saw %d requests, want 1: the waiting one was never sent", n)
	}
}

func waiting(g *Gateway) int {
	n := 0
	for _, f := range g.Governor().Stats(time.Now()).Flows {
		n += f.Waiting + f.Parked
	}
	return n
}

// A request that must wait after the server began to stop is answered 503
// as well: the one watch on Config.Stopping, started by the first wait,
// ends it.
func TestStoppedBeforeTheWait(t *testing.T) {
	t.Parallel()
	stopping := make(chan struct{})
	b := setup(t, forecast.ModelConfig{Profile: llm.OpenAI}, Config{Limits: limits("rpm=1"), Stopping: stopping, MaxWait: time.Hour, MaxWaitCap: time.Hour})
	if resp, body := b.do(t, http.MethodPost, "/v1/chat/completions", chatBody("first", 5, ""), nil); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %s", resp, body)
	}
	close(stopping)
	resp, body := b.do(t, http.MethodPost, "/v1/chat/completions", chatBody("second", 5, ""), nil)
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "server is stopping") {
		t.Fatalf("a request that must wait once the server stops: %v %s, want 503 saying the server stops", resp, body)
	}
}

// Stop ends the watch on Config.Stopping that a wait started, though
// Stopping never closed: Stop returns only once it has ended.
func TestStopEndsTheStopWatch(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: llm.OpenAI}, Config{Limits: limits("rpm=1"), Stopping: make(chan struct{})})
	if resp, body := b.do(t, http.MethodPost, "/v1/chat/completions", chatBody("first", 5, ""), nil); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %s", resp, body)
	}
	resp, body := b.do(t, http.MethodPost, "/v1/chat/completions", chatBody("second", 5, ""), map[string]string{MaxWaitHeader: "0"})
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request, with no wait allowed: %v %s, want 429", resp, body)
	}
	b.srv.Close()
	if err := b.gw.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.gw.watchDone == nil { // read after Stop, which synchronizes with the watch's start
		t.Fatal("the wait started no watch on Stopping")
	}
	select {
	case <-b.gw.watchDone:
	default:
		t.Fatal("Stop returned with the watch on Stopping still running")
	}
}
