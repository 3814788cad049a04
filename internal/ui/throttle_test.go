package ui_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

// apiEngine is the API's engine as far as GET /v1/runs goes.
type apiEngine struct{ httpapi.Engine }

func (apiEngine) Runs(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, nil }

// TestThrottleSharedWithAPI: with one throttle, as sluice serve builds
// them, an address throttled by the dashboard's sign-in is throttled on
// /v1, one throttled on /v1 is throttled on the sign-in, the pages and the
// sign-in page, and wrong tokens at either door add up.
func TestThrottleSharedWithAPI(t *testing.T) {
	t.Parallel()
	clk := &clock{t: now}
	var log logBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	th := authlimit.New(authlimit.Config{Logger: logger, Now: clk.Now, AfterFunc: func(time.Duration, func()) {}})
	dash := newUI(t, ui.Config{Token: token, Now: clk.Now, Logger: logger, Throttle: th,
		Engine: &fakeEngine{RunsFunc: func(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, nil }}}, nil)
	mux := http.NewServeMux()
	mux.Handle("/v1/", httpapi.New(httpapi.Config{Engine: apiEngine{}, Token: token, Throttle: th, Logger: logger}))
	mux.Handle("/", dash)

	signIn := func(remote, tok string) *http.Response {
		t.Helper()
		res, _ := do(t, mux, req{method: "POST", path: "/login", remote: remote, form: url.Values{"token": {tok}, "next": {"/runs"}}})
		return res
	}
	bearer := func(remote, path, tok string) (*http.Response, string) {
		t.Helper()
		return do(t, mux, req{path: path, remote: remote, header: map[string]string{"Authorization": "Bearer " + tok}})
	}

	t.Run("dashboard then API", func(t *testing.T) {
		const attacker, friend = "203.0.113.9:40000", "198.51.100.2:50000"
		for i := range 10 {
			if res := signIn(attacker, fmt.Sprintf("guess-%d", i)); res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("wrong sign-in %d: %d, want 401", i+1, res.StatusCode)
			}
		}
		if res := signIn(attacker, token); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("the dashboard did not throttle: %d", res.StatusCode)
		}
		res, body := bearer(attacker, "/v1/runs", token)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "60" ||
			!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || !strings.Contains(body, `"error":"too many wrong tokens`) {
			t.Errorf("/v1 with the right token from the address the dashboard throttled: %d, Retry-After %q, %s; want 429, 60, a JSON error",
				res.StatusCode, res.Header.Get("Retry-After"), body)
		}
		if res, _ := bearer(attacker, "/v1/runs", "another-guess"); res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("/v1 with a wrong token from the throttled address: %d, want 429", res.StatusCode)
		}
		if res, _ := bearer(friend, "/v1/runs", token); res.StatusCode != http.StatusOK {
			t.Errorf("/v1 with the right token from another address: %d, want 200", res.StatusCode)
		}
	})

	t.Run("API then dashboard", func(t *testing.T) {
		const attacker = "203.0.113.10:40000"
		for i := range 10 {
			if res, _ := bearer(attacker, "/v1/runs", fmt.Sprintf("guess-%d", i)); res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("wrong bearer token %d on /v1: %d, want 401", i+1, res.StatusCode)
			}
		}
		if res := signIn(attacker, token); res.StatusCode != http.StatusTooManyRequests || len(res.Cookies()) != 0 || res.Header.Get("Retry-After") != "60" {
			t.Errorf("sign-in with the right token from the address /v1 throttled: %d, cookies %v, Retry-After %q; want 429, none, 60",
				res.StatusCode, res.Cookies(), res.Header.Get("Retry-After"))
		}
		if res, _ := bearer(attacker, "/runs", token); res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a page with the right bearer token from the throttled address: %d, want 429", res.StatusCode)
		}
		if res, _ := bearer(attacker, "/login", token); res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("the sign-in page with the right bearer token from the throttled address: %d, want 429", res.StatusCode)
		}
	})

	t.Run("both doors add up", func(t *testing.T) {
		const attacker = "203.0.113.11:40000"
		for i := range 5 {
			signIn(attacker, fmt.Sprintf("form-guess-%d", i))
			bearer(attacker, "/v1/runs", fmt.Sprintf("bearer-guess-%d", i))
		}
		if res, _ := bearer(attacker, "/v1/runs", token); res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("after 5 wrong tokens at each door: %d, want 429", res.StatusCode)
		}
	})

	// One line per address, whichever door it tried.
	var got []string
	for l := range strings.Lines(log.String()) {
		if strings.Contains(l, "requests with a wrong token") {
			got = append(got, l)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d log lines for three addresses within a minute, want 3:\n%s", len(got), strings.Join(got, ""))
	}
}

// TestLoginPageBearerThrottled: the sign-in page, which sends a request
// signed in with a bearer token on to where it asked, counts a wrong
// bearer token as every page does: it is no way to test guesses unseen.
func TestLoginPageBearerThrottled(t *testing.T) {
	t.Parallel()
	clk := &clock{t: now}
	h := newUI(t, ui.Config{Token: token, Now: clk.Now}, nil)
	const attacker = "203.0.113.9:40000"
	for i := range 10 {
		res, _ := do(t, h, req{path: "/login?next=/runs", remote: attacker, header: map[string]string{"Authorization": fmt.Sprintf("Bearer guess-%d", i)}})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("the sign-in page with wrong bearer token %d: %d, want 200", i+1, res.StatusCode)
		}
	}
	res, _ := do(t, h, req{path: "/login?next=/runs", remote: attacker, header: map[string]string{"Authorization": "Bearer " + token}})
	if res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the sign-in page with the right bearer token after 10 wrong ones: %d, want 429", res.StatusCode)
	}
	res, _ = do(t, h, req{path: "/login?next=/runs", remote: "198.51.100.2:50000", header: map[string]string{"Authorization": "Bearer " + token}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/runs" {
		t.Errorf("the sign-in page with the right bearer token from another address: %d to %q, want 303 to /runs", res.StatusCode, res.Header.Get("Location"))
	}
}
