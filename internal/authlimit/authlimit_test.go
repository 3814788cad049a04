package authlimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// testThrottle is a throttle on the clock *at, whose timers are kept in
// *timers for the test to run.
func testThrottle(at *time.Time, timers *[]func()) (*Throttle, *testenv.Buffer) {
	var out testenv.Buffer
	th := New(Config{Logger: slog.New(slog.NewTextHandler(&out, nil)), Now: func() time.Time { return *at },
		AfterFunc: func(_ time.Duration, f func()) { *timers = append(*timers, f) }})
	return th, &out
}

func TestThrottleRemembersBoundedAddresses(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	var timers []func()
	th, out := testThrottle(&at, &timers)
	th.limit = 100
	for i := range 1000 {
		th.fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256), at)
	}
	if n := len(th.addrs); n != 100 || th.order.Len() != 100 {
		t.Errorf("%d addresses remembered (%d in order), want the bound of 100", n, th.order.Len())
	}
	// Each address had one line, at its first wrong token.
	if n := len(out.Lines()); n != 1000 {
		t.Errorf("%d lines for 1,000 addresses' one wrong token each, want 1,000", n)
	}
	// The newest are the ones kept.
	if _, ok := th.addrs["10.0.3.231"]; !ok { // the 1,000th
		t.Errorf("the last address was forgotten")
	}
}

func TestThrottleForgetsQuietAddresses(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	var timers []func()
	th, _ := testThrottle(&at, &timers)
	for range maxFailures {
		th.fail("192.0.2.1", at)
	}
	if w := th.wait("192.0.2.1", at); w != window {
		t.Fatalf("throttled for %s, want %s", w, window)
	}
	// Still remembered within maxLockout of the throttle's end, with its
	// strike: the next throttle is twice as long.
	at = at.Add(window + maxLockout - time.Second)
	th.wait("192.0.2.9", at) // a sweep
	if _, ok := th.addrs["192.0.2.1"]; !ok {
		t.Fatalf("forgotten before maxLockout")
	}
	at = at.Add(2 * maxLockout)
	th.wait("192.0.2.9", at)
	if _, ok := th.addrs["192.0.2.1"]; ok {
		t.Errorf("remembered after %s quiet", 2*maxLockout)
	}
	for range maxFailures {
		th.fail("192.0.2.1", at)
	}
	if w := th.wait("192.0.2.1", at); w != window {
		t.Errorf("a forgotten address throttled for %s, want %s again", w, window)
	}
}

func TestThrottleDelayGrowsToABound(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	var timers []func()
	th, _ := testThrottle(&at, &timers)
	var got []string
	for range 9 {
		for range maxFailures {
			th.fail("192.0.2.1", at)
		}
		w := th.wait("192.0.2.1", at)
		got = append(got, w.String())
		at = at.Add(w)
	}
	if s := strings.Join(got, " "); s != "1m0s 2m0s 4m0s 8m0s 16m0s 32m0s 1h0m0s 1h0m0s 1h0m0s" {
		t.Errorf("throttled for %s", s)
	}
}

// TestThrottleTimerLogs: what an address did after its last line is
// logged a window later by the timer, with no further sign-in.
func TestThrottleTimerLogs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	var timers []func()
	th, out := testThrottle(&at, &timers)
	for range 50 {
		if th.wait("192.0.2.1", at) == 0 {
			th.fail("192.0.2.1", at)
		}
	}
	if n := len(out.Lines()); n != 1 || len(timers) != 1 {
		t.Fatalf("%d lines and %d timers after 50 tries, want 1 and 1", n, len(timers))
	}
	at = at.Add(window)
	timers[0]()
	lines := out.Lines()
	if len(lines) != 2 || !strings.Contains(lines[1], "wrong_tokens=9 throttled=40") {
		t.Errorf("after the timer: %q", lines)
	}
}

// TestCheckBearer: a wrong bearer token counts, a throttled address's
// token is not compared, a request with none is neither counted nor
// throttled, and a right one clears nothing.
func TestCheckBearer(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	var timers []func()
	th, _ := testThrottle(&at, &timers)
	const token = "the-token-0123456789"
	request := func(remote, auth string) *http.Request {
		r := httptest.NewRequest("GET", "/v1/runs", nil)
		r.RemoteAddr = remote
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	compared := 0
	check := func(r *http.Request) (time.Duration, bool) {
		return th.CheckBearer(r, func(got string) bool { compared++; return got == token })
	}
	const attacker = "203.0.113.9:40000"
	for i := range 9 {
		if w, ok := check(request(attacker, fmt.Sprintf("Bearer guess-%d", i))); w != 0 || ok {
			t.Fatalf("wrong token %d: wait %s, ok %t", i+1, w, ok)
		}
	}
	// The right token clears nothing: the tenth wrong one throttles.
	if w, ok := check(request(attacker, "Bearer "+token)); w != 0 || !ok {
		t.Fatalf("the right token: wait %s, ok %t", w, ok)
	}
	for range 5 {
		if w, ok := check(request(attacker, "Basic dXNlcjpwYXNz")); w != 0 || ok {
			t.Fatalf("no bearer token: wait %s, ok %t; want neither counted nor throttled", w, ok)
		}
	}
	check(request(attacker, "Bearer guess-10"))
	n := compared
	if w, ok := check(request(attacker, "Bearer "+token)); w != window || ok || compared != n {
		t.Errorf("the right token from the throttled address: wait %s, ok %t, compared %t; want %s, refused, not compared", w, ok, compared != n, window)
	}
	if w, ok := check(request(attacker, "")); w != 0 || ok {
		t.Errorf("no token from the throttled address: wait %s, ok %t; want neither (the door answers it as unsigned)", w, ok)
	}
	// X-Forwarded-For names no one: the connection's address is throttled.
	r := request("198.51.100.2:50000", "Bearer "+token)
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	if w, ok := check(r); w != 0 || !ok {
		t.Errorf("another address claiming the throttled one in X-Forwarded-For: wait %s, ok %t", w, ok)
	}
	if w, _ := check(request("203.0.113.9:1", "Bearer "+token)); w == 0 {
		t.Errorf("the throttled address from another port was not throttled")
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ remote, want string }{
		{"203.0.113.9:40000", "203.0.113.9"},
		{"[::ffff:203.0.113.9]:40000", "203.0.113.9"},
		{"[2001:db8:1:2::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::9%eth0]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},
		{"@", "@"}, // a Unix socket's
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if got := clientAddr(r); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.remote, got, tc.want)
		}
	}
}
