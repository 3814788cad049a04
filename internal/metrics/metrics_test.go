package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// series is a gathered registry: name → the rendered label set → value
// (a histogram's count).
type series map[string]map[string]float64

func gather(t *testing.T, reg *prometheus.Registry) series {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := series{}
	for _, f := range fams {
		m := map[string]float64{}
		for _, s := range f.GetMetric() {
			var b strings.Builder
			for i, l := range s.GetLabel() { // sorted by name
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, "%s=%s", l.GetName(), l.GetValue())
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				m[b.String()] = s.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				m[b.String()] = s.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				m[b.String()] = float64(s.GetHistogram().GetSampleCount())
			}
		}
		out[f.GetName()] = m
	}
	return out
}

func (s series) want(t *testing.T, name, labels string, v float64) {
	t.Helper()
	got, ok := s[name][labels]
	if !ok {
		t.Errorf("no %s{%s}; have %v", name, labels, s[name])
	} else if got != v {
		t.Errorf("%s{%s} = %v, want %v", name, labels, got, v)
	}
}

func (s series) absent(t *testing.T, name, labels string) {
	t.Helper()
	if v, ok := s[name][labels]; ok {
		t.Errorf("%s{%s} = %v, want absent", name, labels, v)
	}
}

// Two Sets On one registry are one set of series: what either records,
// both serve, and a governor or health source is read once.
func TestOnSharesTheSeries(t *testing.T) {
	t.Parallel()
	a := New()
	b, err := On(a.Registry())
	if err != nil {
		t.Fatal(err)
	}
	a.Flow("k", "f").Admitted(2 * time.Second)
	b.Flow("k", "f").Admitted(time.Second)
	b.Flow("k", "f").Settled(governor.Cost{Input: 5, Output: 7})
	a.Rejection("k", governor.TPM, true, 429)
	b.GatewayRequests("k", "f", 200).Inc()
	b.GatewayRequestsOf("k").WithLabelValues("f", "499").Inc()
	a.PlacesTakenBack("k").Inc()
	a.RunStarted("fn")
	b.RunFinished("fn", run.Completed)
	a.StepAttempt("fn", nil)
	b.StepAttempt("fn", &run.StepError{Class: run.QuotaWait})
	s := gather(t, a.Registry())
	s.want(t, "sluice_flow_admissions_total", "flow=f,key=k", 2)
	s.want(t, "sluice_flow_admission_wait_seconds", "flow=f,key=k", 2)
	s.want(t, "sluice_flow_tokens_total", "flow=f,key=k,kind=input", 5)
	s.want(t, "sluice_flow_tokens_total", "flow=f,key=k,kind=output", 7)
	s.want(t, "sluice_provider_rejections_total", "key=k,limit=tpm,status=429", 1)
	s.want(t, "sluice_gateway_requests_total", "code=200,flow=f,key=k", 1)
	s.want(t, "sluice_gateway_requests_total", "code=499,flow=f,key=k", 1)
	s.want(t, "sluice_gateway_places_taken_back_total", "key=k", 1)
	s.want(t, "sluice_runs_started_total", "function=fn", 1)
	s.want(t, "sluice_runs_finished_total", "function=fn,status=completed", 1)
	s.want(t, "sluice_step_attempts_total", "function=fn,outcome=ok", 1)
	s.want(t, "sluice_step_attempts_total", "function=fn,outcome=quota_wait", 1)

	g1, _ := governor.New(governor.Config{Key: "k1"})
	g2, _ := governor.New(governor.Config{Key: "k1"})
	if err := a.AddGovernor(g1, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.AddGovernor(g1, nil); err != nil {
		t.Errorf("the same governor added again: %v", err)
	}
	if err := b.AddGovernor(g2, nil); err == nil || !strings.Contains(err.Error(), `"k1"`) {
		t.Errorf("a second governor of key k1: %v, want an error naming the key", err)
	}
	flows := func() []health.Flow { return nil }
	if err := a.AddHealth(flows); err != nil {
		t.Fatal(err)
	}
	if err := b.AddHealth(flows); err == nil {
		t.Error("a second health source: no error")
	}
	// The runtime's series, added by both, are there once.
	a.AddRuntime()
	b.AddRuntime()
	if _, ok := gather(t, a.Registry())["go_goroutines"]; !ok {
		t.Error("no go_goroutines after AddRuntime")
	}
}

// A registry holding something else under one of sluice's names is
// refused, with an error rather than a panic.
func TestOnRefusesAForeignSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_flow_admissions_total", Help: "other"}, []string{"flow"}))
	if _, err := On(reg); err == nil {
		t.Fatal("On a registry with another sluice_flow_admissions_total: no error")
	}
}

