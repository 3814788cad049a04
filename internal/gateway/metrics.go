package gateway

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/governor"
)

// metrics are the gateway's Prometheus series, on a registry of its own so
// that several gateways (or a gateway inside another program) never collide
// on the global one. The "key" label is Config.Key, the key's name.
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	admissions *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	rejections *prometheus.CounterVec
	rejoined   prometheus.Counter
}

func newMetrics(g *Gateway) *metrics {
	key := prometheus.Labels{"key": g.cfg.Key}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_requests_total", ConstLabels: key,
			Help: "Chat requests answered, by flow and HTTP status.",
		}, []string{"flow", "code"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_flow_admissions_total", ConstLabels: key,
			Help: "Calls admitted by the governor, by flow.",
		}, []string{"flow"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_flow_admission_wait_seconds", ConstLabels: key,
			Help:    "Time from a request's arrival to its admission, by flow.",
			Buckets: []float64{.001, .005, .025, .1, .25, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"flow"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_flow_tokens_total", ConstLabels: key,
			Help: "Tokens charged to finished calls as the provider counts them, by flow and kind (input, output).",
		}, []string{"flow", "kind"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_provider_rejections_total", ConstLabels: key,
			Help: "Upstream rejections (rate limit, too large), by the limit they named (\"unknown\" when none) and HTTP status.",
		}, []string{"limit", "status"}),
		rejoined: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_places_taken_back_total", ConstLabels: key,
			Help: "Requests sent again after a 429 that took back the place in line their earlier attempt kept.",
		}),
	}
	m.reg.MustRegister(m.requests, m.admissions, m.wait, m.tokens, m.rejections, m.rejoined, &stateCollector{g: g})
	return m
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

func (m *metrics) flow(name string) *flowMetrics {
	return &flowMetrics{
		ok:         m.requests.WithLabelValues(name, "200"),
		admissions: m.admissions.WithLabelValues(name),
		wait:       m.wait.WithLabelValues(name),
		tokensIn:   m.tokens.WithLabelValues(name, "input"),
		tokensOut:  m.tokens.WithLabelValues(name, "output"),
	}
}

func (m *metrics) rejected(l governor.Limit, known bool, status int) {
	name := "unknown"
	if known {
		name = l.String()
	}
	m.rejections.WithLabelValues(name, strconv.Itoa(status)).Inc()
}

// stateCollector reads the governor's state at scrape time.
type stateCollector struct{ g *Gateway }

var (
	usedDesc = prometheus.NewDesc("sluice_limit_used", "Charged against the limit in its current window, including use by others seen in provider headers.",
		[]string{"key", "limit"}, nil)
	capacityDesc = prometheus.NewDesc("sluice_limit_capacity", "The limit's allowance in force (as configured or as the provider reported it).",
		[]string{"key", "limit"}, nil)
	waitingDesc = prometheus.NewDesc("sluice_flow_waiting", "Requests waiting for admission, by flow.",
		[]string{"key", "flow"}, nil)
	waitingOnDesc = prometheus.NewDesc("sluice_flow_waiting_on", "1 for what holds the flow's first waiting request back (a limit such as tpm, tpd pacing, a provider pause, its turn); absent when nothing waits.",
		[]string{"key", "flow", "on"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- usedDesc
	ch <- capacityDesc
	ch <- waitingDesc
	ch <- waitingOnDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.gov.Stats(c.g.cfg.Now())
	for _, ls := range st.Limits {
		if ls.Max == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(ls.Used), c.g.cfg.Key, ls.Limit.String())
		ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(ls.Max), c.g.cfg.Key, ls.Limit.String())
	}
	for _, f := range st.Flows {
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(f.Waiting), c.g.cfg.Key, f.Name)
		if f.WaitingOn.Kind != "" {
			ch <- prometheus.MustNewConstMetric(waitingOnDesc, prometheus.GaugeValue, 1, c.g.cfg.Key, f.Name, f.WaitingOn.String())
		}
	}
}

func seconds(d time.Duration) float64 { return d.Seconds() }
