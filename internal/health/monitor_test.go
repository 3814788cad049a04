package health

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// fakeSource is a Source whose methods call its Func fields.
type fakeSource struct {
	JobsFunc        func(ctx context.Context) ([]store.Job, error)
	SetJobAlertFunc func(ctx context.Context, name, from, to string) (bool, error)
}

var _ Source = (*fakeSource)(nil)

func (f *fakeSource) Jobs(ctx context.Context) ([]store.Job, error) { return f.JobsFunc(ctx) }

func (f *fakeSource) SetJobAlert(ctx context.Context, name, from, to string) (bool, error) {
	return f.SetJobAlertFunc(ctx, name, from, to)
}

// jobTable is a store's jobs in memory, with SetJobAlert's compare-and-set,
// shared by the monitors of a test as processes share a database.
type jobTable struct {
	mu   sync.Mutex
	jobs map[string]store.Job
	err  error // Jobs fails with it when set
}

func newJobTable(jobs ...store.Job) *jobTable {
	t := &jobTable{jobs: map[string]store.Job{}}
	for _, j := range jobs {
		t.jobs[j.Name] = j
	}
	return t
}

func (t *jobTable) source() *fakeSource {
	return &fakeSource{
		JobsFunc: func(context.Context) ([]store.Job, error) {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.err != nil {
				return nil, t.err
			}
			out := make([]store.Job, 0, len(t.jobs))
			for _, j := range t.jobs {
				out = append(out, j)
			}
			return out, nil
		},
		SetJobAlertFunc: func(_ context.Context, name, from, to string) (bool, error) {
			t.mu.Lock()
			defer t.mu.Unlock()
			j, ok := t.jobs[name]
			if !ok || j.Alert != from {
				return false, nil
			}
			j.Alert = to
			t.jobs[name] = j
			return true, nil
		},
	}
}

func (t *jobTable) update(name string, f func(*store.Job)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[name]
	f(&j)
	t.jobs[name] = j
}

// fakeClock is a clock tests move: After moves it by the pause asked for
// and fires at once, and records the pause.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	pauses []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.pauses = append(c.pauses, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *fakeClock) Pauses() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.pauses...)
}

// webhook is an alert receiver that answers each POST with the next of its
// statuses (the last one again once they run out) and records the alerts
// it took.
type webhook struct {
	srv      *httptest.Server
	mu       sync.Mutex
	statuses []int
	posts    int
	took     []Alert
}

func newWebhook(t *testing.T, statuses ...int) *webhook {
	w := &webhook{statuses: statuses}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		defer w.mu.Unlock()
		status := w.statuses[min(w.posts, len(w.statuses)-1)]
		w.posts++
		if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
			t.Errorf("%s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
		}
		if status == http.StatusOK {
			var a Alert
			if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
				t.Errorf("alert body: %v", err)
			}
			w.took = append(w.took, a)
		}
		rw.WriteHeader(status)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) result() (posts int, took []Alert) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.posts, append([]Alert(nil), w.took...)
}

// bundle is what a monitor test works with.
type bundle struct {
	jobs  *jobTable
	clock *fakeClock
	log   *testenv.Buffer
}

func setup(jobs ...store.Job) *bundle {
	return &bundle{jobs: newJobTable(jobs...), clock: &fakeClock{now: t0}, log: &testenv.Buffer{}}
}

func (b *bundle) monitor(t *testing.T, cfg Config) *Monitor {
	t.Helper()
	cfg.Source = b.jobs.source()
	cfg.Now, cfg.After = b.clock.Now, b.clock.After
	cfg.Logger = slog.New(slog.NewJSONHandler(b.log, nil))
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	return m
}

