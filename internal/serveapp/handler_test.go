package serveapp

import "testing"

func TestGatewayPath(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/v1/chat/completions": true, "/v1/models": true, "/v1/models/x": true, "/v1/responses": true,
		"/v1/runsx": true, "/v1/eventsx": true, "/v1/": true,
		"/v1/events": false, "/v1/runs": false, "/v1/runs/a": false, "/v1/runs/a/cancel": false,
		"/v1/dropped": false, "/v1/flows": false, "/v1/versions": false, "/v1/versions/v/resume": false,
		"/v1": false, "/metrics": false, "/healthz": false, "/": false, "/runs": false,
	} {
		if got := GatewayPath(path); got != want {
			t.Errorf("GatewayPath(%q) = %v, want %v", path, got, want)
		}
	}
}
