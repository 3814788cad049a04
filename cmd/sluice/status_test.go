package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/internal/testenv"
)

const statusToken = "status-token-0123456789"

// flowsServer answers GET /v1/flows with body to requests that carry
// statusToken, and 401 in the API's words to the others. Each answer is
// signalled on served. It has no GET /v1/versions, as a server older than
// that route: status must do without it.
func flowsServer(t *testing.T, body string) (srv *httptest.Server, served chan struct{}) {
	t.Helper()
	served = make(chan struct{}, 100)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/versions" {
			http.NotFound(w, r)
			return
		}
		defer func() { served <- struct{}{} }()
		if r.Method != http.MethodGet || r.URL.Path != "/v1/flows" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+statusToken {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"missing or wrong bearer token"}` + "\n"))
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, served
}

func runStatusCLI(ctx context.Context, env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut testenv.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }}
	code = runMain(ctx, e, append([]string{"status"}, args...))
	return code, out.String(), errOut.String()
}

const statusBody = `{"flows":[` +
	`{"name":"summaries","state":"progressing","done":300,"remaining":100,"rate_per_hour":96,"eta":"2099-01-01T00:00:00Z","last_progress_at":"2026-10-19T07:55:00Z"},` +
	`{"name":"titles","state":"stalled","done":888,"remaining":524,"last_progress_at":"2026-10-19T05:30:00Z","consecutive_failures":8,` +
	`"last_error":"Request too large: otpm","waiting_on":"otpm","waiting_until":"2026-10-19T08:15:00Z"}]}` + "\n"

func TestStatus(t *testing.T) {
	t.Parallel()
	srv, _ := flowsServer(t, statusBody)
	t.Run("a table", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runStatusCLI(context.Background(), map[string]string{"SLUICE_API_TOKEN": statusToken}, "--url", srv.URL)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") {
			t.Fatalf("output:\n%s", out)
		}
		for _, w := range []string{"summaries", "progressing", "[###############.....] 300 / 400 (75%)", "96.0", "1h 3m"} {
			if !strings.Contains(lines[1], w) {
				t.Errorf("summaries line %q does not say %q", lines[1], w)
			}
		}
		for _, w := range []string{"titles", "stalled", "888 / 1,412 (63%)", "error: Request too large: otpm; waiting on otpm until 08:15:00Z"} {
			if !strings.Contains(lines[2], w) {
				t.Errorf("titles line %q does not say %q", lines[2], w)
			}
		}
	})
	t.Run("the raw answer with --json and --token", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runStatusCLI(context.Background(), nil, "--url", srv.URL+"/", "--token", statusToken, "--json")
		if code != 0 || out != statusBody {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("the server's refusal", func(t *testing.T) {
		t.Parallel()
		code, _, errOut := runStatusCLI(context.Background(), map[string]string{"OTHER": statusToken}, "--url", srv.URL, "--token-env", "NOPE")
		if code != 1 || !strings.Contains(errOut, "missing or wrong bearer token (HTTP 401)") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("a bad interval", func(t *testing.T) {
		t.Parallel()
		if code, _, errOut := runStatusCLI(context.Background(), nil, "--interval", "0s"); code != 1 || !strings.Contains(errOut, "--interval 0s") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}

// --watch redraws until interrupted, and exits 0 when it is.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	srv, served := flowsServer(t, statusBody)
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result)
	go func() {
		code, out, errOut := runStatusCLI(ctx, map[string]string{"SLUICE_API_TOKEN": statusToken}, "--url", srv.URL, "--watch", "--interval", "10ms")
		done <- result{code, out, errOut}
	}()
	// The fourth request is sent once the third answer is drawn.
	for range 4 {
		<-served
	}
	cancel()
	r := <-done
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.err)
	}
	if n := strings.Count(r.out, "\x1b[H\x1b[2J"); n < 3 {
		t.Errorf("%d redraws, want at least 3", n)
	}
	if n := strings.Count(r.out, "NAME"); n < 3 {
		t.Errorf("%d tables, want at least 3:\n%s", n, r.out)
	}
}

func TestRenderStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 8, 1, 0, 0, time.UTC)
	var b strings.Builder
	err := progress.WriteStatus(&b, []health.Flow{
		{Name: "analysis", State: health.Idle},
		{Name: "summaries", State: health.WaitingForQuota, Done: 1, Remaining: 3, RatePerHour: 2.25, ETA: now.Add(90 * time.Minute),
			LastProgressAt: now.Add(-45 * time.Second), WaitingOn: "tpm", WaitingUntil: now.Add(40 * time.Second)},
		{Name: "titles", State: health.Stalled, Done: 888, Remaining: 524, LastProgressAt: now.Add(-(2*time.Hour + 31*time.Minute)),
			ConsecutiveFailures: 8, LastError: "line one\nline two " + strings.Repeat("x", 100), InFlight: 4, InFlightTarget: 50, LimitedBy: "in_flight"},
		{Name: "old", State: health.Done, Done: 10, LastProgressAt: now.Add(-50 * time.Hour)},
	}, progress.Clock{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// Progress, rate and time left are progress.Of's: 3 left at 2.25 an
	// hour is 1h 20m, whatever ETA the answer carries.
	want := []string{
		"analysis   idle               -                                         -       -          never          -         -\n",
		"summaries  waiting-for-quota  [#####...............] 1 / 4 (25%)        2.3     1h 20m     45 s ago       -         -               waiting on tpm until 08:01:40Z (in 40 s)\n",
		"titles     stalled            [############........] 888 / 1,412 (63%)  -       -          2h 31m ago     8         4/50 in_flight  error: line one line two xxx",
		"old        done               [####################] 10 / 10 (100%)     -       -          2d 2h ago      -         -\n",
	}
	for _, w := range want {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the table does not have\n%s\nin\n%s", w, b.String())
		}
	}
	if !strings.Contains(b.String(), "x…") || strings.Count(b.String(), "x") > 100 {
		t.Errorf("a long error is not cut:\n%s", b.String())
	}
	if strings.Contains(b.String(), "server's clock") {
		t.Errorf("a server on the wall clock is labelled:\n%s", b.String())
	}
	b.Reset()
	if err := progress.WriteStatus(&b, nil, progress.Clock{Now: now}); err != nil || b.String() != "no flows\n" {
		t.Errorf("no flows: %q, %v", b.String(), err)
	}
}

// A server whose app runs ahead of this machine's clock, and does not say
// its own (an older one), is labelled so, and its times are written as
// they are rather than against this machine's; one that says its clock is
// read on it, named by its speed.
func TestStatusOfASimulatedClock(t *testing.T) {
	t.Parallel()
	wall := time.Date(2026, 12, 6, 16, 50, 0, 0, time.UTC)
	flows := []health.Flow{{Name: "summary", State: health.Progressing, Done: 20, Remaining: 568, RatePerHour: 4,
		LastProgressAt: wall.Add(36 * time.Hour), WaitingOn: "tpd pacing", WaitingUntil: wall.Add(37 * time.Hour)}}
	c := progress.ServerClock(httpjson.Clock{}, flows, wall)
	if !c.Now.IsZero() || c.Label == "" {
		t.Fatalf("serverClock = %+v, want no now and a label", c)
	}
	var b strings.Builder
	if err := progress.WriteStatus(&b, flows, c); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Times in UTC on the server's clock (simulated time, ahead of this machine's clock).",
		"20 / 588 (3.4%)", "4.0", "5d 22h", "2026-12-08 04:50:00Z", "waiting on tpd pacing until 05:50:00Z"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("no %q in\n%s", w, b.String())
		}
	}
	if strings.Contains(b.String(), " ago") || strings.Contains(b.String(), "(in ") {
		t.Errorf("times relative to this machine's clock:\n%s", b.String())
	}
	if c := progress.ServerClock(httpjson.Clock{Now: wall.Add(36 * time.Hour), Speed: 1}, flows, wall); !c.Now.Equal(wall.Add(36*time.Hour)) || c.Label != "simulated time, 36h 0m ahead of the wall clock" {
		t.Errorf("a server that says its time: %+v", c)
	}
	if c := progress.ServerClock(httpjson.Clock{Now: wall.Add(36 * time.Hour), Speed: 720}, flows, wall); c.Label != "simulated time, ×720" {
		t.Errorf("a server that says its speed: %+v", c)
	}
}