// A nil Set records nothing, and says so by not panicking.
func TestNilSetRecordsNothing(t *testing.T) {
	t.Parallel()
	var s *Set
	f := s.Flow("k", "f")
	f.Admitted(time.Second)
	f.Settled(governor.Cost{Input: 1})
	s.Rejection("k", governor.RPM, true, 429)
	if !s.Rejected("k", &llm.RateLimitError{Status: 429}) {
		t.Error("a rate-limit error is not a rejection")
	}
	s.RunStarted("fn")
	s.RunFinished("fn", run.Failed)
	s.StepAttempt("fn", nil)
}

// Rejected counts the provider's rejections, by the limit they named, and
// nothing else.
func TestRejected(t *testing.T) {
	t.Parallel()
	s := New()
	for _, err := range []error{
		fmt.Errorf("call: %w", &llm.RateLimitError{Limit: governor.RPM, LimitKnown: true, Status: 429}),
		&llm.RateLimitError{Status: 429},
		&llm.TooLargeError{Limit: governor.OTPM, LimitKnown: true, Status: 413},
	} {
		if !s.Rejected("k", err) {
			t.Errorf("%v: not counted", err)
		}
	}
	for _, err := range []error{errors.New("reset"), &llm.StatusError{Status: 500}, nil} {
		if s.Rejected("k", err) {
			t.Errorf("%v: counted as a rejection", err)
		}
	}
	got := gather(t, s.Registry())
	got.want(t, "sluice_provider_rejections_total", "key=k,limit=rpm,status=429", 1)
	got.want(t, "sluice_provider_rejections_total", "key=k,limit=unknown,status=429", 1)
	got.want(t, "sluice_provider_rejections_total", "key=k,limit=otpm,status=413", 1)
	if n := len(got["sluice_provider_rejections_total"]); n != 3 {
		t.Errorf("%d rejection series, want 3", n)
	}
}

