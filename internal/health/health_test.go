package health

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

var t0 = time.Date(2026, 10, 19, 8, 0, 0, 0, time.UTC)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	const th = 2 * time.Hour
	began := t0.Add(-24 * time.Hour)
	tpm := Quota{Waiting: true, Limit: "tpm", Until: t0.Add(40 * time.Second)}
	for _, c := range []struct {
		name string
		job  store.Job
		q    Quota
		want State
		// words the reason must carry
		reason []string
	}{
		{
			// The false alarm an age-based monitor raised: the oldest
			// pending item is a year old, but the job processed one 5
			// minutes ago.
			name:   "a year-old pending item does not stall a job that progressed 5 minutes ago",
			job:    store.Job{MonitoringSince: t0.AddDate(-1, 0, 0), LastProgressAt: t0.Add(-5 * time.Minute), Pending: 1412, Saved: 3},
			want:   Progressing,
			reason: []string{"5m0s ago", "1412 eligible"},
		},
		{
			name:   "a job that never progressed is progressing within the threshold since monitoring began",
			job:    store.Job{MonitoringSince: t0.Add(-th + time.Second), Pending: 10},
			want:   Progressing,
			reason: []string{"no item processed yet", "within the 2h0m0s threshold"},
		},
		{
			name:   "a job that never progressed is stalled once the threshold since monitoring began has passed",
			job:    store.Job{MonitoringSince: t0.Add(-th), Pending: 10},
			want:   Stalled,
			reason: []string{"since monitoring began 2h0m0s ago", "10 eligible remain"},
		},
		{
			name: "nothing processed for the threshold since the last progress is stalled",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-th - 30*time.Minute), Pending: 524, Saved: 888},
			want: Stalled, reason: []string{"for 2h30m0s", "since 2026-10-19T05:30:00Z", "524 eligible"},
		},
		{
			name: "just under the threshold is still progressing",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-th + time.Millisecond), Pending: 1},
			want: Progressing,
		},
		{
			name: "rejected items waiting to be retried are eligible",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-3 * time.Hour), Rejected: 2, Saved: 5},
			want: Stalled, reason: []string{"2 eligible"},
		},
		{
			name: "waiting for quota within the threshold",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-time.Hour), Pending: 5},
			q:    tpm, want: WaitingForQuota, reason: []string{"waiting on tpm until 2026-10-19T08:00:40Z"},
		},
		{
			name: "waiting for quota longer than the threshold is stalled and names the limit",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-3 * time.Hour), Pending: 5},
			q:    tpm, want: Stalled, reason: []string{"for 3h0m0s", "waiting on tpm"},
		},
		{
			name: "failing within the threshold",
			job: store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-10 * time.Minute), Pending: 5,
				LastStatus: "failed", ConsecutiveFailures: 3, LastError: "otpm: request too large"},
			want: Failing, reason: []string{"3 consecutive failed runs", "otpm: request too large"},
		},
		{
			name: "failing wins over waiting for quota",
			job: store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-10 * time.Minute), Pending: 5,
				LastStatus: "failed", ConsecutiveFailures: 1, LastError: "boom"},
			q: tpm, want: Failing,
		},
		{
			name: "failing past the threshold is stalled with its last error",
			job: store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-5 * time.Hour), Pending: 1412,
				LastStatus: "failed", ConsecutiveFailures: 17, LastError: "rate_limit_backoff"},
			want: Stalled, reason: []string{"17 consecutive failed runs", "rate_limit_backoff"},
		},
		{
			name: "a failing job with nothing eligible is failing, not done",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-5 * time.Hour), Saved: 9, ConsecutiveFailures: 1},
			want: Failing,
		},
		{
			name: "a job with nothing eligible waits for quota while calls of its flow wait",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-5 * time.Hour), Saved: 9},
			q:    tpm, want: WaitingForQuota,
		},
		{
			name: "nothing eligible and everything processed is done, however long ago",
			job:  store.Job{MonitoringSince: began, LastProgressAt: t0.Add(-20 * time.Hour), Saved: 9, Parked: 1},
			want: Done, reason: []string{"all 10 items processed"},
		},
		{
			name: "no items at all is idle, however long ago monitoring began",
			job:  store.Job{MonitoringSince: began},
			want: Idle,
		},
		{
			name: "a record without times cannot be judged stalled",
			job:  store.Job{Pending: 3},
			want: Progressing,
		},
		{
			name: "negative counts from a broken record count as none",
			job:  store.Job{MonitoringSince: began, Pending: -4, Saved: -1},
			want: Idle,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.job.Name = "titles"
			v := Evaluate(c.job, th, c.q, nil, t0)
			if v.State != c.want {
				t.Fatalf("state %s (%s), want %s", v.State, v.Reason, c.want)
			}
			for _, w := range c.reason {
				if !strings.Contains(v.Reason, w) {
					t.Errorf("reason %q does not say %q", v.Reason, w)
				}
			}
			if v.Name != "titles" {
				t.Errorf("name %q", v.Name)
			}
			if c.q.Waiting && (v.WaitingOn != c.q.Limit || !v.WaitingUntil.Equal(c.q.Until)) {
				t.Errorf("waiting on %q until %v, want %q until %v", v.WaitingOn, v.WaitingUntil, c.q.Limit, c.q.Until)
			}
			if c.job.ConsecutiveFailures > 0 && (v.ConsecutiveFailures != c.job.ConsecutiveFailures || v.LastError != c.job.LastError) {
				t.Errorf("failures %d %q, want %d %q", v.ConsecutiveFailures, v.LastError, c.job.ConsecutiveFailures, c.job.LastError)
			}
		})
	}
}

