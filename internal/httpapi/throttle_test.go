package httpapi_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestBearerThrottle: an address that sends 10 wrong bearer tokens within
// a minute gets 429 with Retry-After on /v1, in the API's JSON error
// shape, the right token from it too, and is logged once; a minute on it
// may try again. Other addresses are answered as before.
func TestBearerThrottle(t *testing.T) {
	t.Parallel()
	const token = "s3cret-0123456789"
	start := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	var (
		mu  sync.Mutex
		at  = start
		log testenv.Buffer
	)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	th := authlimit.New(authlimit.Config{Logger: slog.New(slog.NewTextHandler(&log, nil)), Now: now,
		AfterFunc: func(time.Duration, func()) {}})
	h := httpapi.New(httpapi.Config{Engine: &fakeEngine{}, Token: token, Throttle: th})
	const attacker, friend = "203.0.113.9:40000", "198.51.100.2:50000"
	serve := func(remote, tok string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/v1/runs", nil)
		r.RemoteAddr = remote
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	for i := range 10 {
		if w := serve(attacker, fmt.Sprintf("guess-%d", i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	w := serve(attacker, token)
	var body struct{ Error string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusTooManyRequests ||
		w.Header().Get("Retry-After") != "60" || !strings.Contains(body.Error, "too many wrong tokens") {
		t.Fatalf("the right token after 10 wrong ones: %d, Retry-After %q, %s; want 429, 60 and a JSON error", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if w := serve(attacker, "guess-10"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a wrong token from the throttled address: %d, want 429", w.Code)
	}
	if w := serve(attacker, ""); w.Code != http.StatusUnauthorized {
		t.Errorf("no token from the throttled address: %d, want 401", w.Code)
	}
	if w := serve(friend, token); w.Code != http.StatusOK {
		t.Errorf("the right token from another address: %d, want 200", w.Code)
	}
	if l := log.Lines(); len(l) != 1 || !strings.Contains(l[0], "remote=203.0.113.9 wrong_tokens=1 throttled=0") {
		t.Errorf("log: %q, want one line for the first wrong token", l)
	}

	mu.Lock()
	at = start.Add(time.Minute)
	mu.Unlock()
	if w := serve(attacker, token); w.Code != http.StatusOK {
		t.Errorf("the right token a minute on: %d, want 200", w.Code)
	}
	if l := log.Lines(); len(l) != 2 || !strings.Contains(l[1], "remote=203.0.113.9 wrong_tokens=9 throttled=2") {
		t.Errorf("log a minute on: %q, want a second line with the minute's count", l)
	}
}

// TestBearerThrottleByDefault: a handler given no throttle has one of its
// own, so a program that mounts the API by itself is not guessed at at
// full speed.
func TestBearerThrottleByDefault(t *testing.T) {
	t.Parallel()
	const token = "s3cret-0123456789"
	h := httpapi.New(httpapi.Config{Engine: &fakeEngine{}, Token: token, Logger: slog.New(slog.DiscardHandler)})
	codes := map[int]int{}
	for i := range 11 {
		r := httptest.NewRequest("GET", "/v1/runs", nil)
		r.Header.Set("Authorization", "Bearer "+fmt.Sprintf("guess-%d", i))
		if i == 10 {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes[w.Code]++
	}
	// On the wall clock: the 10 wrong tokens fall within a minute unless
	// the machine stalls for one, when the right token is let in.
	if codes[http.StatusUnauthorized] != 10 || codes[http.StatusTooManyRequests]+codes[http.StatusOK] != 1 {
		t.Fatalf("10 wrong tokens then the right one: %v", codes)
	}
	if codes[http.StatusOK] == 1 {
		t.Skip("the wrong tokens were spread over more than a minute")
	}
}
