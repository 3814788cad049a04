// Package httperr is the one table from an error to the HTTP status it
// answers with, for the event and run API and the dashboard: errors of
// what the client sent are marked where they are found (BadRequest,
// NotFound, Forbidden, TooLarge), the engine's own errors are mapped here,
// and anything else is a 500.
package httperr

import (
	"errors"
	"net/http"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/store"
)

// marked is an error marked with the status it answers with.
type marked struct {
	error
	status int
}

func (m marked) Unwrap() error { return m.error }

// BadRequest marks err as an error in what the client sent: 400.
func BadRequest(err error) error { return marked{err, http.StatusBadRequest} }

// NotFound marks err as naming something that does not exist: 404.
func NotFound(err error) error { return marked{err, http.StatusNotFound} }

// Forbidden marks err as a refusal of who sent it or from where: 403.
func Forbidden(err error) error { return marked{err, http.StatusForbidden} }

// TooLarge marks err as a body over its bound: 413.
func TooLarge(err error) error { return marked{err, http.StatusRequestEntityTooLarge} }

// Timeout marks err as the client's fault for sending too slowly: 408.
func Timeout(err error) error { return marked{err, http.StatusRequestTimeout} }

// RetryAfter is the Retry-After, in seconds, of an answer to err: 1 for a
// database that was locked for the whole wait, else 0 (none).
func RetryAfter(err error) int {
	if errors.Is(err, store.ErrLocked) {
		return 1
	}
	return 0
}

// Status is the HTTP status err answers with: its mark, else the engine's
// error's, else 500.
func Status(err error) int {
	var m marked
	var inv *engine.InvalidError
	switch {
	case errors.As(err, &m):
		return m.status
	case errors.As(err, &inv):
		return http.StatusBadRequest
	case errors.Is(err, engine.ErrRunNotFound), errors.Is(err, engine.ErrNoFunction):
		return http.StatusNotFound
	case errors.Is(err, engine.ErrNotRerunnable), errors.Is(err, engine.ErrEnded), errors.Is(err, engine.ErrSameVersion),
		errors.Is(err, engine.ErrNotReplayable):
		return http.StatusConflict
	case errors.Is(err, store.ErrLocked):
		return http.StatusServiceUnavailable // a busy SQLite database: try again (see RetryAfter)
	}
	return http.StatusInternalServerError
}
