package sluice

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/quota"
)

// MetricsHandler serves the app's Prometheus metrics (docs/metrics.md):
// its runs and step attempts, its providers' limits, flows, admissions,
// admission waits, tokens and rejections, its backfills' health, and the
// Go runtime's and the process's standard series. A scrape reads only what
// the app keeps in memory — never the database — so it costs the same
// however many runs and items the database holds. Serve it at /metrics,
// behind a token when it is served off loopback.
func (a *App) MetricsHandler() http.Handler {
	return a.metrics.Handler(a.e.Logger())
}

// MetricsRegistry is the registry MetricsHandler serves, for collectors of
// the program's own that belong on the same /metrics. Series named
// sluice_* are the app's: register nothing under those names.
func (a *App) MetricsRegistry() *prometheus.Registry {
	return a.metrics.Registry()
}

// newMetrics returns the series an app records, with the runtime's.
func newMetrics() *metrics.Set {
	s := metrics.New()
	s.AddRuntime()
	return s
}

// watchMetrics has the app's series read the backfills' health and every
// provider's governor, and count the providers' calls. New calls it once
// the providers are built, before anything runs.
func (a *App) watchMetrics() error {
	if err := a.metrics.AddHealth(a.monitor.Flows); err != nil {
		return err
	}
	for _, r := range a.routes {
		if err := a.metrics.AddRoute(r.Router, r.Now); err != nil {
			return err
		}
	}
	for name, p := range a.providers {
		p.Metrics = a.metrics
		if err := a.metrics.AddGovernor(p.Governor, p.Now); err != nil {
			return err
		}
		if l := a.clusters[name]; l != nil {
			key := p.Governor.Stats(time.Now()).Key // the name only
			if err := a.metrics.AddCluster(key, clusterSeen(l)); err != nil {
				return err
			}
		}
	}
	return nil
}

// clusterSeen reads the flows of every process of l's cluster as l last
// read them, for the metrics.
func clusterSeen(l *quota.Ledger) func() []metrics.ClusterFlow {
	return func() []metrics.ClusterFlow {
		rows := l.SeenClusterFlows()
		out := make([]metrics.ClusterFlow, len(rows))
		for i, r := range rows {
			out[i] = metrics.ClusterFlow{Node: r.Node, Flow: r.Flow, Waiting: r.Waiting, Admitted: r.Admitted, Input: r.Input, Output: r.Output}
		}
		return out
	}
}