// The governor's series are read at the scrape: limits in force, flows,
// what a waiting call waits on, refusals.
func TestGovernorSeries(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	g, err := governor.New(governor.Config{Key: "groq", Limits: governor.Limits{governor.RPM: 1, governor.TPM: 1000}, Now: clock,
		Flows: []governor.FlowConfig{{Name: "a", Weight: 2}, {Name: "b", Priority: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	if err := s.AddGovernor(g, clock); err != nil {
		t.Fatal(err)
	}
	first, err := g.Reserve(now, "a", governor.Cost{Requests: 1, Input: 100, Output: 50})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Reserve(now, "a", governor.Cost{Requests: 1, Input: 10, Output: 10}); err != nil {
		t.Fatal(err)
	}
	g.Advance(now)
	if !first.Admitted() {
		t.Fatal("the first call is not admitted")
	}
	if _, err := g.Reserve(now, "b", governor.Cost{Requests: 1, Input: 2000}); err == nil {
		t.Fatal("a call over TPM reserved")
	}
	got := gather(t, s.Registry())
	got.want(t, "sluice_limit_capacity", "key=groq,limit=rpm", 1)
	got.want(t, "sluice_limit_capacity", "key=groq,limit=tpm", 1000)
	got.want(t, "sluice_limit_used", "key=groq,limit=rpm", 1)
	got.want(t, "sluice_limit_used", "key=groq,limit=tpm", 150)
	got.want(t, "sluice_limit_remaining", "key=groq,limit=tpm", 850)
	if v := got["sluice_limit_reset_seconds"]["key=groq,limit=rpm"]; v < 60 || v > 61 {
		t.Errorf("RPM resets in %vs, want a minute (and the lag)", v)
	}
	got.absent(t, "sluice_limit_capacity", "key=groq,limit=tpd") // not in force
	got.want(t, "sluice_flow_waiting", "flow=a,key=groq", 1)
	got.want(t, "sluice_flow_waiting", "flow=b,key=groq", 0)
	got.want(t, "sluice_flow_share", "flow=a,key=groq", 2)
	got.want(t, "sluice_flow_share", "flow=b,key=groq", 4)
	got.want(t, "sluice_flow_waiting_on", "flow=a,key=groq,on=rpm", 1)
	if n := len(got["sluice_flow_waiting_on"]); n != 1 {
		t.Errorf("%d waiting-on series, want only a's: b waits for nothing", n)
	}
	got.want(t, "sluice_governor_refusals_total", "flow=b,key=groq,limit=tpm", 1)
	got.want(t, "sluice_governor_refusals_total", "flow=a,key=groq,limit=tpm", 0)
	got.absent(t, "sluice_governor_refusals_total", "flow=a,key=groq,limit=tpd")
}

// The health series: one state of six per backfill, its counts, and its
// last progress only when there was one.
func TestHealthSeries(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_780_000_000, 500_000_000)
	s := New()
	if err := s.AddHealth(func() []health.Flow {
		return []health.Flow{
			{Name: "titles", State: health.Stalled, Done: 10, Remaining: 1412, LastProgressAt: at, ConsecutiveFailures: 3},
			{Name: "fresh", State: health.Idle},
		}
	}); err != nil {
		t.Fatal(err)
	}
	got := gather(t, s.Registry())
	for _, st := range States {
		want := 0.0
		if st == health.Stalled {
			want = 1
		}
		got.want(t, "sluice_flow_state", "flow=titles,state="+string(st), want)
	}
	if len(States) != 6 {
		t.Errorf("%d states, want the six of package health", len(States))
	}
	got.want(t, "sluice_flow_state", "flow=fresh,state=idle", 1)
	got.want(t, "sluice_flow_items_done", "flow=titles", 10)
	got.want(t, "sluice_flow_items_remaining", "flow=titles", 1412)
	got.want(t, "sluice_flow_consecutive_failures", "flow=titles", 3)
	got.want(t, "sluice_flow_last_progress_timestamp_seconds", "flow=titles", 1_780_000_000.5)
	got.absent(t, "sluice_flow_last_progress_timestamp_seconds", "flow=fresh")
}

// The handler serves the text format with every sluice series named so.
func TestHandler(t *testing.T) {
	t.Parallel()
	s := New()
	s.Flow("k", "f").Admitted(0)
	rec := httptest.NewRecorder()
	s.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `sluice_flow_admissions_total{flow="f",key="k"} 1`) {
		t.Fatalf("GET /metrics: %d\n%s", rec.Code, rec.Body)
	}
}

// BenchmarkScrape gathers a large server's series: 4 keys of 50 flows each
// and 200 backfills. What a scrape reads is in memory, so its cost depends
// on these counts only, never on how many runs or items the store holds.
func BenchmarkScrape(b *testing.B) {
	s := New()
	for k := range 4 {
		g, err := governor.New(governor.Config{Key: fmt.Sprint("key", k), Limits: governor.Limits{governor.RPM: 1000, governor.TPM: 1e6, governor.TPD: 1e7}})
		if err != nil {
			b.Fatal(err)
		}
		for f := range 50 {
			name := fmt.Sprint("flow", f)
			if _, err := g.Reserve(time.Now(), name, governor.Cost{Requests: 1, Input: 10}); err != nil {
				b.Fatal(err)
			}
			s.Flow(g.Stats(time.Now()).Key, name).Admitted(time.Millisecond)
		}
		g.Advance(time.Now())
		if err := s.AddGovernor(g, nil); err != nil {
			b.Fatal(err)
		}
	}
	flows := make([]health.Flow, 200)
	for i := range flows {
		flows[i] = health.Flow{Name: fmt.Sprint("backfill", i), State: health.Progressing, Done: 5000, Remaining: 1_000_000, LastProgressAt: time.Now()}
	}
	if err := s.AddHealth(func() []health.Flow { return flows }); err != nil {
		b.Fatal(err)
	}
	h := s.Handler(nil)
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// A key's budgets show in money, not among the limits, and each flow's
// spend beside them.
func TestBudgetSeries(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	g, err := governor.New(governor.Config{Key: "paid", Price: governor.Price{Input: 1, Output: 10}, Now: clock, DayBurst: -1,
		Limits: governor.Budget{Day: 5, Month: 100}.Limits(governor.Limits{governor.TPM: 100_000})})
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	if err := s.AddGovernor(g, clock); err != nil {
		t.Fatal(err)
	}
	r, err := g.Reserve(now, "summary", governor.Cost{Requests: 1, Input: 1000, Output: 2000}) // up to $0.021
	if err != nil {
		t.Fatal(err)
	}
	g.Advance(now)
	r.Settle(now, governor.Cost{Input: 1000, Output: 500}) // $0.006
	got := gather(t, s.Registry())
	got.want(t, "sluice_budget", "key=paid,period=day", 5)
	got.want(t, "sluice_budget", "key=paid,period=month", 100)
	got.want(t, "sluice_budget_spent", "key=paid,period=day", 0.006)
	got.want(t, "sluice_budget_remaining", "key=paid,period=month", 99.994)
	got.want(t, "sluice_flow_spend_total", "flow=summary,key=paid", 0.006)
	got.absent(t, "sluice_limit_capacity", "key=paid,limit=mpd")
	got.want(t, "sluice_limit_capacity", "key=paid,limit=tpm", 100_000)
}

func TestRouteSeries(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	var targets []route.Target
	for _, name := range []string{"free", "paid"} {
		g, err := governor.New(governor.Config{Key: name, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, route.Target{Name: name, Governor: g})
	}
	r, err := route.New(route.Config{Name: "summaries", Targets: targets, Failures: 1, Cooldown: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	if err := s.AddRoute(r, clock); err != nil {
		t.Fatal(err)
	}
	c := func(int) governor.Cost { return governor.Cost{Requests: 1, Input: 10, Output: 10} }
	ch, _ := r.Pick(now, "f", c)
	r.Done(now, ch.Index, route.Failed) // free is out for a minute
	ch, _ = r.Pick(now, "f", c)
	r.Done(now, ch.Index, route.OK)
	got := gather(t, s.Registry())
	got.want(t, "sluice_route_picks_total", "route=summaries,target=free", 1)
	got.want(t, "sluice_route_picks_total", "route=summaries,target=paid", 1)
	got.want(t, "sluice_route_failures_total", "route=summaries,target=free", 1)
	got.want(t, "sluice_route_outs_total", "route=summaries,target=free", 1)
	got.want(t, "sluice_route_target_out", "route=summaries,target=free", 1)
	got.want(t, "sluice_route_target_out", "route=summaries,target=paid", 0)
	other, _ := route.New(route.Config{Name: "summaries", Targets: targets})
	if err := s.AddRoute(other, clock); err == nil {
		t.Fatal("a second router of the same route's name was taken")
	}
}

// A day limit's pace has a series of its own: how long until it lets the
// next call start, which the day's remaining allowance does not show.
func TestPaceWaitSeries(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	g, err := governor.New(governor.Config{Key: "k", Limits: governor.Limits{governor.TPD: 100_000, governor.RPM: 1000}, Now: clock,
		Flows: []governor.FlowConfig{{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	if err := s.AddGovernor(g, clock); err != nil {
		t.Fatal(err)
	}
	got := gather(t, s.Registry())
	got.want(t, "sluice_limit_pace_wait_seconds", "key=k,limit=tpd", 0)
	got.absent(t, "sluice_limit_pace_wait_seconds", "key=k,limit=rpm") // a minute window is not paced
	// The first call goes at once; the second, before the provider has
	// answered the first, waits for the day's even pace.
	for range 2 {
		if _, err := g.Reserve(now, "a", governor.Cost{Requests: 1, Input: 2000}); err != nil {
			t.Fatal(err)
		}
	}
	g.Advance(now)
	st := g.Stats(now)
	on := st.Flows[0].WaitingOn
	if on.Kind != "pacing" || on.Limit != governor.TPD || !on.Until.After(now) {
		t.Fatalf("the second call waits on %+v, want the TPD pace", on)
	}
	got = gather(t, s.Registry())
	got.want(t, "sluice_limit_pace_wait_seconds", "key=k,limit=tpd", on.Until.Sub(now).Seconds())
	if rem := got["sluice_limit_remaining"]["key=k,limit=tpd"]; rem < 90_000 {
		t.Fatalf("tpd remaining %v: the day's allowance should be nearly whole while the pace holds the call", rem)
	}
	now = on.Until
	got = gather(t, s.Registry())
	got.want(t, "sluice_limit_pace_wait_seconds", "key=k,limit=tpd", 0)
}
