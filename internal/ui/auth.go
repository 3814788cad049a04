package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Sign-in, sessions and CSRF.
//
// A session is a cookie holding when it was issued and an HMAC-SHA256 of
// that time under a key derived from the token: it names no one and holds
// nothing secret, lasts SessionTTL, and stops working when the token
// changes, since the key does. Every form carries a CSRF token, an HMAC of
// the session's cookie under the same key (of "bearer" for a request
// signed with the token itself); without a token, of a fixed text under a
// key drawn at random when the process starts. A POST is refused with 403
// when its token is missing or wrong, and when it comes from another site
// (an Origin header naming another host, or a Sec-Fetch-Site of
// cross-site or same-site).

// sessionCookie is the name of the session's cookie.
const sessionCookie = "sluice_session"

// maxLoginBytes bounds the sign-in form.
const maxLoginBytes = 64 << 10

type auth struct {
	token string
	key   []byte // the MAC key of sessions and CSRF tokens
	ttl   time.Duration
}

func newAuth(token string, ttl time.Duration) (auth, error) {
	a := auth{token: token, ttl: ttl}
	if token != "" {
		m := hmac.New(sha256.New, []byte(token))
		m.Write([]byte("sluice dashboard key v1"))
		a.key = m.Sum(nil)
		return a, nil
	}
	a.key = make([]byte, 32)
	if _, err := rand.Read(a.key); err != nil {
		return auth{}, fmt.Errorf("ui: draw the CSRF key: %w", err)
	}
	return a, nil
}

func (a auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// bearer reports whether r carries the token as a bearer token.
func (a auth) bearer(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && a.token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(a.token)) == 1
}

// newSession returns a session cookie's value issued at now.
func (a auth) newSession(now time.Time) string {
	issued := strconv.FormatInt(now.Unix(), 10)
	return issued + "." + a.mac("session", issued)
}

// session returns r's session cookie's value, if it is valid at now.
func (a auth) session(r *http.Request, now time.Time) (string, bool) {
	if a.token == "" {
		return "", false
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", false
	}
	issued, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(a.mac("session", issued))) {
		return "", false
	}
	sec, err := strconv.ParseInt(issued, 10, 64)
	if err != nil {
		return "", false
	}
	at := time.Unix(sec, 0)
	if now.Before(at.Add(-time.Minute)) || !now.Before(at.Add(a.ttl)) {
		return "", false
	}
	return c.Value, true
}

// allowed reports whether r may see the pages: no token is set, or r is
// signed in, by session or bearer token.
func (h *Handler) allowedAt(r *http.Request) bool {
	a := h.auth
	if a.token == "" || a.bearer(r) {
		return true
	}
	_, ok := a.session(r, h.cfg.Now())
	return ok
}

// csrf is the CSRF token of r's forms; "" for a request that is not
// signed in.
func (h *Handler) csrf(r *http.Request) string {
	a := h.auth
	switch {
	case a.token == "":
		return a.mac("csrf", "local")
	case a.bearer(r):
		return a.mac("csrf", "bearer")
	}
	if s, ok := a.session(r, h.cfg.Now()); ok {
		return a.mac("csrf", "session", s)
	}
	return ""
}

// hasSession reports whether r is signed in with a session cookie.
func (h *Handler) hasSession(r *http.Request) bool {
	_, ok := h.auth.session(r, h.cfg.Now())
	return ok
}

// crossSite returns an error when r comes from another site.
func crossSite(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return forbidden{fmt.Errorf("refused: the form was sent from another site (%s), not %s", o, r.Host)}
		}
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return forbidden{errors.New("refused: the form was sent from another site")}
	}
	return nil
}

// checkPost refuses a POST from another site, or without the CSRF token of
// its session, and reads its form, bounded so that a test event's data
// fits.
func (h *Handler) checkPost(w http.ResponseWriter, r *http.Request) error {
	if err := crossSite(r); err != nil {
		return err
	}
	limit := 3*h.cfg.MaxEventBytes + 64<<10 // data percent-encoded, and the other fields
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge{fmt.Errorf("the form is larger than the limit of %d bytes", limit)}
		}
		return badRequest{fmt.Errorf("the form cannot be read: %w", err)}
	}
	want := h.csrf(r)
	got := r.PostForm.Get("csrf")
	if got == "" || want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return forbidden{errors.New("refused: the form's CSRF token is missing or wrong (reload the page and send it again)")}
	}
	return nil
}

// safeNext returns next if it is a path on this site, else "/": a sign-in
// never sends anyone elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, `\`) {
		return "/"
	}
	for i := range len(next) {
		if next[i] < 0x20 || next[i] == 0x7f {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || u.User != nil {
		return "/"
	}
	if u.Path == "/login" || u.Path == "/logout" {
		return "/"
	}
	return next
}

// toLogin sends a request that is not signed in to the sign-in page, to
// come back to what it asked for.
func (h *Handler) toLogin(w http.ResponseWriter, r *http.Request) {
	next := "/"
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		next = safeNext(r.URL.RequestURI())
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(next), http.StatusSeeOther)
}

type loginView struct {
	Next    string
	Error   string
	TokenOn bool
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if h.auth.token != "" && h.allowedAt(r) {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", "Sign in", "", loginView{Next: next, TokenOn: h.auth.token != ""})
}

// login checks the token in constant time and, when it is right, sets the
// session's cookie and goes where the form says.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if err := crossSite(r); err != nil {
		h.fail(w, r, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBytes)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, badRequest{errors.New("the sign-in form cannot be read")})
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if h.auth.token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	got := r.PostForm.Get("token")
	if subtle.ConstantTimeCompare([]byte(got), []byte(h.auth.token)) != 1 {
		h.cfg.Logger.Warn("sluice: dashboard sign-in with a wrong token", "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login", "Sign in", "", loginView{Next: next, TokenOn: true, Error: "That is not the token. Try again."})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.auth.newSession(h.cfg.Now()), Path: "/",
		MaxAge: int(h.auth.ttl / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}
