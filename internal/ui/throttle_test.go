package ui

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineCounter counts the lines written to it.
type lineCounter struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *lineCounter) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// testThrottle is a throttle on the clock *at, whose timers are kept in
// *timers for the test to run.
func testThrottle(at *time.Time, timers *[]func()) (*throttle, *lineCounter) {
	var out lineCounter
	th := newThrottle(slog.New(slog.NewTextHandler(&out, nil)), func() time.Time { return *at })
	th.timers = func(_ time.Duration, f func()) { *timers = append(*timers, f) }
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
	if n := len(out.all()); n != 1000 {
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
	for range loginFailures {
		th.fail("192.0.2.1", at)
	}
	if w := th.wait("192.0.2.1", at); w != loginWindow {
		t.Fatalf("throttled for %s, want %s", w, loginWindow)
	}
	// Still remembered within maxLockout of the throttle's end, with its
	// strike: the next throttle is twice as long.
	at = at.Add(loginWindow + maxLockout - time.Second)
	th.wait("192.0.2.9", at) // a sweep
	if _, ok := th.addrs["192.0.2.1"]; !ok {
		t.Fatalf("forgotten before maxLockout")
	}
	at = at.Add(2 * maxLockout)
	th.wait("192.0.2.9", at)
	if _, ok := th.addrs["192.0.2.1"]; ok {
		t.Errorf("remembered after %s quiet", 2*maxLockout)
	}
	for range loginFailures {
		th.fail("192.0.2.1", at)
	}
	if w := th.wait("192.0.2.1", at); w != loginWindow {
		t.Errorf("a forgotten address throttled for %s, want %s again", w, loginWindow)
	}
}

func TestThrottleDelayGrowsToABound(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	var timers []func()
	th, _ := testThrottle(&at, &timers)
	var got []string
	for range 9 {
		for range loginFailures {
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
	if n := len(out.all()); n != 1 || len(timers) != 1 {
		t.Fatalf("%d lines and %d timers after 50 tries, want 1 and 1", n, len(timers))
	}
	at = at.Add(loginWindow)
	timers[0]()
	lines := out.all()
	if len(lines) != 2 || !strings.Contains(lines[1], "wrong_tokens=9 throttled=40") {
		t.Errorf("after the timer: %q", lines)
	}
}