func poll(t *testing.T, m *Monitor) {
	t.Helper()
	if err := m.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// stop waits for the alerts m is delivering.
func stop(t *testing.T, m *Monitor) {
	t.Helper()
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func titles() store.Job {
	return store.Job{Name: "titles", MonitoringSince: t0.Add(-24 * time.Hour), LastProgressAt: t0.Add(-time.Hour), Pending: 1412, Saved: 100}
}

// A webhook that fails twice and then takes the alert: the alert is
// delivered once, after two pauses, each about twice the one before.
func TestAlertRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	b := setup(titles())
	hook := newWebhook(t, 500, 503, 200)
	m := b.monitor(t, Config{Threshold: 2 * time.Hour, Webhook: hook.srv.URL, RetryBase: time.Second})
	poll(t, m)
	b.clock.Add(time.Hour)
	poll(t, m)
	stop(t, m)
	posts, took := hook.result()
	if posts != 3 || len(took) != 1 {
		t.Fatalf("%d posts, %d alerts taken; want 3 and 1", posts, len(took))
	}
	a := took[0]
	if a.Job != "titles" || a.State != Stalled || !strings.Contains(a.Reason, "no item processed for 2h0m0s") ||
		!a.Since.Equal(t0.Add(time.Hour)) || !a.At.Equal(t0.Add(time.Hour)) {
		t.Errorf("alert %+v", a)
	}
	p := b.clock.Pauses()
	if len(p) != 2 || p[0] <= 500*time.Millisecond || p[0] > time.Second || p[1] <= time.Second || p[1] > 2*time.Second {
		t.Errorf("pauses %v, want one in (0.5s, 1s] and one in (1s, 2s]", p)
	}
}

// Each change into and out of stalled is logged and alerted once, however
// often the monitor polls.
func TestAlertOnEachChange(t *testing.T) {
	t.Parallel()
	b := setup(titles())
	hook := newWebhook(t, 200)
	m := b.monitor(t, Config{Threshold: 2 * time.Hour, Webhook: hook.srv.URL})
	for range 3 {
		poll(t, m)
		b.clock.Add(time.Hour)
	}
	// 10:00, 2h after the last progress: stalled, then polled again.
	b.jobs.update("titles", func(j *store.Job) { j.LastProgressAt, j.Saved, j.Pending = b.clock.Now(), 105, 1407 })
	poll(t, m)
	poll(t, m)
	stop(t, m)
	_, took := hook.result()
	if len(took) != 2 || took[0].State != Stalled || took[1].State != Progressing ||
		!strings.HasPrefix(took[1].Reason, "no longer stalled: last processed an item 0s ago") {
		t.Fatalf("alerts %+v, want stalled then progressing", took)
	}
	log := b.log.String()
	if strings.Count(log, `"msg":"sluice: job stalled"`) != 1 || strings.Count(log, `"msg":"sluice: job recovered"`) != 1 {
		t.Errorf("want one line per change:\n%s", log)
	}
	if !strings.Contains(log, `"job":"titles"`) {
		t.Errorf("the log lines do not name the job:\n%s", log)
	}
}

// Two processes watching the same jobs send one alert: the one whose
// compare-and-set changed the record.
func TestAlertDeduplicated(t *testing.T) {
	t.Parallel()
	b := setup(titles())
	hook := newWebhook(t, 200)
	one := b.monitor(t, Config{Threshold: time.Hour, Webhook: hook.srv.URL})
	two := b.monitor(t, Config{Threshold: time.Hour, Webhook: hook.srv.URL})
	var wg sync.WaitGroup
	for _, m := range []*Monitor{one, two, one, two} {
		wg.Go(func() { poll(t, m) })
	}
	wg.Wait()
	stop(t, one)
	stop(t, two)
	if _, took := hook.result(); len(took) != 1 {
		t.Errorf("%d alerts, want 1", len(took))
	}
	if n := strings.Count(b.log.String(), "sluice: job stalled"); n != 1 {
		t.Errorf("%d log lines, want 1", n)
	}
	if one.Views()[0].State != Stalled || two.Views()[0].State != Stalled {
		t.Error("both monitors should see the job stalled")
	}
}

func TestAlertGivesUp(t *testing.T) {
	t.Parallel()
	t.Run("after RetryFor", func(t *testing.T) {
		t.Parallel()
		b := setup(titles())
		hook := newWebhook(t, 502)
		m := b.monitor(t, Config{Threshold: time.Hour, Webhook: hook.srv.URL, RetryBase: time.Second, RetryFor: time.Minute})
		poll(t, m)
		stop(t, m)
		posts, _ := hook.result()
		var sum time.Duration
		for _, p := range b.clock.Pauses() {
			sum += p
		}
		// Pauses of at most 1, 2, 4, 8, 16, 32 s: 6 to 7 attempts fit in a minute.
		if posts < 5 || posts > 8 || sum > time.Minute {
			t.Errorf("%d posts over %s", posts, sum)
		}
		if !strings.Contains(b.log.String(), "sluice: alert not delivered") {
			t.Errorf("the failure is not logged:\n%s", b.log)
		}
	})
	t.Run("at once on a refusal", func(t *testing.T) {
		t.Parallel()
		b := setup(titles())
		hook := newWebhook(t, 404)
		m := b.monitor(t, Config{Threshold: time.Hour, Webhook: hook.srv.URL})
		poll(t, m)
		stop(t, m)
		if posts, _ := hook.result(); posts != 1 {
			t.Errorf("%d posts of an alert the webhook refused with 404", posts)
		}
	})
}

// A change that cannot be recorded is not alerted; the next poll tries it
// again.
func TestAlertWhenTheRecordFails(t *testing.T) {
	t.Parallel()
	b := setup(titles())
	hook := newWebhook(t, 200)
	m := b.monitor(t, Config{Threshold: time.Hour, Webhook: hook.srv.URL})
	src := m.cfg.Source.(*fakeSource)
	cas := src.SetJobAlertFunc
	var fail sync.Mutex
	failing := true
	src.SetJobAlertFunc = func(ctx context.Context, name, from, to string) (bool, error) {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			return false, errors.New("database is locked")
		}
		return cas(ctx, name, from, to)
	}
	poll(t, m)
	fail.Lock()
	failing = false
	fail.Unlock()
	poll(t, m)
	stop(t, m)
	if _, took := hook.result(); len(took) != 1 {
		t.Errorf("%d alerts, want 1", len(took))
	}
	if !strings.Contains(b.log.String(), "database is locked") {
		t.Errorf("the failure is not logged:\n%s", b.log)
	}
}

