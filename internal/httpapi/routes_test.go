package httpapi

import (
	"strings"
	"testing"
)

// Every route of the API under /v1 is one OwnsPath claims, with its
// wildcards filled in, so that sluice serve --gateway never hands one of
// them to the gateway; the gateway's paths and those beside the API's are
// not claimed.
func TestOwnsPath(t *testing.T) {
	t.Parallel()
	for _, r := range (&api{}).routes() {
		_, path, _ := strings.Cut(r.pattern, " ")
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		path = strings.NewReplacer("{id}", "r-1", "{version}", "v1").Replace(path)
		if !OwnsPath(path) {
			t.Errorf("OwnsPath(%q) = false for the route %q", path, r.pattern)
		}
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/models", "/v1/models/gpt-5", "/v1/responses",
		"/v1//models", "/v1/", "/v1/runsx", "/v1/eventsx/1", "/healthz", "/v1"} {
		if OwnsPath(path) {
			t.Errorf("OwnsPath(%q) = true, want false", path)
		}
	}
}
