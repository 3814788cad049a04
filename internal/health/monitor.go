package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/store"
)

// Source is where a Monitor reads the jobs' records and records which
// state each was last alerted in. Its methods are those of store.Store's
// that keep jobs' records, so a store is passed as it is.
type Source interface {
	// Jobs returns every job's record.
	Jobs(ctx context.Context) ([]store.Job, error)
	// SetJobAlert sets job name's Alert to to if it is from, and reports
	// whether it did: of several processes that try the same change, exactly
	// one wins.
	SetJobAlert(ctx context.Context, name, from, to string) (bool, error)
}

// Config configures a Monitor. Every field documents its default; Source
// is the only one required.
type Config struct {
	Source Source

	// Every is how often the jobs are read and judged. Default 30s.
	Every time.Duration

	// Threshold is how long a job with eligible items may go without
	// processing one before it is stalled. Default DefaultThreshold (2h).
	Threshold time.Duration
	// Thresholds overrides Threshold for the jobs it names.
	Thresholds map[string]time.Duration

	// RateWindow is how far back the rate per hour is measured. Default 1h.
	RateWindow time.Duration

	// Quota says what a job's governor flow waits for at now (QuotaOf reads
	// a governor). Default: nothing ever waits.
	Quota func(job string, now time.Time) Quota

	// History, when set, receives every HistoryEvery a sample per job of
	// what it did in the interval (store.Sample), from Source
	// HistorySource. Default: none.
	History       History
	HistoryEvery  time.Duration // default 1m
	HistorySource string        // default "app"
	// HistoryKeep is how long History's samples are kept: a poll deletes
	// those older than it (every source's), at most once every
	// PruneEvery. Default DefaultHistoryKeep; negative: kept for good.
	HistoryKeep time.Duration
	// Counters reads a job's governor totals at now (CountersOf), for the
	// samples' calls, tokens, rejections and refusals. Default: none.
	Counters func(job string, now time.Time) Counters
	// InFlight reads how many calls a job keeps going (see Flow.InFlight).
	// Default: none, and the fields are left out.
	InFlight func(job string) InFlight

	// Webhook, when set, receives each alert as a JSON POST (see Alert).
	// Default: none; alerts are only logged.
	Webhook string
	// Webhooks are the webhooks of jobs with one of their own, by job:
	// their alerts go there instead of to Webhook.
	Webhooks map[string]string
	// WebhookTimeout bounds each POST. Default 10s.
	WebhookTimeout time.Duration
	// RetryFor bounds how long one alert is retried when the webhook fails
	// (network errors, 429 and 5xx). Default 5m.
	RetryFor time.Duration
	// RetryBase is the first pause between attempts; each doubles, up to a
	// minute, and a random part of up to half of it is taken off, so many
	// processes do not retry in step. Default 1s.
	RetryBase time.Duration
	// HTTPClient sends the webhook's requests. Default: a new http.Client.
	HTTPClient *http.Client

	// Logger receives a line per change into or out of stalled, per alert
	// that could not be delivered, and per poll of Start's that could not
	// read the jobs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Speed is how many times as fast as the wall clock Now runs (a
	// rehearsal in compressed time): Start polls every Every of Now's time,
	// Every divided by Speed of wall time. Default 1.
	Speed float64
	// After waits between webhook attempts. Default time.After.
	After func(time.Duration) <-chan time.Time
}

// The defaults of Config.Every, Config.HistoryEvery and
// Config.HistoryKeep, and how often a Monitor prunes the history.
const (
	DefaultEvery        = 30 * time.Second
	DefaultHistoryEvery = time.Minute
	DefaultHistoryKeep  = 90 * 24 * time.Hour
	PruneEvery          = time.Hour
)

