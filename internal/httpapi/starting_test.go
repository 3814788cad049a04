package httpapi_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/httpapi"
)

func TestStarting(t *testing.T) {
	t.Parallel()
	s := httpapi.NewStarting("opening the database")
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	if w := get("GET", "/healthz"); w.Code != 200 {
		t.Fatalf("/healthz while starting: %d", w.Code)
	}
	s.Phase("resuming unfinished runs")
	w := get("GET", "/readyz")
	if w.Code != 503 || !strings.Contains(w.Body.String(), `"status":"starting"`) || !strings.Contains(w.Body.String(), "resuming unfinished runs") {
		t.Fatalf("/readyz while starting: %d %s", w.Code, w.Body)
	}
	w = get("POST", "/v1/events")
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "starting") {
		t.Fatalf("API while starting: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	s.Fail(errors.New("open sluice.db: locked"))
	w = get("GET", "/readyz")
	if w.Code != 503 || !strings.Contains(w.Body.String(), `"failed"`) || w.Header().Get("Retry-After") != "" {
		t.Fatalf("/readyz after a failed start: %d %s", w.Code, w.Body)
	}
	s.Ready(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	if w := get("GET", "/readyz"); w.Code != http.StatusTeapot {
		t.Fatalf("after Ready: %d, want the app's handler", w.Code)
	}
}

// Once stopping, the app's handler takes no new request: /healthz says the
// process is up, /readyz that it takes no work, the rest 503 with
// Retry-After.
func TestStartingStopping(t *testing.T) {
	t.Parallel()
	s := httpapi.NewStarting("opening the database")
	s.Ready(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	s.Stopping()
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	if w := get("GET", "/healthz"); w.Code != 200 {
		t.Fatalf("/healthz while stopping: %d %s", w.Code, w.Body)
	}
	if w := get("GET", "/readyz"); w.Code != 503 || !strings.Contains(w.Body.String(), `"status":"stopping"`) || !strings.Contains(w.Body.String(), "this process takes no work") {
		t.Fatalf("/readyz while stopping: %d %s", w.Code, w.Body)
	}
	if w := get("POST", "/v1/events"); w.Code != 503 || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "sluice is stopping") {
		t.Fatalf("API while stopping: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}
