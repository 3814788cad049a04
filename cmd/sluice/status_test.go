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
		for _, w := range []string{"summaries", "progressing", "[###############.....]  75% 300/400", "96.0"} {
			if !strings.Contains(lines[1], w) {
				t.Errorf("summaries line %q does not say %q", lines[1], w)
			}
		}
		for _, w := range []string{"titles", "stalled", " 62% 888/1,412", "error: Request too large: otpm; waiting on otpm until 08:15:00Z"} {
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
	err := renderStatus(&b, []health.Flow{
		{Name: "analysis", State: health.Idle},
		{Name: "summaries", State: health.WaitingForQuota, Done: 1, Remaining: 3, RatePerHour: 2.25, ETA: now.Add(90 * time.Minute),
			LastProgressAt: now.Add(-45 * time.Second), WaitingOn: "tpm", WaitingUntil: now.Add(40 * time.Second)},
		{Name: "titles", State: health.Stalled, Done: 888, Remaining: 524, LastProgressAt: now.Add(-(2*time.Hour + 31*time.Minute)),
			ConsecutiveFailures: 8, LastError: "line one\nline two " + strings.Repeat("x", 100), InFlight: 4, InFlightTarget: 50, LimitedBy: "in_flight"},
		{Name: "old", State: health.Done, Done: 10, LastProgressAt: now.Add(-50 * time.Hour)},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"analysis   idle               -                                      -       -         never          -         -\n",
		"summaries  waiting-for-quota  [#####...............]  25% 1/4        2.2     in 1h30m  45s ago        -         -               waiting on tpm until 08:01:40Z (in 40s)\n",
		"titles     stalled            [############........]  62% 888/1,412  -       -         2h31m ago      8         4/50 in_flight  error: line one line two xxx",
		"old        done               [####################] 100% 10/10      -       -         2d02h ago      -         -\n",
	}
	for _, w := range want {
		if !strings.Contains(b.String(), w) {
			t.Errorf("the table does not have\n%s\nin\n%s", w, b.String())
		}
	}
	if !strings.Contains(b.String(), "x…") || strings.Count(b.String(), "x") > 100 {
		t.Errorf("a long error is not cut:\n%s", b.String())
	}
	b.Reset()
	if err := renderStatus(&b, nil, now); err != nil || b.String() != "no flows\n" {
		t.Errorf("no flows: %q, %v", b.String(), err)
	}
}
