// Package metrics defines sluice's Prometheus series, once, for every part
// of a process that records them: the engine's runs and steps, the governed
// LLM calls of functions and backfills, the gateway's requests, every
// governor's limits and flows, and the backfills' health.
//
// A Set is those series on one registry. The app and a gateway built in
// the same process share one Set (or two Sets made On the same registry,
// which share the same series), so /metrics answers for the whole server
// and no series is defined twice. A server with an app and a gateway:
//
//	set, err := metrics.On(app.MetricsRegistry()) // the app's series, shared
//	gw, err := gateway.New(ctx, gateway.Config{..., Metrics: set})
//	mux.Handle("GET /metrics", app.MetricsHandler()) // both parts' series
//
// Nothing a scrape reads comes from a database: counters and histograms
// are updated where the calls happen, and the gauges read state kept in
// memory (governor.Governor.Stats, the health monitor's last views), so a
// scrape costs the same with a hundred runs in the store or a million items.
package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// WaitBuckets are the bounds, in seconds, of the admission wait histogram.
var WaitBuckets = []float64{.001, .005, .025, .1, .25, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Set is sluice's series on one registry. Its recording methods are safe
// for simultaneous use, and do nothing on a nil *Set, so a part that was
// given no Set records nothing.
type Set struct {
	reg *prometheus.Registry

	gatewayRequests *prometheus.CounterVec   // key, flow, code
	placesTakenBack *prometheus.CounterVec   // key
	admissions      *prometheus.CounterVec   // key, flow
	wait            *prometheus.HistogramVec // key, flow
	tokens          *prometheus.CounterVec   // key, flow, kind
	rejections      *prometheus.CounterVec   // key, limit, status
	runsStarted     *prometheus.CounterVec   // function
	runsFinished    *prometheus.CounterVec   // function, status
	stepAttempts    *prometheus.CounterVec   // function, outcome

	governors *governorCollector
	routes    *routeCollector
	health    *healthCollector
	cluster   *clusterCollector
	retries   *retriesCollector
	runtime   sync.Once
}

// New returns the series on a registry of their own.
func New() *Set {
	s, err := On(prometheus.NewRegistry())
	if err != nil {
		panic(err) // a new registry holds nothing to collide with
	}
	return s
}

// On registers the series on reg and returns them. Series another Set
// already registered on reg are shared, not defined again: two Sets On one
// registry record into the same counters and read the same governors. It
// fails only when reg holds something else under one of sluice's names.
func On(reg *prometheus.Registry) (*Set, error) {
	s := &Set{reg: reg}
	var errs []error
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v, err := shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
		errs = append(errs, err)
		return v
	}
	s.gatewayRequests = counter("sluice_gateway_requests_total",
		"Chat requests the gateway answered, by flow and HTTP status (499: the caller left first).", "key", "flow", "code")
	s.placesTakenBack = counter("sluice_gateway_places_taken_back_total",
		"Requests sent again after a 429 that took back the place in line their earlier attempt kept.", "key")
	s.admissions = counter("sluice_flow_admissions_total",
		"Calls admitted by the governor, by flow.", "key", "flow")
	var err error
	s.wait, err = shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_flow_admission_wait_seconds",
		Help:    "Time from a call's arrival at the governor to its admission, by flow.",
		Buckets: WaitBuckets,
	}, []string{"key", "flow"}))
	errs = append(errs, err)
	s.tokens = counter("sluice_flow_tokens_total",
		"Tokens charged to finished calls as the provider counts them, by flow and kind (input, output).", "key", "flow", "kind")
	s.rejections = counter("sluice_provider_rejections_total",
		"Provider rejections (rate limit, too large), by the limit they named (\"unknown\" when none) and HTTP status.", "key", "limit", "status")
	s.runsStarted = counter("sluice_runs_started_total",
		"Runs this process began executing (a run resumed after a restart counts again), by function.", "function")
	s.runsFinished = counter("sluice_runs_finished_total",
		"Runs that ended in this process, by function and how they ended (completed, failed, cancelled, timed_out).", "function", "status")
	s.stepAttempts = counter("sluice_step_attempts_total",
		"Step attempts executed (replays of recorded steps are not), by function and outcome (ok, or the failure's class: retry, fatal, retry_after, quota_wait).", "function", "outcome")
	s.governors, err = shared(reg, &governorCollector{})
	errs = append(errs, err)
	s.routes, err = shared(reg, &routeCollector{})
	errs = append(errs, err)
	s.health, err = shared(reg, &healthCollector{})
	errs = append(errs, err)
	s.cluster, err = shared(reg, &clusterCollector{})
	errs = append(errs, err)
	s.retries, err = shared(reg, &retriesCollector{})
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return s, nil
}

// shared registers c on reg, or returns the collector of the same series
// already registered there.
func shared[C prometheus.Collector](reg *prometheus.Registry, c C) (C, error) {
	err := reg.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
		return c, fmt.Errorf("the registry holds another collector of the series of %T", c)
	}
	return c, err
}

// Registry is the registry the series are on.
func (s *Set) Registry() *prometheus.Registry { return s.reg }

// AddRuntime adds the Go runtime's and the process's standard series
// (go_*, process_*) to the registry, once however often it is called.
func (s *Set) AddRuntime() {
	s.runtime.Do(func() {
		for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			// Another Set On the same registry may have added them.
			if err := s.reg.Register(c); err != nil {
				if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); !ok {
					panic(fmt.Sprintf("metrics: %v", err)) // sluice's names never collide with go_* and process_*
				}
			}
		}
	})
}

