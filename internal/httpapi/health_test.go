package httpapi_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpapi"
)

// fakeHealth is a Health whose methods call its Func fields.
type fakeHealth struct {
	FlowsFunc func() []health.Flow
	ReadyFunc func() error
}

var _ httpapi.Health = (*fakeHealth)(nil)

func (f *fakeHealth) Flows() []health.Flow { return f.FlowsFunc() }
func (f *fakeHealth) Ready() error         { return f.ReadyFunc() }

const healthToken = "token-0123456789abcdef"

func healthServer(t *testing.T, h httpapi.Health) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Token: healthToken, Health: h}))
	t.Cleanup(srv.Close)
	return srv
}

type readyBody struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
	Jobs   []struct {
		Name, State, Reason string
	} `json:"jobs"`
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	stalled := health.View{Flow: health.Flow{Name: "titles", State: health.Stalled},
		Reason: "no item processed for 3h0m0s (since 2026-10-19T05:30:00Z); 524 eligible remain"}
	for _, c := range []struct {
		name       string
		health     httpapi.Health
		wantStatus int
		want       readyBody
	}{
		{name: "without jobs, ready", wantStatus: 200, want: readyBody{Status: "ready"}},
		{name: "no job stalled, ready", health: &fakeHealth{ReadyFunc: func() error { return nil }},
			wantStatus: 200, want: readyBody{Status: "ready"}},
		{name: "a job stalled names the job, its state and why", health: &fakeHealth{ReadyFunc: func() error {
			return &health.NotReadyError{Stalled: []health.View{stalled}}
		}}, wantStatus: 503, want: readyBody{Status: "unready", Reason: "job titles is stalled: " + stalled.Reason}},
		{name: "a store that cannot be read, without its words", health: &fakeHealth{ReadyFunc: func() error {
			return &health.NotReadyError{Err: errors.New(`pq: relation "sluice_jobs" does not exist`)}
		}}, wantStatus: 503, want: readyBody{Status: "unready", Reason: "the jobs' records cannot be read (the server's log says why)"}},
		{name: "another error says itself", health: &fakeHealth{ReadyFunc: func() error { return errors.New("not yet judged") }},
			wantStatus: 503, want: readyBody{Status: "unready", Reason: "not yet judged"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := healthServer(t, c.health)
			var got readyBody
			if status := do(t, srv, "GET", "/readyz", "", "", &got); status != c.wantStatus {
				t.Errorf("status %d, want %d", status, c.wantStatus)
			}
			if got.Status != c.want.Status || got.Reason != c.want.Reason {
				t.Errorf("body %+v, want %+v", got, c.want)
			}
			if c.wantStatus == 503 && strings.Contains(got.Reason, "stalled") &&
				(len(got.Jobs) != 1 || got.Jobs[0].Name != "titles" || got.Jobs[0].State != "stalled" || got.Jobs[0].Reason != stalled.Reason) {
				t.Errorf("jobs %+v, want titles stalled with its reason", got.Jobs)
			}
			// Liveness does not depend on the jobs.
			if status := do(t, srv, "GET", "/healthz", "", "", nil); status != http.StatusOK {
				t.Errorf("/healthz %d", status)
			}
		})
	}
}

func TestFlows(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 10, 19, 5, 30, 0, 0, time.UTC)
	h := &fakeHealth{FlowsFunc: func() []health.Flow {
		return []health.Flow{{Name: "titles", State: health.Stalled, Done: 888, Remaining: 524, LastProgressAt: at,
			ConsecutiveFailures: 8, LastError: "otpm: request too large", WaitingOn: "otpm", WaitingUntil: at.Add(15 * time.Minute)}}
	}}
	t.Run("the monitor's flows", func(t *testing.T) {
		t.Parallel()
		srv := healthServer(t, h)
		if status := do(t, srv, "GET", "/v1/flows", "", "", nil); status != http.StatusUnauthorized {
			t.Errorf("without the token: %d", status)
		}
		var got struct{ Flows []health.Flow }
		if status := do(t, srv, "GET", "/v1/flows", healthToken, "", &got); status != 200 {
			t.Fatalf("status %d", status)
		}
		if want := h.Flows(); len(got.Flows) != 1 || got.Flows[0] != want[0] {
			t.Errorf("flows %+v, want %+v", got.Flows, want)
		}
	})
	t.Run("none without jobs", func(t *testing.T) {
		t.Parallel()
		srv := healthServer(t, nil)
		var got map[string]json.RawMessage
		if status := do(t, srv, "GET", "/v1/flows", healthToken, "", &got); status != 200 || string(got["flows"]) != "[]" {
			t.Errorf("status %d, body %v; want an empty list", status, got)
		}
	})
	// The flows' times are on the app's clock: the answer says its time
	// and speed, by which a client reads them (sluice status).
	t.Run("the app's clock", func(t *testing.T) {
		t.Parallel()
		app := at.Add(50 * time.Hour)
		for _, tc := range []struct {
			name  string
			cfg   httpapi.Config
			now   time.Time
			speed float64
		}{
			{"compressed", httpapi.Config{Health: h, Now: func() time.Time { return app }, Speed: 720}, app, 720},
			{"the wall clock", httpapi.Config{Health: h}, time.Time{}, 1},
		} {
			srv := httptest.NewServer(httpapi.New(tc.cfg))
			t.Cleanup(srv.Close)
			before := time.Now()
			var got struct {
				Flows []health.Flow
				Now   time.Time
				Speed float64
			}
			if status := do(t, srv, "GET", "/v1/flows", "", "", &got); status != 200 || len(got.Flows) != 1 {
				t.Fatalf("%s: status %d, %+v", tc.name, status, got)
			}
			lo, hi := tc.now, tc.now
			if tc.now.IsZero() { // the wall clock, read during the request
				lo, hi = before, time.Now()
			}
			if got.Now.Before(lo) || got.Now.After(hi) || got.Speed != tc.speed {
				t.Errorf("%s: now %s at speed %v, want from %s to %s at %v", tc.name, got.Now, got.Speed, lo, hi, tc.speed)
			}
		}
	})
}
