package main

import (
	"context"
	"strings"
	"testing"
)

// TestStatusShowsClientRetries: on a gateway, status says per flow and
// client key how many of the gateway's 429s came back and how many gave
// up, so the client burning its tries is named.
func TestStatusShowsClientRetries(t *testing.T) {
	t.Parallel()
	srv, _ := flowsServer(t, `{"flows":[{"name":"batch","state":"waiting-for-quota","done":120,"remaining":80,`+
		`"client_retries":[{"flow":"batch","client":2,"refused":1400,"came_back":1320,"gave_up":80,"untracked":0,"pending":0}]},`+
		`{"name":"default","state":"idle","done":0,"remaining":0}]}`+"\n")
	code, out, errOut := runStatusCLI(context.Background(), map[string]string{"SLUICE_API_TOKEN": statusToken}, "--url", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[4], "GATEWAY 429s") {
		t.Fatalf("output:\n%s", out)
	}
	if f := strings.Fields(lines[5]); strings.Join(f, " ") != "batch 2 1,400 1,320 80 0 0" {
		t.Errorf("retries line %q", lines[5])
	}
}
