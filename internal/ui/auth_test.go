package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
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
	other := sessionOf(t, signInAt(t, token, now.Add(time.Hour)))
	res2, body2 := do(t, newUIAt(t, token, now.Add(time.Hour)), req{path: "/runs/r1", cookies: []*http.Cookie{other}})
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

// signInAt signs in to a dashboard on tok whose clock says at.
func signInAt(t *testing.T, tok string, at time.Time) *http.Response {
	t.Helper()
	return signIn(t, newUIAt(t, tok, at), tok, "/", false)
}

func newUIAt(t *testing.T, tok string, at time.Time) http.Handler {
	var n int
	return cancelUI(t, ui.Config{Token: tok, Now: func() time.Time { return at }}, &n)
}

func TestSessionsEnd(t *testing.T) {
	t.Parallel()
	c := sessionOf(t, signInAt(t, token, now))
	for _, tc := range []struct {
		name  string
		tok   string
		at    time.Time
		works bool
	}{
		{"the same token, later", token, now.Add(11 * time.Hour), true},
		{"after the session's 12 h", token, now.Add(12 * time.Hour), false},
		{"before it was issued", token, now.Add(-time.Hour), false},
		{"a new token", "another-token-entirely", now.Add(time.Minute), false},
	} {
		res, _ := do(t, newUIAt(t, tc.tok, tc.at), req{path: "/", cookies: []*http.Cookie{c}})
		if got := res.StatusCode == http.StatusOK; got != tc.works {
			t.Errorf("the cookie with %s: status %d, want it to work: %v", tc.name, res.StatusCode, tc.works)
		}
	}
	forged := *c
	forged.Value = strings.Replace(c.Value, ".", "9.", 1) // a later issue time, the same MAC
	if res, _ := do(t, newUIAt(t, token, now), req{path: "/", cookies: []*http.Cookie{&forged}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a forged cookie: %d, want 303 to sign in", res.StatusCode)
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
