package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/httpapi"
)

// While the app stops, the server still answers — /readyz with 503, so a
// load balancer hears the process takes no work instead of finding its port
// closed — and it closes once the app has stopped.
func TestServeUntilDoneAnswersWhileTheAppStops(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	front := httpapi.NewStarting("opening the database")
	front.Ready(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	ctx, cancel := context.WithCancel(context.Background())
	var status int
	var body string
	done := make(chan error, 1)
	go func() {
		done <- serveUntilDone(ctx, &http.Server{Handler: front}, ln, 10*time.Second, func() {
			front.Stopping()
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				body = err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			status, body = resp.StatusCode, string(b)
		})
	}()
	resp, err := http.Get(base + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz while serving: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"status":"stopping"`) {
		t.Fatalf("/readyz while the app stopped: %d %s, want 503 saying it is stopping", status, body)
	}
	if resp, err := http.Get(base + "/readyz"); err == nil {
		resp.Body.Close()
		t.Fatalf("the server still answers once stopped: %d", resp.StatusCode)
	}
}
