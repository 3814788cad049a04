package sluice

import (
	"net/http"

	"github.com/sluice-dev/sluice/internal/httpapi"
)

// HandlerConfig configures the app's HTTP API.
type HandlerConfig struct {
	// Token, when set, is required as "Authorization: Bearer TOKEN". Serve
	// the API off loopback only with a token.
	Token string
	// MaxEventBytes bounds an event's body (default 1 MiB); larger ones get
	// 413 naming the limit.
	MaxEventBytes int64
	// OutputLimit bounds each step output a run's detail shows (default
	// 4096 bytes); the cut says so and names the limit.
	OutputLimit int
}

// Handler returns the app's HTTP API: POST /v1/events, GET /v1/runs
// (?function=&status=&since=&limit=), GET /v1/runs/{id}, POST
// /v1/runs/{id}/cancel, POST /v1/runs/{id}/rerun, GET /v1/dropped, GET
// /v1/flows (every backfill's health), GET /healthz (the process answers)
// and GET /readyz (503 naming the job while a backfill is stalled or the
// database is unreachable).
func (a *App) Handler(cfg HandlerConfig) http.Handler {
	return httpapi.New(httpapi.Config{Engine: a.e, Health: a.monitor, Token: cfg.Token, MaxEventBytes: cfg.MaxEventBytes, OutputLimit: cfg.OutputLimit})
}
