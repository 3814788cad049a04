package sluice

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/ui"
)

// HandlerConfig configures the app's HTTP API.
type HandlerConfig struct {
	// Token, when set, is required as "Authorization: Bearer TOKEN". Serve
	// the API off loopback only with a token. A client address that sends
	// 10 wrong tokens within a minute gets 429 with Retry-After, its token
	// not compared, for a minute, doubling each time up to an hour; the
	// count is the app's one, shared with Dashboard and CheckBearer, so an
	// address throttled at one is throttled at all (docs/security.md).
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
// /v1/functions (every function and backfill with its trigger, flow,
// limits and last run), GET /v1/flows (every backfill's health), GET /v1/versions (the app's version
// and the unfinished runs of others), POST /v1/versions/{version}/resume
// and POST /v1/versions/{version}/cancel (see ResumeVersion and
// CancelVersion), GET /healthz (the process answers) and GET /readyz (503
// naming the job while a backfill is stalled or the database is
// unreachable). Times are on the app's clock (Config.Now), runs' too,
// and the answers that carry them say it: "now" and "speed".
func (a *App) Handler(cfg HandlerConfig) http.Handler {
	return httpapi.New(httpapi.Config{Engine: a.e, Health: appHealth{a.e, a.monitor}, Functions: a.functions, Token: cfg.Token, MaxEventBytes: cfg.MaxEventBytes, OutputLimit: cfg.OutputLimit,
		Now: a.e.Now, Speed: a.cfg.Speed, Throttle: a.throttle})
}

// CheckBearer decides r's "Authorization: Bearer TOKEN" at a door the
// program serves beside Handler and Dashboard (MetricsHandler behind a
// token, say), against the count of wrong tokens they share: when r's
// address is throttled, it returns how long it still is, and right is not
// called; else ok is right(TOKEN), and a wrong token counts toward
// throttling the address at every door. A request without a bearer token
// gets (0, false) and is not counted. The door answers a throttled
// request with 429 and Retry-After (wait in whole seconds, rounded up).
// Compare the token in constant time (crypto/subtle).
func (a *App) CheckBearer(r *http.Request, right func(token string) bool) (wait time.Duration, ok bool) {
	return a.throttle.CheckBearer(r, right)
}

// DashboardConfig configures the app's dashboard (docs/dashboard.md).
type DashboardConfig struct {
	// Token, when set, is needed for every page: signed in once on the
	// login page (a session cookie), or as "Authorization: Bearer TOKEN".
	// Serve the dashboard off loopback only with a token. Its wrong tokens
	// count toward the app's one throttle, which Handler shares
	// (HandlerConfig.Token).
	Token string
	// PublicURL is the URL people open the dashboard at, when a proxy in
	// front of it terminates TLS (https://sluice.example.com): an https URL
	// marks the session cookie Secure although the proxy speaks plain HTTP
	// to sluice. An absolute http or https URL; default "": Secure when the
	// request came over TLS.
	PublicURL string
	// OutputLimit bounds each step output a run's page shows (default 4096
	// bytes); the cut says so.
	OutputLimit int
	// MaxEventBytes bounds a test event's data (default 1 MiB).
	MaxEventBytes int64
	// Refresh is how often a page re-fetches its live figures (default 5s;
	// negative: never).
	Refresh time.Duration
	// Links are further entries of the dashboard's navigation, to pages
	// the program serves beside it: label → path on the same server
	// ("/demo"), in the order given.
	Links []DashboardLink
}

// DashboardLink is an entry of the dashboard's navigation (DashboardConfig.Links).
type DashboardLink struct{ Label, Href string }

// Dashboard returns the app's web dashboard, to be mounted at "/" beside
// Handler's /v1/ paths: every provider key's limits now and over the last
// day with what waits on each, every backfill's health and latest items,
// the runs with their steps (cancel, re-run from the failed step), the
// unfinished runs of other versions (resume here, cancel), the plan
// of the running configuration, and a form to send a test event. Its pages
// read only bounded, indexed pages of the database.
func (a *App) Dashboard(cfg DashboardConfig) (http.Handler, error) {
	links := make([]ui.Link, len(cfg.Links))
	for i, l := range cfg.Links {
		links[i] = ui.Link{Label: l.Label, Href: l.Href}
	}
	return ui.New(ui.Config{
		Engine:        a.e,
		Versions:      a.e,
		Sender:        a.e,
		Health:        a.monitor,
		Keys:          a.keyStats,
		Cluster:       a.clusterOfKey,
		History:       a.st,
		Items:         a.st,
		Plan:          a.plan,
		Functions:     a.functions,
		ClientRetries: a.metrics.ClientRetries,
		Token:         cfg.Token,
		PublicURL:     cfg.PublicURL,
		OutputLimit:   cfg.OutputLimit,
		MaxEventBytes: cfg.MaxEventBytes,
		Refresh:       cfg.Refresh,
		Logger:        a.e.Logger(),
		AppNow:        a.e.Now,
		Speed:         a.cfg.Speed,
		Links:         links,
		Throttle:      a.throttle,
	})
}

// clusterOfKey is the cluster's flows on the provider key named key, for
// the dashboard: nil when the app is not one of a cluster.
func (a *App) clusterOfKey(ctx context.Context, key string) ([]ui.ClusterFlow, error) {
	for name, p := range a.providers {
		if a.clusters[name] == nil || p.Governor.Stats(a.e.Now()).Key != key {
			continue
		}
		rows, err := a.ClusterFlows(ctx, name)
		out := make([]ui.ClusterFlow, len(rows))
		for i, r := range rows {
			out[i] = ui.ClusterFlow{Node: r.Node, Flow: r.Flow, Waiting: int64(r.Waiting), Admitted: r.Admitted, Tokens: r.Tokens.Tokens()}
		}
		return out, err
	}
	return nil, nil
}

// keyStats is every provider key's governor statistics, by provider name,
// for the dashboard: a key whose cluster use cannot be read shows this
// process's own, and the error is logged.
func (a *App) keyStats(ctx context.Context, now time.Time) []governor.Stats {
	names := slices.Sorted(maps.Keys(a.providers))
	out := make([]governor.Stats, 0, len(names))
	for _, n := range names {
		st, err := a.statsOf(ctx, n, now)
		if err != nil {
			a.e.Logger().Warn("sluice: dashboard", "err", err)
		}
		out = append(out, st)
	}
	return out
}
