package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/route"
)

// The series read from the routes at scrape time.
var (
	routePicksDesc = prometheus.NewDesc("sluice_route_picks_total",
		"Calls a route chose the target for, by route and target.",
		[]string{"route", "target"}, nil)
	routeFailuresDesc = prometheus.NewDesc("sluice_route_failures_total",
		"Calls that failed on the target (5xx, overload, timeouts, closed connections), by route and target.",
		[]string{"route", "target"}, nil)
	routeOutsDesc = prometheus.NewDesc("sluice_route_outs_total",
		"Times the route left the target out after its calls failed.",
		[]string{"route", "target"}, nil)
	routeOutDesc = prometheus.NewDesc("sluice_route_target_out",
		"1 while the route leaves the target out (its calls failed), 0 otherwise.",
		[]string{"route", "target"}, nil)
)

// routeCollector reads every route added to it at scrape time.
type routeCollector struct {
	mu     sync.Mutex
	routes []watchedRoute
}

type watchedRoute struct {
	r   *route.Router
	now func() time.Time
}

// AddRoute makes the registry read r's targets at every scrape, on the
// clock now (nil: time.Now). A route's name is read from one router only.
func (s *Set) AddRoute(r *route.Router, now func() time.Time) error {
	if r == nil {
		return errors.New("metrics: no route")
	}
	if now == nil {
		now = time.Now
	}
	c := s.routes
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.routes {
		if w.r == r {
			return nil
		}
		if w.r.Name() == r.Name() {
			return fmt.Errorf("metrics: the series of route %q are already read from another router", r.Name())
		}
	}
	c.routes = append(c.routes, watchedRoute{r: r, now: now})
	return nil
}

func (c *routeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{routePicksDesc, routeFailuresDesc, routeOutsDesc, routeOutDesc} {
		ch <- d
	}
}

func (c *routeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	routes := append([]watchedRoute(nil), c.routes...)
	c.mu.Unlock()
	for _, w := range routes {
		for _, t := range w.r.Stats(w.now()) {
			name := w.r.Name()
			ch <- prometheus.MustNewConstMetric(routePicksDesc, prometheus.CounterValue, float64(t.Picked), name, t.Name)
			ch <- prometheus.MustNewConstMetric(routeFailuresDesc, prometheus.CounterValue, float64(t.Failed), name, t.Name)
			ch <- prometheus.MustNewConstMetric(routeOutsDesc, prometheus.CounterValue, float64(t.Outs), name, t.Name)
			out := 0.0
			if t.Out {
				out = 1
			}
			ch <- prometheus.MustNewConstMetric(routeOutDesc, prometheus.GaugeValue, out, name, t.Name)
		}
	}
}