func TestReady(t *testing.T) {
	t.Parallel()
	b := setup(titles(), store.Job{Name: "summaries", MonitoringSince: t0.Add(-time.Hour), LastProgressAt: t0.Add(-10 * time.Minute), Pending: 5})
	m := b.monitor(t, Config{Threshold: 2 * time.Hour})
	if err := m.Ready(); err != nil {
		t.Errorf("before the first poll: %v", err)
	}
	poll(t, m)
	if err := m.Ready(); err != nil {
		t.Errorf("both jobs progressing: %v", err)
	}
	b.clock.Add(90 * time.Minute)
	poll(t, m)
	err := m.Ready()
	var nr *NotReadyError
	if !errors.As(err, &nr) || len(nr.Stalled) != 1 || nr.Stalled[0].Name != "titles" ||
		err.Error() != "job titles is stalled: no item processed for 2h30m0s (since 2026-10-19T07:00:00Z); 1412 eligible remain" {
		t.Errorf("one job stalled: %v", err)
	}
	b.jobs.mu.Lock()
	b.jobs.err = errors.New("connection refused")
	b.jobs.mu.Unlock()
	if err := m.Poll(context.Background()); err == nil {
		t.Error("a poll that cannot read the jobs returned nil")
	}
	if err := m.Ready(); !errors.As(err, &nr) || nr.Err == nil || !strings.Contains(err.Error(), "cannot be read: read the jobs: connection refused") {
		t.Errorf("store unreachable: %v", err)
	}
	if len(m.Flows()) != 2 {
		t.Errorf("the views of the last poll that read the jobs are kept: %+v", m.Flows())
	}
	b.jobs.mu.Lock()
	b.jobs.err = nil
	b.jobs.mu.Unlock()
	b.jobs.update("titles", func(j *store.Job) { j.LastProgressAt = b.clock.Now() })
	poll(t, m)
	if err := m.Ready(); err != nil {
		t.Errorf("recovered: %v", err)
	}
}

