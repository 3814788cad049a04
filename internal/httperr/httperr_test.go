package httperr_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/internal/store"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	plain := errors.New("x")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"bad request", httperr.BadRequest(plain), http.StatusBadRequest},
		{"not found", httperr.NotFound(plain), http.StatusNotFound},
		{"forbidden", httperr.Forbidden(plain), http.StatusForbidden},
		{"too large", httperr.TooLarge(plain), http.StatusRequestEntityTooLarge},
		{"a mark wrapped again", fmt.Errorf("read: %w", httperr.TooLarge(plain)), http.StatusRequestEntityTooLarge},
		{"the engine's invalid input", &engine.InvalidError{What: "name", Problem: "empty"}, http.StatusBadRequest},
		{"no such run", fmt.Errorf("get: %w", engine.ErrRunNotFound), http.StatusNotFound},
		{"no such function", engine.ErrNoFunction, http.StatusNotFound},
		{"not rerunnable", engine.ErrNotRerunnable, http.StatusConflict},
		{"a database locked for the whole wait", fmt.Errorf("count the start of f: %w", store.ErrLocked), http.StatusServiceUnavailable},
		{"ended", engine.ErrEnded, http.StatusConflict},
		{"same version", engine.ErrSameVersion, http.StatusConflict},
		{"anything else", plain, http.StatusInternalServerError},
	} {
		if got := httperr.Status(tc.err); got != tc.want {
			t.Errorf("%s: Status = %d, want %d", tc.name, got, tc.want)
		}
	}
	// A mark keeps the error's words and what it wraps.
	if err := httperr.BadRequest(engine.ErrEnded); err.Error() != engine.ErrEnded.Error() || !errors.Is(err, engine.ErrEnded) {
		t.Errorf("BadRequest(ErrEnded) = %q, Is ErrEnded %t", err, errors.Is(err, engine.ErrEnded))
	}
}

// A database locked for the whole wait is worth a try a second later; no
// other error says when to come back.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	if got := httperr.RetryAfter(fmt.Errorf("send: %w", store.ErrLocked)); got != 1 {
		t.Errorf("RetryAfter of a locked database = %d, want 1", got)
	}
	for _, err := range []error{errors.New("x"), engine.ErrEnded, httperr.BadRequest(errors.New("x"))} {
		if got := httperr.RetryAfter(err); got != 0 {
			t.Errorf("RetryAfter(%v) = %d, want 0", err, got)
		}
	}
}
