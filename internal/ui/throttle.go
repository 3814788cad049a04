package ui

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// The sign-in throttle's bounds (docs/dashboard.md).
const (
	// loginFailures wrong tokens from one address within loginWindow
	// throttle it: until the window after the last of them ends, every
	// sign-in from it, right or wrong, gets 429 with Retry-After, and the
	// token is not checked.
	loginFailures = 10
	loginWindow   = time.Minute
	// maxLockout bounds how long an address is throttled: each time it is
	// throttled again, for twice as long as the time before, up to an hour.
	// An address with no wrong token for maxLockout after its last
	// throttle ended starts afresh.
	maxLockout = time.Hour
	// maxAddresses bounds the addresses the throttle remembers: beyond it,
	// the one whose last wrong try is the oldest is forgotten.
	maxAddresses = 10_000
)

// throttle counts wrong tokens per client address, refuses an address that
// sent too many, and logs them at most once per address per loginWindow.
// Safe for simultaneous use.
type throttle struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	addrs  map[string]*list.Element // of *client
	order  *list.List               // by last wrong or throttled try, oldest first
	swept  time.Time                // when sweep last ran
	armed  bool                     // a timer will sweep
	limit  int                      // maxAddresses; smaller in tests
	timers func(time.Duration, func())
}

// client is what the throttle knows of one address.
type client struct {
	addr     string
	since    time.Time // the window the failures count in began
	failures int       // wrong tokens since since
	strikes  int       // times throttled, each doubling the next
	until    time.Time // throttled until
	last     time.Time // the last wrong or throttled try

	// What the log has not told yet: the wrong and throttled tries since
	// from, and when the address's last line was written.
	wrong, throttled int
	from, logged     time.Time
}

func newThrottle(log *slog.Logger, now func() time.Time) *throttle {
	return &throttle{log: log, now: now, addrs: map[string]*list.Element{}, order: list.New(), limit: maxAddresses,
		timers: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// clientAddr is the address a request is throttled by: the connection's
// remote IP (a header such as X-Forwarded-For is anyone's to write), an
// IPv6 address by its /64, which one machine commonly holds whole.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// wait returns how long addr is still throttled at now, counting the try
// it refuses; 0 when it may try.
func (t *throttle) wait(addr string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepDue(now)
	e, ok := t.addrs[addr]
	if !ok {
		return 0
	}
	c := e.Value.(*client)
	if !now.Before(c.until) {
		return 0
	}
	c.throttled++
	t.touch(e, c, now)
	return c.until.Sub(now)
}

// fail counts a wrong token from addr at now, and throttles addr when it
// is the loginFailures-th within loginWindow.
func (t *throttle) fail(addr string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.addrs[addr]
	if !ok {
		if t.order.Len() >= t.limit {
			t.forget(t.order.Front(), now)
		}
		e = t.order.PushBack(&client{addr: addr, since: now})
		t.addrs[addr] = e
	}
	c := e.Value.(*client)
	if !now.Before(c.since.Add(loginWindow)) {
		c.since, c.failures = now, 0
	}
	c.failures++
	c.wrong++
	if c.failures >= loginFailures {
		c.strikes = min(c.strikes+1, 32)
		c.until = now.Add(min(loginWindow<<(c.strikes-1), maxLockout))
		c.since, c.failures = c.until, 0
	}
	t.touch(e, c, now)
}

// succeed clears addr's wrong tokens: a person who mistyped and then got
// it right starts afresh.
func (t *throttle) succeed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.addrs[addr]; ok {
		c := e.Value.(*client)
		c.failures, c.strikes = 0, 0
	}
}

// touch records a try of c at now: it moves c to the back of the order
// and logs what c has not told, unless c's last line is less than a
// window old; then a sweep will.
func (t *throttle) touch(e *list.Element, c *client, now time.Time) {
	if c.from.IsZero() {
		c.from = now
	}
	c.last = now
	t.order.MoveToBack(e)
	if c.logged.IsZero() || !now.Before(c.logged.Add(loginWindow)) {
		t.report(c, now)
		return
	}
	if !t.armed {
		t.armed = true
		t.timers(loginWindow, func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.armed = false
			t.sweep(t.now())
		})
	}
}

// report logs what c has not told: one line for all its tries since from.
func (t *throttle) report(c *client, now time.Time) {
	if c.wrong == 0 && c.throttled == 0 {
		return
	}
	args := []any{"remote", c.addr, "wrong_tokens", c.wrong, "throttled", c.throttled, "since", c.from.UTC().Format(time.RFC3339)}
	if now.Before(c.until) {
		args = append(args, "throttled_until", c.until.UTC().Format(time.RFC3339))
	}
	t.log.Warn("sluice: dashboard sign-ins with a wrong token", args...)
	c.wrong, c.throttled, c.from, c.logged = 0, 0, time.Time{}, now
}

// forget drops e, first logging what it has not told.
func (t *throttle) forget(e *list.Element, now time.Time) {
	c := e.Value.(*client)
	t.report(c, now)
	t.order.Remove(e)
	delete(t.addrs, c.addr)
}

// sweepDue sweeps at most once a window.
func (t *throttle) sweepDue(now time.Time) {
	if !now.Before(t.swept.Add(loginWindow)) {
		t.sweep(now)
	}
}

// sweep logs what each address has not told once its last line is a
// window old, and forgets each address that was quiet for maxLockout
// after its last throttle.
func (t *throttle) sweep(now time.Time) {
	t.swept = now
	for e := t.order.Front(); e != nil; {
		next := e.Next()
		c := e.Value.(*client)
		if !now.Before(c.logged.Add(loginWindow)) {
			t.report(c, now)
		}
		if c.wrong == 0 && c.throttled == 0 && !now.Before(c.last.Add(maxLockout)) && !now.Before(c.until.Add(maxLockout)) {
			t.forget(e, now)
		}
		e = next
	}
}

// tooMany answers 429 to a throttled request, with when to try again.
func (h *Handler) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, next string) {
	secs := int64((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	h.render(w, r, http.StatusTooManyRequests, "login", "Sign in", "", loginView{Next: next, TokenOn: true,
		Error: "Too many wrong tokens from your address: try again in " + fmtDur(time.Duration(secs)*time.Second) + "."})
}
