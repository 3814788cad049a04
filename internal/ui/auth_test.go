package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

const token = "s3cret-Token-of-the-test"

// cancelUI is a dashboard whose engine counts the runs it cancels.
func cancelUI(t *testing.T, cfg ui.Config, cancelled *int) http.Handler {
	cfg.Engine = &fakeEngine{
		RunDetailFunc: func(context.Context, string, int) (*engine.RunDetail, error) { return detail(run.Running), nil },
		RunsFunc:      func(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, nil },
		CancelFunc: func(context.Context, string) error {
			*cancelled++
			return nil
		},
	}
	cfg.Sender = &fakeSender{}
	return newUI(t, cfg, nil)
}

func TestCSRFWithoutToken(t *testing.T) {
	t.Parallel()
	var cancelled int
	h := cancelUI(t, ui.Config{}, &cancelled)
	_, body := do(t, h, req{path: "/runs/r1"})
	good := csrfOf(t, body)
	for _, tc := range []struct {
		name   string
		form   url.Values
		header map[string]string
		status int
	}{
		{"no token", url.Values{}, nil, http.StatusForbidden},
		{"an empty token", url.Values{"csrf": {""}}, nil, http.StatusForbidden},
		{"a wrong token", url.Values{"csrf": {strings.Repeat("0", len(good))}}, nil, http.StatusForbidden},
		{"the page's token from another site", url.Values{"csrf": {good}}, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"the page's token, a null origin", url.Values{"csrf": {good}}, map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"the page's token, cross-site fetch", url.Values{"csrf": {good}}, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"the page's token", url.Values{"csrf": {good}}, nil, http.StatusSeeOther},
		{"the page's token from this site", url.Values{"csrf": {good}}, map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
	} {
		res, body := do(t, h, req{method: "POST", path: "/runs/r1/cancel", form: tc.form, header: tc.header})
		if res.StatusCode != tc.status {
			t.Errorf("POST with %s: %d, want %d:\n%s", tc.name, res.StatusCode, tc.status, body)
		}
		if res.StatusCode == http.StatusForbidden && !strings.Contains(body, "refused") {
			t.Errorf("POST with %s: the 403 page does not say why:\n%s", tc.name, body)
		}
	}
	if cancelled != 2 {
		t.Errorf("%d runs cancelled, want the 2 with the right token from this site", cancelled)
	}
	// Every form carries it: send, re-run, cancel.
	for _, path := range []string{"/send", "/runs/r1"} {
		_, body := do(t, h, req{path: path})
		if csrfOf(t, body) != good {
			t.Errorf("%s carries another CSRF token", path)
		}
	}
}

// signIn posts the token to the sign-in form and returns the response.
func signIn(t *testing.T, h http.Handler, tok, next string, tls bool) *http.Response {
	t.Helper()
	res, _ := do(t, h, req{method: "POST", path: "/login", form: url.Values{"token": {tok}, "next": {next}}, tls: tls})
	return res
}

func sessionOf(t *testing.T, res *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range res.Cookies() {
		if c.Name == "sluice_session" {
			return c
		}
	}
	t.Fatalf("no session cookie set (status %d)", res.StatusCode)
	return nil
}

func TestLogin(t *testing.T) {
	t.Parallel()
	var cancelled int
	h := cancelUI(t, ui.Config{Token: token}, &cancelled)

	// Not signed in: to the sign-in page, to come back.
	for path, next := range map[string]string{
		"/":                   "/",
		"/runs?status=failed": "/runs?status=failed",
		"/flows/titles":       "/flows/titles",
		"/send":               "/send",
		"/runs?x=%2F%2Fevil":  "/runs?x=%2F%2Fevil",
	} {
		res, _ := do(t, h, req{path: path})
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?next="+url.QueryEscape(next) {
			t.Errorf("GET %s signed out: %d to %q, want 303 to the sign-in with next %q", path, res.StatusCode, res.Header.Get("Location"), next)
		}
	}
	// The sign-in page and the assets need no sign-in.
	for _, path := range []string{"/login?next=/runs", "/assets/style.css", "/assets/live.js"} {
		if res, body := do(t, h, req{path: path}); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s signed out: %d:\n%s", path, res.StatusCode, body)
		}
	}
	_, body := do(t, h, req{path: "/login?next=" + url.QueryEscape("/runs?status=failed")})
	if f := parse(t, body).one(t, "next", with("name", "next")); f.Attrs["value"] != "/runs?status=failed" {
		t.Errorf("the sign-in form's next is %q", f.Attrs["value"])
	}

	// A wrong token: refused, and no cookie.
	for _, wrong := range []string{"", "s3cret", token + "x", strings.ToUpper(token)} {
		res := signIn(t, h, wrong, "/runs", false)
		if res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
			t.Errorf("sign in with %q: %d with cookies %v, want 401 and none", wrong, res.StatusCode, res.Cookies())
		}
	}

	// The right token: a session cookie that is not the token, then back.
	res := signIn(t, h, token, "/runs?status=failed", false)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/runs?status=failed" {
		t.Fatalf("sign in: %d to %q, want 303 to next", res.StatusCode, res.Header.Get("Location"))
	}
	c := sessionOf(t, res)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP, a max age", c)
	}
	if strings.Contains(c.Value, token) || c.Value == "" {
		t.Errorf("session cookie %q holds the token", c.Value)
	}
	if s := sessionOf(t, signIn(t, h, token, "/", true)); !s.Secure {
		t.Errorf("a session over TLS is not Secure")
	}

	// The cookie opens the pages, and its forms carry its CSRF token.
	res, body = do(t, h, req{path: "/runs/r1", cookies: []*http.Cookie{c}})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET with the session: %d", res.StatusCode)
	}
	if strings.Contains(body, token) {
		t.Errorf("a page shows the token")
	}
	csrf := csrfOf(t, body)
	if res, _ := do(t, h, req{method: "POST", path: "/runs/r1/cancel", cookies: []*http.Cookie{c}, form: url.Values{"csrf": {csrf}}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("cancel with the session and its CSRF token: %d", res.StatusCode)
	}
	// Another session's CSRF token does not do.
	h2 := newUIAt(t, token, now.Add(time.Hour))
	other := sessionOf(t, signIn(t, h2, token, "/", false))
	res2, body2 := do(t, h2, req{path: "/runs/r1", cookies: []*http.Cookie{other}})
	if res2.StatusCode != http.StatusOK {
		t.Fatalf("GET with the other session: %d", res2.StatusCode)
	}
	if csrfOf(t, body2) == csrf {
		t.Errorf("two sessions share a CSRF token")
	}
	if res, _ := do(t, h, req{method: "POST", path: "/runs/r1/cancel", cookies: []*http.Cookie{c}, form: url.Values{"csrf": {csrfOf(t, body2)}}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("cancel with another session's CSRF token: %d, want 403", res.StatusCode)
	}
	if cancelled != 1 {
		t.Errorf("%d runs cancelled, want 1", cancelled)
	}

	// Signed in, the sign-in page goes on to next.
	if res, _ := do(t, h, req{path: "/login?next=/flows", cookies: []*http.Cookie{c}}); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/flows" {
		t.Errorf("the sign-in page signed in: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}

	// Signing out clears the cookie, and needs the CSRF token too.
	if res, _ := do(t, h, req{method: "POST", path: "/logout", cookies: []*http.Cookie{c}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("sign out without the CSRF token: %d, want 403", res.StatusCode)
	}
	res, _ = do(t, h, req{method: "POST", path: "/logout", cookies: []*http.Cookie{c}, form: url.Values{"csrf": {csrf}}})
	if cl := sessionOf(t, res); res.StatusCode != http.StatusSeeOther || cl.MaxAge >= 0 || cl.Value != "" {
		t.Errorf("sign out: %d, cookie %+v, want it cleared", res.StatusCode, cl)
	}
}

func newUIAt(t *testing.T, tok string, at time.Time) http.Handler {
	var n int
	return cancelUI(t, ui.Config{Token: tok, Now: func() time.Time { return at }}, &n)
}

// clock is a test's clock, moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func TestSessionsEnd(t *testing.T) {
	t.Parallel()
	clk := &clock{t: now}
	var n int
	h := cancelUI(t, ui.Config{Token: token, Now: clk.Now}, &n)
	c := sessionOf(t, signIn(t, h, token, "/", false))
	for _, tc := range []struct {
		name  string
		at    time.Time
		works bool
	}{
		{"later", now.Add(11 * time.Hour), true},
		{"before it was issued", now.Add(-time.Hour), false},
		{"after the session's 12 h", now.Add(12 * time.Hour), false},
	} {
		clk.Set(tc.at)
		res, _ := do(t, h, req{path: "/", cookies: []*http.Cookie{c}})
		if got := res.StatusCode == http.StatusOK; got != tc.works {
			t.Errorf("the cookie %s: status %d, want it to work: %v", tc.name, res.StatusCode, tc.works)
		}
	}
	clk.Set(now)
	// Sessions live in the process: another one, on the same token (a
	// restart) or a new token, knows none of them.
	for _, tok := range []string{token, "another-token-entirely"} {
		if res, _ := do(t, newUIAt(t, tok, now), req{path: "/", cookies: []*http.Cookie{c}}); res.StatusCode != http.StatusSeeOther {
			t.Errorf("the cookie on another process with token %q: %d, want 303 to sign in", tok, res.StatusCode)
		}
	}
	forged := *c
	forged.Value = "0" + c.Value[1:] // another ID, the same MAC
	if forged.Value == c.Value {
		forged.Value = "1" + c.Value[1:]
	}
	if res, _ := do(t, h, req{path: "/", cookies: []*http.Cookie{&forged}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a forged cookie: %d, want 303 to sign in", res.StatusCode)
	}
	if res, _ := do(t, h, req{path: "/", cookies: []*http.Cookie{c}}); res.StatusCode != http.StatusOK {
		t.Errorf("the cookie, now: %d, want 200", res.StatusCode)
	}
}

// TestLogoutEndsTheSession: a cookie kept after signing out (a copy in
// another tab, a proxy's log, a stolen one) no longer works.
func TestLogoutEndsTheSession(t *testing.T) {
	t.Parallel()
	var cancelled int
	h := cancelUI(t, ui.Config{Token: token}, &cancelled)
	c := sessionOf(t, signIn(t, h, token, "/", false))
	other := sessionOf(t, signIn(t, h, token, "/", false))
	_, body := do(t, h, req{path: "/runs/r1", cookies: []*http.Cookie{c}})
	csrf := csrfOf(t, body)
	if res, _ := do(t, h, req{method: "POST", path: "/logout", cookies: []*http.Cookie{c}, form: url.Values{"csrf": {csrf}}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", res.StatusCode)
	}
	res, _ := do(t, h, req{path: "/runs/r1", cookies: []*http.Cookie{c}})
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login") {
		t.Errorf("the signed-out cookie replayed: %d to %q, want 303 to sign in", res.StatusCode, res.Header.Get("Location"))
	}
	if res, _ := do(t, h, req{method: "POST", path: "/runs/r1/cancel", cookies: []*http.Cookie{c}, form: url.Values{"csrf": {csrf}}}); res.StatusCode != http.StatusSeeOther || cancelled != 0 {
		t.Errorf("a form with the signed-out cookie and its CSRF token: %d, %d cancelled; want 303 to sign in and none", res.StatusCode, cancelled)
	}
	if res, _ := do(t, h, req{path: "/runs/r1", cookies: []*http.Cookie{other}}); res.StatusCode != http.StatusOK {
		t.Errorf("another session after one signed out: %d, want 200", res.StatusCode)
	}
}

// TestSessionsBounded: past the bound of live sessions, a sign-in ends
// the oldest.
func TestSessionsBounded(t *testing.T) {
	t.Parallel()
	const bound = 1000
	clk := &clock{t: now}
	var n int
	h := cancelUI(t, ui.Config{Token: token, Now: clk.Now}, &n)
	cookies := make([]*http.Cookie, 0, bound+1)
	for i := range bound + 1 {
		clk.Set(now.Add(time.Duration(i) * time.Second))
		cookies = append(cookies, sessionOf(t, signIn(t, h, token, "/", false)))
	}
	for i, want := range map[int]int{0: http.StatusSeeOther, 1: http.StatusOK, bound: http.StatusOK} {
		if res, _ := do(t, h, req{path: "/", cookies: []*http.Cookie{cookies[i]}}); res.StatusCode != want {
			t.Errorf("session %d of %d: %d, want %d", i+1, bound+1, res.StatusCode, want)
		}
	}
}

// TestSignInThrottle: an address that sends too many wrong tokens is
// refused with 429 before its token is checked, logged once a window,
// and the others sign in as before.
func TestSignInThrottle(t *testing.T) {
	t.Parallel()
	clk := &clock{t: now}
	var log logBuffer
	cfg := ui.Config{Token: token, Now: clk.Now, Engine: &fakeEngine{RunsFunc: func(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, nil }}}
	h := newUI(t, cfg, &log)
	const attacker, friend = "203.0.113.9:40000", "198.51.100.2:50000"
	try := func(remote, tok string) *http.Response {
		t.Helper()
		res, _ := do(t, h, req{method: "POST", path: "/login", remote: remote, form: url.Values{"token": {tok}, "next": {"/runs"}}})
		return res
	}
	lines := func() []string {
		var out []string
		for l := range strings.Lines(log.String()) {
			if strings.Contains(l, "requests with a wrong token") {
				out = append(out, l)
			}
		}
		return out
	}
	counts := map[int]int{}
	for i := range 1000 {
		res := try(attacker, fmt.Sprintf("guess-%04d-of-the-token", i))
		counts[res.StatusCode]++
		if res.StatusCode == http.StatusTooManyRequests && res.Header.Get("Retry-After") != "60" {
			t.Fatalf("try %d: 429 with Retry-After %q, want 60", i, res.Header.Get("Retry-After"))
		}
	}
	if counts[http.StatusUnauthorized] != 10 || counts[http.StatusTooManyRequests] != 990 {
		t.Errorf("1,000 wrong tokens from one address: %v, want 10 × 401 then 990 × 429", counts)
	}
	// The right token from the throttled address is not even checked.
	if res := try(attacker, token); res.StatusCode != http.StatusTooManyRequests || len(res.Cookies()) != 0 {
		t.Errorf("the right token from the throttled address: %d, cookies %v; want 429 and none", res.StatusCode, res.Cookies())
	}
	// Another address signs in.
	if res := try(friend, token); res.StatusCode != http.StatusSeeOther || sessionOf(t, res) == nil {
		t.Errorf("the right token from another address: %d, want 303", res.StatusCode)
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "remote=203.0.113.9 wrong_tokens=1 throttled=0") {
		t.Errorf("log after 1,001 tries in one minute: %d lines, want one for the first:\n%s", len(l), strings.Join(l, ""))
	}

	// A minute on, the window's count is logged in one line (at the next
	// sign-in, or by a timer), and the address may try again.
	clk.Set(now.Add(time.Minute))
	try(friend, token)
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "remote=203.0.113.9 wrong_tokens=9 throttled=991") {
		t.Errorf("log a minute on: %d lines, want a second with the minute's count:\n%s", len(l), strings.Join(l, ""))
	}
	// Throttled again, for twice as long; the pages refuse a bearer token
	// from it too, and a wrong bearer token counts as a wrong sign-in.
	for i := range 9 {
		if res := try(attacker, fmt.Sprintf("again-%d-not-the-token", i)); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("a wrong token after the throttle: %d, want 401", res.StatusCode)
		}
	}
	bearer := func(tok string) *http.Response {
		res, _ := do(t, h, req{path: "/runs", remote: attacker, header: map[string]string{"Authorization": "Bearer " + tok}})
		return res
	}
	if res := bearer("a-wrong-bearer-token"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a wrong bearer token: %d, want 303 to sign in", res.StatusCode)
	}
	if res := bearer(token); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "120" {
		t.Errorf("the right bearer token from the throttled address: %d, Retry-After %q; want 429 and 120", res.StatusCode, res.Header.Get("Retry-After"))
	}
	clk.Set(now.Add(3 * time.Minute))
	if res := try(attacker, token); res.StatusCode != http.StatusSeeOther {
		t.Errorf("the right token after the second throttle: %d, want 303", res.StatusCode)
	}
	// One machine's IPv6 addresses are one address.
	for i := range 10 {
		try(fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "not-the-token-at-all")
	}
	if res := try("[2001:db8:1:2:ffff::1]:443", token); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right token from the same /64: %d, want 429", res.StatusCode)
	}
	if res := try("[2001:db8:1:3::1]:443", token); res.StatusCode != http.StatusSeeOther {
		t.Errorf("the right token from another /64: %d, want 303", res.StatusCode)
	}
	if l := lines(); len(l) > 4 {
		t.Errorf("%d log lines for two addresses in two minutes, want at most 4:\n%s", len(l), strings.Join(l, ""))
	}
}