func TestEvaluateSinceAndFigures(t *testing.T) {
	t.Parallel()
	last := t0.Add(-3 * time.Hour)
	job := store.Job{Name: "titles", MonitoringSince: t0.Add(-time.Hour * 48), LastProgressAt: last, Pending: 10, Rejected: 2, Saved: 30, Parked: 1}
	v := Evaluate(job, 0, Quota{}, nil, t0)
	if v.State != Stalled || !v.Since.Equal(last.Add(DefaultThreshold)) {
		t.Errorf("a zero threshold is the default: %s since %v", v.State, v.Since)
	}
	if v.Done != 31 || v.Remaining != 12 || !v.LastProgressAt.Equal(last) || v.RatePerHour != 0 || !v.ETA.IsZero() {
		t.Errorf("figures %+v", v.Flow)
	}
	job.LastProgressAt = t0.Add(-time.Minute)
	if v := Evaluate(job, time.Hour, Quota{}, nil, t0); v.State != Progressing || !v.Since.Equal(job.LastProgressAt) {
		t.Errorf("progressing since %v, want the last progress", v.Since)
	}
}

func TestEvaluateRateAndETA(t *testing.T) {
	t.Parallel()
	s := NewSampler(time.Hour, time.Minute)
	// 120 items an hour: 2 a minute.
	for i := range 31 {
		s.Add(t0.Add(time.Duration(i-30)*time.Minute), int64(100+2*i))
	}
	job := store.Job{Name: "titles", MonitoringSince: t0.Add(-time.Hour), LastProgressAt: t0, Pending: 240, Saved: 160}
	v := Evaluate(job, time.Hour, Quota{}, s, t0)
	if v.RatePerHour != 120 || !v.ETA.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("rate %v/h, ETA %v; want 120/h, %v", v.RatePerHour, v.ETA, t0.Add(2*time.Hour))
	}
	job.Pending = 0
	if v := Evaluate(job, time.Hour, Quota{}, s, t0); !v.ETA.IsZero() {
		t.Errorf("ETA %v with nothing remaining", v.ETA)
	}
	if v := Evaluate(job, time.Hour, Quota{}, NewSampler(0, 0), t0); v.RatePerHour != 0 || !v.ETA.IsZero() {
		t.Errorf("no samples: rate %v, ETA %v", v.RatePerHour, v.ETA)
	}
	job.Pending = 1 << 62
	if v := Evaluate(job, time.Hour, Quota{}, s, t0); !v.ETA.IsZero() {
		t.Errorf("ETA %v centuries ahead, want none", v.ETA)
	}
}

func TestSampler(t *testing.T) {
	t.Parallel()
	t.Run("the rate is measured over the window only", func(t *testing.T) {
		t.Parallel()
		s := NewSampler(time.Hour, 10*time.Minute)
		s.Add(t0.Add(-3*time.Hour), 0) // fast long ago
		s.Add(t0.Add(-2*time.Hour), 1000)
		for i := range 7 {
			s.Add(t0.Add(time.Duration(i-6)*10*time.Minute), 1000+int64(i)*10)
		}
		if r := s.PerHour(); r != 60 {
			t.Errorf("rate %v/h, want 60", r)
		}
	})
	t.Run("the ring is bounded and keeps the newest", func(t *testing.T) {
		t.Parallel()
		s := NewSampler(time.Hour, time.Minute)
		for i := range 1000 {
			s.Add(t0.Add(time.Duration(i)*time.Minute), int64(i))
		}
		if len(s.ring) != 62 || s.n != 62 {
			t.Errorf("ring of %d with %d samples, want 62", len(s.ring), s.n)
		}
		if r := s.PerHour(); r != 60 {
			t.Errorf("rate %v/h, want 60", r)
		}
		if big := NewSampler(24*time.Hour, time.Second); len(big.ring) != maxSamples {
			t.Errorf("a day of seconds keeps %d samples, want %d", len(big.ring), maxSamples)
		}
	})
	t.Run("samples closer than the interval replace the newest", func(t *testing.T) {
		t.Parallel()
		s := NewSampler(time.Hour, time.Minute)
		for i := range 600 { // every second for 10 minutes
			s.Add(t0.Add(time.Duration(i)*time.Second), int64(i))
		}
		if s.n > 12 {
			t.Errorf("%d samples for 10 minutes at a minute's interval", s.n)
		}
		if r := s.PerHour(); r != 3600 {
			t.Errorf("rate %v/h, want 3600", r)
		}
	})
	t.Run("a count that goes down starts over", func(t *testing.T) {
		t.Parallel()
		s := NewSampler(time.Hour, time.Minute)
		s.Add(t0, 500)
		s.Add(t0.Add(time.Minute), 10)
		if r := s.PerHour(); r != 0 || s.n != 1 {
			t.Errorf("after a reset: rate %v with %d samples", r, s.n)
		}
	})
}