func (c Config) withDefaults() Config {
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	if c.Threshold <= 0 {
		c.Threshold = DefaultThreshold
	}
	if c.RateWindow <= 0 {
		c.RateWindow = time.Hour
	}
	if c.HistoryEvery <= 0 {
		c.HistoryEvery = DefaultHistoryEvery
	}
	if c.HistorySource == "" {
		c.HistorySource = "app"
	}
	if c.HistoryKeep == 0 {
		c.HistoryKeep = DefaultHistoryKeep
	}
	if c.WebhookTimeout <= 0 {
		c.WebhookTimeout = 10 * time.Second
	}
	if c.RetryFor <= 0 {
		c.RetryFor = 5 * time.Minute
	}
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.After == nil {
		c.After = time.After
	}
	return c
}

func (c Config) validate() error {
	if c.Source == nil {
		return errors.New("health: a monitor needs a Source")
	}
	for name, d := range c.Thresholds {
		if d <= 0 {
			return fmt.Errorf("health: threshold of job %q is %s: want a positive duration", name, d)
		}
	}
	if c.Webhook != "" && !httpURL(c.Webhook) {
		return errors.New("health: the webhook is not an http(s) URL")
	}
	for job, u := range c.Webhooks {
		if !httpURL(u) {
			return fmt.Errorf("health: the webhook of job %q is not an http(s) URL", job)
		}
	}
	return nil
}

// Monitor polls a Source, judges every job with Evaluate, alerts on each
// change into and out of stalled, and keeps the latest views for the HTTP
// API and readiness. It is safe for simultaneous use by multiple
// goroutines.
type Monitor struct {
	cfg Config

	pollMu   sync.Mutex          // one poll at a time
	samplers map[string]*Sampler // by job; only polls touch them
	// bases and lastSample are what the last recorded samples counted up
	// to, and when; only polls touch them.
	bases      map[string]base
	lastSample time.Time
	lastPrune  time.Time // when the history was last pruned; only polls touch it
	// stalled is, per job, the first view that found it stalled since the
	// last sample: a stall shorter than HistoryEvery is still recorded.
	stalled map[string]View

	mu      sync.Mutex
	views   []View // sorted by name
	pollErr error  // the last poll's, nil when it read the jobs
	cancel  context.CancelFunc
	loop    chan struct{} // closed when the loop Start began has returned
	alerts  sync.WaitGroup
	sending map[string]chan struct{} // by job: closed when its last alert is delivered or given up
	stopped chan struct{}            // closed by Stop: alerts in flight give up
	once    sync.Once
}

// New checks cfg, fills its defaults and returns a Monitor. It starts
// nothing: see Start.
func New(cfg Config) (*Monitor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Monitor{cfg: cfg, samplers: map[string]*Sampler{}, sending: map[string]chan struct{}{}, stopped: make(chan struct{})}, nil
}