// TestSecureCookie: the session's cookie is Secure over TLS, and behind
// a proxy that terminates TLS when the public URL is https.
func TestSecureCookie(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		publicURL string
		tls       bool
		secure    bool
	}{
		{"", false, false},
		{"", true, true},
		{"http://sluice.internal:8288", false, false},
		{"https://sluice.example.com", false, true},
		{"HTTPS://sluice.example.com/dash", false, true},
	} {
		var n int
		h := cancelUI(t, ui.Config{Token: token, PublicURL: tc.publicURL}, &n)
		c := sessionOf(t, signIn(t, h, token, "/", tc.tls))
		if c.Secure != tc.secure {
			t.Errorf("public URL %q, TLS %v: Secure %v, want %v", tc.publicURL, tc.tls, c.Secure, tc.secure)
		}
		_, body := do(t, h, req{path: "/runs/r1", cookies: []*http.Cookie{c}, tls: tc.tls})
		res, _ := do(t, h, req{method: "POST", path: "/logout", cookies: []*http.Cookie{c}, form: url.Values{"csrf": {csrfOf(t, body)}}, tls: tc.tls})
		if cl := sessionOf(t, res); cl.Secure != tc.secure {
			t.Errorf("public URL %q, TLS %v: the sign-out's cookie Secure %v, want %v", tc.publicURL, tc.tls, cl.Secure, tc.secure)
		}
	}
	for u, want := range map[string]string{
		"ftp://sluice.example.com":             "want an absolute http:// or https:// URL",
		"sluice.example.com":                   "want an absolute http:// or https:// URL",
		"/dashboard":                           "want an absolute http:// or https:// URL",
		"https://":                             "want a host after https://",
		"https://:443":                         "want a host after https://",
		"https://me:pw@sluice.example":         "want no user or password",
		"https://sluice.example/?a=b":          "want no query or fragment",
		"https://sluice.example/#frag":         "want no query or fragment",
		"https://" + strings.Repeat("a", 2050): "at most 2048",
	} {
		_, err := ui.New(ui.Config{Engine: &fakeEngine{}, Token: token, PublicURL: u})
		if err == nil || !strings.Contains(err.Error(), "PublicURL") || !strings.Contains(err.Error(), want) {
			t.Errorf("PublicURL %q: %v, want an error saying %q", u, err, want)
		}
	}
}

