package httpapi

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/httpjson"
)

// Starting answers while an app starts, so a server can listen at once and
// open its database, migrate and resume runs in the background: GET
// /healthz answers 200 (the process is up), GET /readyz 503 with the phase
// until Ready, and every other request 503 with Retry-After. After Ready,
// every request goes to the app's handler, whose /readyz answers 200 —
// until Stopping: then, while the app stops, it answers as while starting,
// so that a load balancer hears the process takes no work instead of
// finding its port closed.
type Starting struct {
	began    time.Time
	phase    atomic.Pointer[string]
	ready    atomic.Pointer[http.Handler]
	fail     atomic.Pointer[string]
	stopping atomic.Bool
}

// NewStarting returns a Starting in its first phase.
func NewStarting(phase string) *Starting {
	s := &Starting{began: time.Now()}
	s.Phase(phase)
	return s
}

// Phase names what start-up is doing now, for /readyz.
func (s *Starting) Phase(p string) { s.phase.Store(&p) }

// Ready hands every request from now on to h.
func (s *Starting) Ready(h http.Handler) { s.ready.Store(&h) }

// Stopping answers every request from now on as the app stops: /healthz
// 200, /readyz 503 saying the process takes no work, the rest 503 with
// Retry-After (another process may take it). Requests already answering
// go on.
func (s *Starting) Stopping() {
	s.Phase("stopping")
	s.stopping.Store(true)
}

// IsStopping reports whether Stopping was called.
func (s *Starting) IsStopping() bool { return s.stopping.Load() }

// Fail records why start-up failed; /readyz and the API say it until the
// process exits.
func (s *Starting) Fail(err error) {
	msg := err.Error()
	s.fail.Store(&msg)
}

func (s *Starting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	stopping := s.stopping.Load()
	if h := s.ready.Load(); h != nil && !stopping {
		(*h).ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/healthz" && r.Method == http.MethodGet {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	status, msg := "starting", fmt.Sprintf("sluice is starting (%s, for %s); retry shortly", *s.phase.Load(), time.Since(s.began).Round(time.Millisecond))
	if stopping {
		status, msg = "stopping", StoppingMessage
	}
	if f := s.fail.Load(); f != nil {
		status, msg = "failed", "sluice failed to start: "+*f
	} else {
		w.Header().Set("Retry-After", "1")
	}
	if r.URL.Path == "/readyz" && r.Method == http.MethodGet {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"status": status, "phase": *s.phase.Load(), "detail": msg})
		return
	}
	httpjson.Error(w, http.StatusServiceUnavailable, msg)
}

// StoppingMessage is what a stopping server answers a request with.
const StoppingMessage = "this process takes no work: sluice is stopping; send the request again (another process may take it)"