// HandlerTimeout bounds a scrape: one that takes longer is answered 503.
const HandlerTimeout = 10 * time.Second

// Handler serves the registry in the Prometheus exposition formats. A
// collector that fails is logged to log (nil: not logged) and the rest is
// served; at most 4 scrapes are served at once.
func (s *Set) Handler(log *slog.Logger) http.Handler {
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: HandlerTimeout, MaxRequestsInFlight: 4}
	if log != nil {
		opts.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelError)
	}
	return promhttp.HandlerFor(s.reg, opts)
}

// Flow is one flow's call series on one key, looked up once.
type Flow struct {
	Admissions                prometheus.Counter
	Wait                      prometheus.Observer // seconds
	InputTokens, OutputTokens prometheus.Counter
}

// Flow returns the series of flow's calls on key (nil on a nil Set).
func (s *Set) Flow(key, flow string) *Flow {
	if s == nil {
		return nil
	}
	return &Flow{
		Admissions:   s.admissions.WithLabelValues(key, flow),
		Wait:         s.wait.WithLabelValues(key, flow),
		InputTokens:  s.tokens.WithLabelValues(key, flow, "input"),
		OutputTokens: s.tokens.WithLabelValues(key, flow, "output"),
	}
}

// Admitted counts a call admitted after waiting wait.
func (f *Flow) Admitted(wait time.Duration) {
	if f == nil {
		return
	}
	f.Admissions.Inc()
	f.Wait.Observe(max(wait, 0).Seconds())
}

// Settled counts the tokens a finished call is charged, as settled with
// the provider's usage.
func (f *Flow) Settled(c governor.Cost) {
	if f == nil {
		return
	}
	f.InputTokens.Add(float64(max(c.Input, 0)))
	f.OutputTokens.Add(float64(max(c.Output, 0)))
}

// Rejection counts a provider rejection on key naming limit l (when
// known), answered with HTTP status.
func (s *Set) Rejection(key string, l governor.Limit, known bool, status int) {
	if s == nil {
		return
	}
	name := "unknown"
	if known {
		name = l.String()
	}
	s.rejections.WithLabelValues(key, name, strconv.Itoa(status)).Inc()
}

// Rejected counts err as a provider rejection on key when it is one (an
// *llm.RateLimitError or *llm.TooLargeError), and reports whether it was.
func (s *Set) Rejected(key string, err error) bool {
	if rl, ok := errors.AsType[*llm.RateLimitError](err); ok {
		s.Rejection(key, rl.Limit, rl.LimitKnown, rl.Status)
		return true
	}
	if tl, ok := errors.AsType[*llm.TooLargeError](err); ok {
		s.Rejection(key, tl.Limit, tl.LimitKnown, tl.Status)
		return true
	}
	return false
}

// GatewayRequests is the counter of the gateway requests on key of flow
// answered with code. s must not be nil.
func (s *Set) GatewayRequests(key, flow string, code int) prometheus.Counter {
	return s.gatewayRequests.WithLabelValues(key, flow, strconv.Itoa(code))
}

// GatewayRequestsOf is the gateway requests' counter vector with key set:
// its labels are flow and code. s must not be nil.
func (s *Set) GatewayRequestsOf(key string) *prometheus.CounterVec {
	return s.gatewayRequests.MustCurryWith(prometheus.Labels{"key": key})
}

// PlacesTakenBack is the counter of requests on key that took back a kept
// place in line. s must not be nil.
func (s *Set) PlacesTakenBack(key string) prometheus.Counter {
	return s.placesTakenBack.WithLabelValues(key)
}

// RunStarted counts a run of function that began executing.
func (s *Set) RunStarted(function string) {
	if s == nil {
		return
	}
	s.runsStarted.WithLabelValues(function).Inc()
}

// RunFinished counts a run of function that ended in state.
func (s *Set) RunFinished(function string, state run.State) {
	if s == nil {
		return
	}
	s.runsFinished.WithLabelValues(function, string(state)).Inc()
}

// StepAttempt counts an executed attempt of a step of function: failed is
// its error, nil when it succeeded.
func (s *Set) StepAttempt(function string, failed *run.StepError) {
	if s == nil {
		return
	}
	outcome := "ok"
	if failed != nil {
		outcome = failed.Class.String()
	}
	s.stepAttempts.WithLabelValues(function, outcome).Inc()
}

// AddGovernor makes the registry read g's limits and flows at every scrape,
// under g's key, on the clock now (nil: time.Now). A key is read from one
// governor only: adding a second governor of the same key fails, since
// their series would be the same.
func (s *Set) AddGovernor(g *governor.Governor, now func() time.Time) error {
	if now == nil {
		now = time.Now
	}
	return s.governors.add(g, now)
}

// AddCluster makes the registry read, at every scrape, the flows of every
// process of the cluster on key from flows (in memory: what the process
// last read from the store). A key is read from one source; a second
// fails.
func (s *Set) AddCluster(key string, flows func() []ClusterFlow) error {
	if flows == nil {
		return errors.New("metrics: no cluster source")
	}
	c := s.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.keys {
		if k.key == key {
			return fmt.Errorf("metrics: the cluster's flows of key %q are already read from another source", key)
		}
	}
	c.keys = append(c.keys, clusterSource{key: key, flows: flows})
	return nil
}

// AddHealth makes the registry read the backfills' health from flows at
// every scrape (a health.Monitor's Flows: its last poll's views). A
// registry reads one source; a second fails.
func (s *Set) AddHealth(flows func() []health.Flow) error {
	return s.health.set(flows)
}