func TestLoginNextStaysOnTheSite(t *testing.T) {
	t.Parallel()
	var n int
	h := cancelUI(t, ui.Config{Token: token}, &n)
	for next, want := range map[string]string{
		"/runs?status=failed":        "/runs?status=failed",
		"/flows/titles":              "/flows/titles",
		"":                           "/",
		"https://evil.example/":      "/",
		"//evil.example/":            "/",
		"///evil.example/":           "/",
		`/\evil.example/`:            "/",
		"/\t/evil.example/":          "/",
		"evil.example":               "/",
		"javascript:alert(1)":        "/",
		"/login?next=//evil.example": "/",
		"/logout":                    "/",
	} {
		res := signIn(t, h, token, next, false)
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != want {
			t.Errorf("sign in with next %q: %d to %q, want %q", next, res.StatusCode, loc, want)
		}
	}
	// The sign-in page's own next is cleaned the same way.
	_, body := do(t, h, req{path: "/login?next=" + url.QueryEscape("//evil.example/")})
	if f := parse(t, body).one(t, "next", with("name", "next")); f.Attrs["value"] != "/" {
		t.Errorf("the sign-in form's next is %q, want /", f.Attrs["value"])
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	var cancelled int
	h := cancelUI(t, ui.Config{Token: token}, &cancelled)
	for _, tc := range []struct {
		auth string
		ok   bool
	}{
		{"Bearer " + token, true},
		{"Bearer " + token + "x", false},
		{"Bearer ", false},
		{"Basic " + token, false},
		{token, false},
	} {
		res, _ := do(t, h, req{path: "/runs", header: map[string]string{"Authorization": tc.auth}})
		if got := res.StatusCode == http.StatusOK; got != tc.ok {
			t.Errorf("Authorization %q: %d, want it to open the page: %v", tc.auth, res.StatusCode, tc.ok)
		}
	}
	// A script's POSTs carry the CSRF token of its pages too.
	bearer := map[string]string{"Authorization": "Bearer " + token}
	_, body := do(t, h, req{path: "/runs/r1", header: bearer})
	csrf := csrfOf(t, body)
	if res, _ := do(t, h, req{method: "POST", path: "/runs/r1/cancel", header: bearer}); res.StatusCode != http.StatusForbidden {
		t.Errorf("a bearer POST without the CSRF token: %d, want 403", res.StatusCode)
	}
	if res, _ := do(t, h, req{method: "POST", path: "/runs/r1/cancel", header: bearer, form: url.Values{"csrf": {csrf}}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a bearer POST with its CSRF token: %d, want 303", res.StatusCode)
	}
	// Signed out, a POST does nothing: it goes to the sign-in page.
	if res, _ := do(t, h, req{method: "POST", path: "/runs/r1/cancel", form: url.Values{"csrf": {csrf}}}); res.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(res.Header.Get("Location"), "/login") {
		t.Errorf("a POST signed out: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	if cancelled != 1 {
		t.Errorf("%d cancelled, want 1", cancelled)
	}
}
