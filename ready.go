package sluice

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpapi"
)

// appHealth is what /readyz and /v1/flows answer: the jobs' health, and
// first whether this process takes work at all — it does not while it
// stops, or while it has lost its executor lock (on PostgreSQL, the
// connection holding it dropped; it takes work again once it holds the lock
// again).
type appHealth struct {
	e *engine.Engine
	m *health.Monitor
}

var _ httpapi.Health = appHealth{}

func (h appHealth) Flows() []health.Flow { return h.m.Flows() }

func (h appHealth) Ready() error {
	if err := h.e.Ready(); err != nil {
		return fmt.Errorf("this process takes no work: %w", err)
	}
	return h.m.Ready()
}

// Ready reports why the app does not take work or a job is stalled, or
// nil: what GET /readyz answers 503 with.
func (a *App) Ready() error { return appHealth{a.e, a.monitor}.Ready() }
