// Package authlimit throttles the guessing of a server's tokens. It counts
// the wrong tokens each client address sends, at every door of the server
// that checks one — the API's bearer token, the dashboard's sign-in and
// pages, /metrics, the gateway's client keys — and refuses an address
// that sent too many, at whichever door it tries next, before its token
// is compared. A server has one Throttle for all its doors: with one per
// door, a guesser would multiply its rate by the doors, and an address
// throttled at one would still be answered at the others.
//
// An address that sends 10 wrong tokens within a minute is throttled for
// a minute after the tenth; each time it is throttled again, for twice as
// long as the time before, up to an hour. Wrong tokens are logged at WARN,
// at most one line per address a minute.
package authlimit

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The throttle's bounds (docs/security.md).
const (
	// maxFailures wrong tokens from one address within window throttle
	// it: until the window after the last of them ends, every try from
	// it, right or wrong, is refused, and the token is not compared.
	maxFailures = 10
	window      = time.Minute
	// maxLockout bounds how long an address is throttled: each time it is
	// throttled again, for twice as long as the time before, up to an hour.
	// An address with no wrong token for maxLockout after its last
	// throttle ended starts afresh.
	maxLockout = time.Hour
	// maxAddresses bounds the addresses the throttle remembers: beyond it,
	// the one whose last wrong try is the oldest is forgotten.
	maxAddresses = 10_000
)

// Config configures a Throttle. Every zero field takes its default.
type Config struct {
	// Logger receives the wrong tokens, at most one line per address a
	// minute (default slog.Default()).
	Logger *slog.Logger
	// Now is the wall clock the windows and lockouts are measured on
	// (default time.Now).
	Now func() time.Time
	// AfterFunc runs f once d has passed on Now's clock, to log the tries
	// an address made after its last line when it makes no more (default
	// time.AfterFunc; a test with its own clock runs f itself).
	AfterFunc func(d time.Duration, f func())
}

// Throttle counts wrong tokens per client address, refuses an address
// that sent too many, and logs them at most once per address a minute.
// Build it with New; it is safe for simultaneous use by multiple
// goroutines.
type Throttle struct {
	log    *slog.Logger
	now    func() time.Time
	timers func(time.Duration, func())

	mu    sync.Mutex
	addrs map[string]*list.Element // of *client
	order *list.List               // by last wrong or throttled try, oldest first
	swept time.Time                // when sweep last ran
	armed bool                     // a timer will sweep
	limit int                      // maxAddresses; smaller in tests
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

// New returns a throttle that remembers no address yet.
func New(cfg Config) *Throttle {
	t := &Throttle{log: cfg.Logger, now: cfg.Now, timers: cfg.AfterFunc,
		addrs: map[string]*list.Element{}, order: list.New(), limit: maxAddresses}
	if t.log == nil {
		t.log = slog.Default()
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.timers == nil {
		t.timers = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	return t
}

// Try decides a try of a token from r's address: when the address is
// throttled, it returns how long it still is and right is not called, so
// the token is not even compared; else ok is right(), and a wrong token
// counts toward throttling the address.
func (t *Throttle) Try(r *http.Request, right func() bool) (wait time.Duration, ok bool) {
	addr, now := clientAddr(r), t.now()
	if wait := t.wait(addr, now); wait > 0 {
		return wait, false
	}
	if right() {
		return 0, true
	}
	t.fail(addr, now)
	return 0, false
}

// CheckBearer decides r's "Authorization: Bearer TOKEN" at a door that
// takes the tokens right accepts, as Try does. A request without a bearer
// token gets (0, false) and is not counted: it guesses nothing, and the
// door answers it as it answers anyone who has not signed in. A right
// token clears nothing: at a door that takes another token than the one
// guessed (a client key, a /metrics token of its own), a guesser holding
// that one would clear its count between guesses. Only a sign-in does
// (Succeed).
func (t *Throttle) CheckBearer(r *http.Request, right func(token string) bool) (wait time.Duration, ok bool) {
	got, has := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !has {
		return 0, false
	}
	return t.Try(r, func() bool { return right(got) })
}

// Succeed clears the wrong tokens of r's address and its past throttles:
// a person who mistyped and then signed in starts afresh.
func (t *Throttle) Succeed(r *http.Request) {
	t.succeed(clientAddr(r))
}

// RetryAfter is wait in whole seconds, rounded up: a Retry-After header's
// value.
func RetryAfter(wait time.Duration) int64 {
	return int64((wait + time.Second - 1) / time.Second)
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
func (t *Throttle) wait(addr string, now time.Time) time.Duration {
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
// is the maxFailures-th within window.
func (t *Throttle) fail(addr string, now time.Time) {
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
	if !now.Before(c.since.Add(window)) {
		c.since, c.failures = now, 0
	}
	c.failures++
	c.wrong++
	if c.failures >= maxFailures {
		c.strikes = min(c.strikes+1, 32)
		c.until = now.Add(min(window<<(c.strikes-1), maxLockout))
		c.since, c.failures = c.until, 0
	}
	t.touch(e, c, now)
}

// succeed clears addr's wrong tokens and strikes.
func (t *Throttle) succeed(addr string) {
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
func (t *Throttle) touch(e *list.Element, c *client, now time.Time) {
	if c.from.IsZero() {
		c.from = now
	}
	c.last = now
	t.order.MoveToBack(e)
	if c.logged.IsZero() || !now.Before(c.logged.Add(window)) {
		t.report(c, now)
		return
	}
	if !t.armed {
		t.armed = true
		t.timers(window, func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.armed = false
			t.sweep(t.now())
		})
	}
}

// report logs what c has not told: one line for all its tries since from.
func (t *Throttle) report(c *client, now time.Time) {
	if c.wrong == 0 && c.throttled == 0 {
		return
	}
	args := []any{"remote", c.addr, "wrong_tokens", c.wrong, "throttled", c.throttled, "since", c.from.UTC().Format(time.RFC3339)}
	if now.Before(c.until) {
		args = append(args, "throttled_until", c.until.UTC().Format(time.RFC3339))
	}
	t.log.Warn("sluice: requests with a wrong token", args...)
	c.wrong, c.throttled, c.from, c.logged = 0, 0, time.Time{}, now
}

// forget drops e, first logging what it has not told.
func (t *Throttle) forget(e *list.Element, now time.Time) {
	c := e.Value.(*client)
	t.report(c, now)
	t.order.Remove(e)
	delete(t.addrs, c.addr)
}

// sweepDue sweeps at most once a window.
func (t *Throttle) sweepDue(now time.Time) {
	if !now.Before(t.swept.Add(window)) {
		t.sweep(now)
	}
}

// sweep logs what each address has not told once its last line is a
// window old, and forgets each address that was quiet for maxLockout
// after its last throttle.
func (t *Throttle) sweep(now time.Time) {
	t.swept = now
	for e := t.order.Front(); e != nil; {
		next := e.Next()
		c := e.Value.(*client)
		if !now.Before(c.logged.Add(window)) {
			t.report(c, now)
		}
		if c.wrong == 0 && c.throttled == 0 && !now.Before(c.last.Add(maxLockout)) && !now.Before(c.until.Add(maxLockout)) {
			t.forget(e, now)
		}
		e = next
	}
}