// Start polls at once and then every Config.Every, in the background,
// until ctx ends or Stop. Starting again, or after Stop, does nothing.
func (m *Monitor) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loop != nil || m.isStopped() {
		return
	}
	ctx, m.cancel = context.WithCancel(ctx)
	m.loop = make(chan struct{})
	go func() {
		defer close(m.loop)
		t := time.NewTicker(max(clock.Real(m.cfg.Speed, m.cfg.Every), time.Millisecond))
		defer t.Stop()
		for {
			// A failed poll is kept for Ready and tried again at the next tick.
			if err := m.Poll(ctx); err != nil && ctx.Err() == nil {
				m.cfg.Logger.Warn("sluice: cannot judge the jobs' health", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the polling Start began and waits, until ctx ends, for the
// alerts being delivered; those still trying then give up. It is safe to
// call twice.
func (m *Monitor) Stop(ctx context.Context) error {
	m.mu.Lock()
	cancel, loop := m.cancel, m.loop
	m.mu.Unlock()
	if cancel != nil {
		cancel()
		<-loop
	}
	done := make(chan struct{})
	go func() {
		m.alerts.Wait()
		close(done)
	}()
	select {
	case <-done:
		m.stop()
		return nil
	case <-ctx.Done():
		m.stop()
		<-done
		return fmt.Errorf("health: stop: alerts still being delivered: %w", ctx.Err())
	}
}

func (m *Monitor) stop() { m.once.Do(func() { close(m.stopped) }) }

func (m *Monitor) isStopped() bool {
	select {
	case <-m.stopped:
		return true
	default:
		return false
	}
}

// Poll reads the jobs once, judges each, and alerts on the changes into
// and out of stalled. Start calls it; it is exported for callers that poll
// on their own schedule. A failed read is kept for Ready and returned; the
// views stay as they were.
func (m *Monitor) Poll(ctx context.Context) error {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	jobs, err := m.cfg.Source.Jobs(ctx)
	if err != nil {
		err = fmt.Errorf("read the jobs: %w", err)
		m.mu.Lock()
		m.pollErr = err
		m.mu.Unlock()
		return err
	}
	now := m.cfg.Now()
	views := make([]View, 0, len(jobs))
	seen := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		seen[j.Name] = true
		s := m.samplers[j.Name]
		if s == nil {
			s = NewSampler(m.cfg.RateWindow, m.cfg.Every)
			m.samplers[j.Name] = s
		}
		s.Add(now, addSat(max(j.Saved, 0), max(j.Parked, 0)))
		var q Quota
		if m.cfg.Quota != nil {
			q = m.cfg.Quota(j.Name, now)
		}
		v := Evaluate(j, m.threshold(j.Name), q, s, now)
		if m.cfg.InFlight != nil {
			v = v.WithInFlight(m.cfg.InFlight(j.Name))
		}
		views = append(views, v)
		if to, ok := alertFor(j.Alert, v.State); ok {
			m.alert(ctx, j, to, v, now)
		}
	}
	for name := range m.samplers {
		if !seen[name] {
			delete(m.samplers, name)
		}
	}
	slices.SortFunc(views, func(a, b View) int { return strings.Compare(a.Name, b.Name) })
	m.record(ctx, now, jobs, views)
	m.mu.Lock()
	m.views, m.pollErr = views, nil
	m.mu.Unlock()
	m.prune(ctx, now)
	return nil
}

func (m *Monitor) threshold(job string) time.Duration {
	if d, ok := m.cfg.Thresholds[job]; ok {
		return d
	}
	return m.cfg.Threshold
}

// alertFor says what a job last alerted in (its record's Alert) changes
// to, judged now in state: stalled when it became stalled, its new state
// when it stopped being stalled, nothing otherwise.
func alertFor(last string, state State) (string, bool) {
	stalled := string(Stalled)
	switch {
	case state == Stalled && last != stalled:
		return stalled, true
	case state != Stalled && last == stalled:
		return string(state), true
	}
	return "", false
}

// Views returns every job's view as of the last poll that read the jobs,
// sorted by name.
func (m *Monitor) Views() []View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.views)
}

// Flows returns every job's Flow as of the last poll that read the jobs,
// sorted by name: what GET /v1/flows answers.
func (m *Monitor) Flows() []Flow {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Flow, len(m.views))
	for i, v := range m.views {
		out[i] = v.Flow
	}
	return out
}

// NotReadyError says why a Monitor is not ready: the jobs that are stalled,
// or the error of the last poll when the jobs could not be read.
type NotReadyError struct {
	Stalled []View
	Err     error
}

func (e *NotReadyError) Error() string {
	if e.Err != nil {
		return "the jobs' records cannot be read: " + e.Err.Error()
	}
	parts := make([]string, len(e.Stalled))
	for i, v := range e.Stalled {
		parts[i] = fmt.Sprintf("job %s is %s: %s", v.Name, v.State, v.Reason)
	}
	return strings.Join(parts, "; ")
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// Ready returns a *NotReadyError when the last poll could not read the jobs
// or found some stalled, else nil (nil too before the first poll).
func (m *Monitor) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pollErr != nil {
		return &NotReadyError{Err: m.pollErr}
	}
	var stalled []View
	for _, v := range m.views {
		if v.State == Stalled {
			stalled = append(stalled, v)
		}
	}
	if len(stalled) > 0 {
		return &NotReadyError{Stalled: stalled}
	}
	return nil
}

func httpURL(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}
