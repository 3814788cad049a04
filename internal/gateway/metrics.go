package gateway

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/metrics"
)

// gatewayMetrics are the gateway's series, on Config.Metrics or, without
// one, on a registry of their own, so that several gateways (or a gateway
// inside another program) never collide on the global one. The "key"
// label is Config.Key, the key's name; the series are defined in package
// metrics (docs/metrics.md).
type gatewayMetrics struct {
	set      *metrics.Set
	key      string
	requests *prometheus.CounterVec // key set: labels flow, code
	rejoined prometheus.Counter
}

func newMetrics(g *Gateway) (*gatewayMetrics, error) {
	s := g.cfg.Metrics
	if s == nil {
		s = metrics.New()
	}
	// A governor given by its owner is read by the owner's series when
	// they share the Set.
	if g.gov != nil && (g.cfg.Governor == nil || g.cfg.Metrics == nil) {
		if err := s.AddGovernor(g.gov, g.cfg.Now); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	// Each routed target's series, under its name.
	for _, t := range g.targets {
		if err := s.AddGovernor(t.gov, g.cfg.Now); err != nil {
			return nil, fmt.Errorf("gateway: target %q: %w", t.name, err)
		}
	}
	return &gatewayMetrics{set: s, key: g.cfg.Key, requests: s.GatewayRequestsOf(g.cfg.Key), rejoined: s.PlacesTakenBack(g.cfg.Key)}, nil
}

// flowMetrics are one flow's series, looked up once: flows are fixed at New.
type flowMetrics struct {
	ok                  prometheus.Counter // requests answered 200
	admissions          prometheus.Counter
	wait                prometheus.Observer
	tokensIn, tokensOut prometheus.Counter
	// lastAdmit is when a call of the flow was last admitted (Unix
	// nanoseconds, 0 for never), for its state in /v1/flows.
	lastAdmit atomic.Int64
}

func (m *gatewayMetrics) flow(name string) *flowMetrics { return m.flowOf(m.key, name) }

// flowOf is flow name's series on the key named key: the gateway's, or a
// routed target's.
func (m *gatewayMetrics) flowOf(key, name string) *flowMetrics {
	f := m.set.Flow(key, name)
	fm := &flowMetrics{
		admissions: f.Admissions,
		wait:       f.Wait,
		tokensIn:   f.InputTokens,
		tokensOut:  f.OutputTokens,
	}
	if key == m.key {
		// Requests are counted by the gateway's key, whichever target
		// answered them.
		fm.ok = m.set.GatewayRequests(key, name, 200)
	}
	return fm
}

func (m *gatewayMetrics) rejected(key string, l governor.Limit, known bool, status int) {
	m.set.Rejection(key, l, known, status)
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// millis is d in milliseconds, to the microsecond, as the logs give every
// duration: a log line's number names its unit in its key ("waited_ms").
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
