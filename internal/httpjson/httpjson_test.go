package httpjson_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-dev/sluice/internal/httpjson"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	httpjson.Write(w, http.StatusAccepted, map[string]any{"error": "<b>&", "runs": []int{1, 2}})
	if w.Code != http.StatusAccepted {
		t.Errorf("status %d, want 202", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	const want = `{"error":"\u003cb\u003e\u0026","runs":[1,2]}` + "\n"
	if got := w.Body.String(); got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}