// The JSON schema: names, RFC 3339 UTC times, and what is left out.
func TestFlowJSON(t *testing.T) {
	t.Parallel()
	local := time.FixedZone("JST", 9*3600)
	f := Evaluate(store.Job{Name: "titles", MonitoringSince: t0.Add(-time.Hour), LastProgressAt: t0.Add(-time.Minute).In(local), Pending: 3, Saved: 2},
		time.Hour, Quota{}, nil, t0).Flow
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"titles","state":"progressing","done":2,"remaining":3,"last_progress_at":"2026-10-19T07:59:00Z"}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	full := Flow{Name: "summaries", State: Stalled, Done: 1, Remaining: 2, RatePerHour: 1.5, ETA: t0, LastProgressAt: t0,
		ConsecutiveFailures: 2, LastError: "x", WaitingOn: "tpm", WaitingUntil: t0}
	b, _ = json.Marshal(full)
	for _, k := range []string{"name", "state", "done", "remaining", "rate_per_hour", "eta", "last_progress_at", "consecutive_failures", "last_error", "waiting_on", "waiting_until"} {
		if !strings.Contains(string(b), `"`+k+`":`) {
			t.Errorf("no %q in %s", k, b)
		}
	}
}

func TestQuotaOf(t *testing.T) {
	t.Parallel()
	g, err := governor.New(governor.Config{Limits: governor.Limits{governor.TPM: 1000}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	reserve := func(at time.Time, flow string, input int64) {
		t.Helper()
		if _, err := g.Reserve(at, flow, governor.Cost{Requests: 1, Input: input}); err != nil {
			t.Fatal(err)
		}
		g.Advance(at)
	}
	reserve(t0, "summaries", 900)
	now := t0.Add(time.Second)
	reserve(now, "titles", 500)
	if q := QuotaOf(g, "titles", now); !q.Waiting || q.Limit != "tpm" || !q.Until.Equal(t0.Add(time.Minute)) {
		t.Errorf("titles waits on %+v, want tpm until a minute after the first call", q)
	}
	for _, flow := range []string{"summaries", "unknown"} {
		if q := QuotaOf(g, flow, now); q != (Quota{}) {
			t.Errorf("%s waits on %+v, want nothing", flow, q)
		}
	}
}

// A backfill's calls in flight show in its Flow; one that progresses while
// its InFlight setting holds it under what the quota would admit says so.
func TestWithInFlight(t *testing.T) {
	t.Parallel()
	job := store.Job{Name: "titles", MonitoringSince: t0.Add(-time.Hour), LastProgressAt: t0.Add(-time.Minute), Pending: 2000, Saved: 400}
	v := Evaluate(job, 0, Quota{}, nil, t0).WithInFlight(InFlight{Calls: 4, Target: 62, LimitedBy: "in_flight"})
	if v.InFlight != 4 || v.InFlightTarget != 62 || v.LimitedBy != "in_flight" || !strings.Contains(v.Reason, "holds it to 4 calls at once, where the quota would admit about 62") {
		t.Fatalf("%+v: want 4 in flight of a target of 62, limited by in_flight, and the reason saying so", v)
	}
	b, err := json.Marshal(v.Flow)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"in_flight":4`, `"in_flight_target":62`, `"limited_by":"in_flight"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: want %s", b, want)
		}
	}
	q := Evaluate(job, 0, Quota{}, nil, t0)
	if w := q.WithInFlight(InFlight{Calls: 55, Target: 62, LimitedBy: "quota"}); w.Reason != q.Reason {
		t.Errorf("a job held by its quota: reason %q, want it unchanged %q", w.Reason, q.Reason)
	}
	if w := q.WithInFlight(InFlight{}); w.LimitedBy != "" || w.InFlightTarget != 0 {
		t.Errorf("no figures: %+v, want the fields left out", w.Flow)
	}
}