func TestMonitorViewsAndQuota(t *testing.T) {
	t.Parallel()
	b := setup(titles(), store.Job{Name: "analysis", MonitoringSince: t0.Add(-time.Hour)})
	until := t0.Add(time.Minute)
	m := b.monitor(t, Config{Threshold: time.Hour, Thresholds: map[string]time.Duration{"titles": 3 * time.Hour},
		Quota: func(job string, now time.Time) Quota {
			if job == "titles" {
				return Quota{Waiting: true, Limit: "otpm", Until: until}
			}
			return Quota{}
		}})
	poll(t, m)
	for i := range 4 {
		b.clock.Add(time.Minute)
		b.jobs.update("titles", func(j *store.Job) { j.Saved += 3; j.Pending -= 3; j.LastProgressAt = b.clock.Now() })
		if i < 3 {
			poll(t, m)
		}
	}
	poll(t, m)
	fs := m.Flows()
	if len(fs) != 2 || fs[0].Name != "analysis" || fs[0].State != Idle || fs[1].Name != "titles" {
		t.Fatalf("flows %+v", fs)
	}
	f := fs[1]
	if f.State != WaitingForQuota || f.WaitingOn != "otpm" || !f.WaitingUntil.Equal(until) || f.Done != 112 || f.Remaining != 1400 {
		t.Errorf("titles %+v", f)
	}
	if f.RatePerHour != 180 || !f.ETA.Equal(b.clock.Now().Add(1400*20*time.Second)) {
		t.Errorf("rate %v/h, ETA %v", f.RatePerHour, f.ETA)
	}
}

func TestMonitorStartStop(t *testing.T) {
	t.Parallel()
	polled := make(chan struct{}, 1)
	src := &fakeSource{JobsFunc: func(context.Context) ([]store.Job, error) {
		select {
		case polled <- struct{}{}:
		default:
		}
		return []store.Job{{Name: "titles", MonitoringSince: time.Now(), Pending: 1}}, nil
	}}
	m, err := New(Config{Source: src, Every: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.Start(context.Background())
	m.Start(context.Background())
	<-polled // Start polls at once
	for i := range 2 {
		if err := m.Stop(context.Background()); err != nil {
			t.Fatalf("stop %d: %v", i+1, err)
		}
	}
	m.Start(context.Background()) // after Stop: nothing
	if m.loop == nil {
		t.Fatal("no loop was started")
	}
	if fs := m.Flows(); len(fs) != 1 || fs[0].State != Progressing {
		t.Errorf("flows %+v", fs)
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	src := newJobTable().source()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "needs a Source"},
		{Config{Source: src, Thresholds: map[string]time.Duration{"titles": -time.Minute}}, `threshold of job "titles" is -1m0s`},
		{Config{Source: src, Webhook: "ftp://example.com"}, "not an http(s) URL"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// A job with a webhook of its own alerts there; the others alert at the
// app's.
func TestAlertAtTheJobsOwnWebhook(t *testing.T) {
	t.Parallel()
	summaries := titles()
	summaries.Name = "summaries"
	b := setup(titles(), summaries)
	app, own := newWebhook(t, 200), newWebhook(t, 200)
	m := b.monitor(t, Config{Threshold: 2 * time.Hour, Webhook: app.srv.URL, Webhooks: map[string]string{"titles": own.srv.URL}})
	poll(t, m)
	b.clock.Add(time.Hour)
	poll(t, m)
	stop(t, m)
	_, atApp := app.result()
	_, atOwn := own.result()
	if len(atOwn) != 1 || atOwn[0].Job != "titles" || len(atApp) != 1 || atApp[0].Job != "summaries" {
		t.Fatalf("the job's own webhook took %+v, the app's %+v; want titles' stall at its own, summaries' at the app's", atOwn, atApp)
	}
	if _, err := New(Config{Source: b.jobs.source(), Webhooks: map[string]string{"titles": "ftp://x"}}); err == nil || !strings.Contains(err.Error(), `"titles"`) {
		t.Errorf("a job's webhook that is not http(s): %v, want it refused naming the job", err)
	}
}
