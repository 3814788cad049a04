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
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/httperr"
)

// Sign-in, sessions and CSRF.
//
// A session is a sign-in the handler keeps in memory, at most maxSessions
// of them, each lasting SessionTTL. Its cookie holds the session's random
// ID and an HMAC-SHA256 of it under a key derived from the token: it names
// no one and holds nothing secret. A cookie works only while its session
// is live: signing out ends it on the server, so the same cookie sent again
// is refused; a restart ends every session, and so does a new token, since
// the key changes. Every form carries a CSRF token, an HMAC of the
// session's cookie under the same key (of "bearer" for a request signed
// with the token itself); without a token, of a fixed text under a key
// drawn at random when the process starts. A POST is refused with 403 when
// its token is missing or wrong, and when it comes from another site (an
// Origin header naming another host, or a Sec-Fetch-Site of cross-site or
// same-site). Wrong tokens are throttled per client address, by the
// throttle the server's other doors share (Config.Throttle).

// sessionCookie is the name of the session's cookie.
const sessionCookie = "sluice_session"

// maxLoginBytes bounds the sign-in form.
const maxLoginBytes = 64 << 10

// maxSessions bounds the live sessions: a sign-in beyond it ends the
// session that would end first.
const maxSessions = 1000

type auth struct {
	token    string
	key      []byte // the MAC key of sessions and CSRF tokens
	ttl      time.Duration
	sessions *sessions
}

func newAuth(token string, ttl time.Duration) (auth, error) {
	a := auth{token: token, ttl: ttl, sessions: &sessions{live: map[string]time.Time{}, max: maxSessions}}
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

// sessions are the live sign-ins, by ID, with when each was issued. Safe
// for simultaneous use.
type sessions struct {
	mu   sync.Mutex
	live map[string]time.Time
	max  int
}

// add records a session issued at now, first dropping those over at now
// and, at the bound, the one issued first.
func (s *sessions) add(id string, now time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) >= s.max {
		oldest, at := "", time.Time{}
		for k, issued := range s.live {
			if !now.Before(issued.Add(ttl)) {
				delete(s.live, k)
			} else if oldest == "" || issued.Before(at) {
				oldest, at = k, issued
			}
		}
		if len(s.live) >= s.max {
			delete(s.live, oldest)
		}
	}
	s.live[id] = now
}

// issued returns when the live session id was issued.
func (s *sessions) issued(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.live[id]
	return at, ok
}

// end ends the session id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, id)
}

func (a auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// right reports, in constant time, whether got is the token.
func (a auth) right(got string) bool {
	return a.token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(a.token)) == 1
}

// bearer reports whether r carries the token as a bearer token. It does
// not go through the throttle, so what it decides is shown only to a
// request signedIn let in: the CSRF token of its forms.
func (a auth) bearer(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && a.right(got)
}

// newSession starts a session at now and returns its cookie's value.
func (a auth) newSession(now time.Time) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("ui: draw a session ID: %w", err)
	}
	id := hex.EncodeToString(b[:])
	a.sessions.add(id, now, a.ttl)
	return id + "." + a.mac("session", id), nil
}

// session returns r's session cookie's value and its session's ID, if the
// session is live at now.
func (a auth) session(r *http.Request, now time.Time) (value, id string, ok bool) {
	if a.token == "" {
		return "", "", false
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", "", false
	}
	id, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(a.mac("session", id))) {
		return "", "", false
	}
	at, ok := a.sessions.issued(id)
	if !ok || now.Before(at.Add(-time.Minute)) || !now.Before(at.Add(a.ttl)) {
		return "", "", false
	}
	return c.Value, id, true
}

// admit reports whether r may see the pages — no token is set, or r is
// signed in, by session or bearer token — and otherwise answers it: with
// 429 when r carries a bearer token from a throttled address, else by
// sending it to the sign-in page.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) bool {
	wait, ok := h.signedIn(r)
	switch {
	case wait > 0:
		h.tooMany(w, r, wait, "/")
	case !ok:
		h.toLogin(w, r)
	}
	return ok
}

// signedIn reports whether r may see the pages: no token is set, or r is
// signed in, by session or bearer token. A bearer token goes through the
// throttle, which refuses it unchecked from a throttled address (wait > 0)
// and counts a wrong one, so that no page is a way around the throttle.
func (h *Handler) signedIn(r *http.Request) (wait time.Duration, ok bool) {
	a := h.auth
	if a.token == "" {
		return 0, true
	}
	if wait, ok := h.throttle.CheckBearer(r, a.right); wait > 0 || ok {
		return wait, ok
	}
	_, _, ok = a.session(r, h.cfg.Now())
	return 0, ok
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
	if s, _, ok := a.session(r, h.cfg.Now()); ok {
		return a.mac("csrf", "session", s)
	}
	return ""
}

// hasSession reports whether r is signed in with a session cookie.
func (h *Handler) hasSession(r *http.Request) bool {
	_, _, ok := h.auth.session(r, h.cfg.Now())
	return ok
}

// crossSite returns an error when r comes from another site.
func crossSite(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return httperr.Forbidden(fmt.Errorf("refused: the form was sent from another site (%s), not %s", o, r.Host))
		}
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return httperr.Forbidden(errors.New("refused: the form was sent from another site"))
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
			return httperr.TooLarge(fmt.Errorf("the form is larger than the limit of %d bytes", limit))
		}
		return httperr.BadRequest(fmt.Errorf("the form cannot be read: %w", err))
	}
	want := h.csrf(r)
	got := r.PostForm.Get("csrf")
	if got == "" || want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return httperr.Forbidden(errors.New("refused: the form's CSRF token is missing or wrong (reload the page and send it again)"))
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

// tooMany answers 429 to a throttled request, with when to try again.
func (h *Handler) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, next string) {
	secs := authlimit.RetryAfter(wait)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	h.render(w, r, http.StatusTooManyRequests, "login", "Sign in", "", loginView{Next: next, TokenOn: true,
		Error: "Too many wrong tokens from your address: try again in " + fmtDur(time.Duration(secs)*time.Second) + "."})
}

type loginView struct {
	Next    string
	Error   string
	TokenOn bool
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if h.auth.token != "" {
		wait, ok := h.signedIn(r)
		if wait > 0 {
			h.tooMany(w, r, wait, next)
			return
		}
		if ok {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
	}
	h.render(w, r, http.StatusOK, "login", "Sign in", "", loginView{Next: next, TokenOn: h.auth.token != ""})
}

// login checks the token in constant time and, when it is right, starts
// a session, sets its cookie and goes where the form says. An address
// that sent too many wrong tokens, here or at another door of the server,
// gets 429 and its token is not checked. A right token clears the
// address's count; a right bearer token does not (see
// authlimit.Throttle.CheckBearer for why).
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if err := crossSite(r); err != nil {
		h.fail(w, r, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBytes)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, httperr.BadRequest(errors.New("the sign-in form cannot be read")))
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if h.auth.token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	wait, ok := h.throttle.Try(r, func() bool { return h.auth.right(r.PostForm.Get("token")) })
	if wait > 0 {
		h.tooMany(w, r, wait, next)
		return
	}
	if !ok {
		h.render(w, r, http.StatusUnauthorized, "login", "Sign in", "", loginView{Next: next, TokenOn: true, Error: "That is not the token. Try again."})
		return
	}
	h.throttle.Succeed(r)
	value, err := h.auth.newSession(h.cfg.Now())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: value, Path: "/",
		MaxAge: int(h.auth.ttl / time.Second), HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends r's session on the server, so its cookie no longer works
// wherever a copy of it is kept, and clears the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) error {
	if _, id, ok := h.auth.session(r, h.cfg.Now()); ok {
		h.auth.sessions.end(id)
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// secure reports whether the session's cookie is marked Secure: r came
// over TLS, or the dashboard's public URL is https.
func (h *Handler) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(h.cfg.PublicURL), "https://")
}

// maxPublicURL bounds a public URL's length.
const maxPublicURL = 2048

// CheckPublicURL returns an error naming what is wrong unless s is an
// absolute http or https URL with a host, and no user, query or fragment:
// the URL people open the dashboard at (Config.PublicURL).
func CheckPublicURL(s string) error {
	if len(s) > maxPublicURL {
		return fmt.Errorf("is %d bytes long: at most %d", len(s), maxPublicURL)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an absolute http:// or https:// URL", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%q: want a host after %s://", s, u.Scheme)
	case u.User != nil:
		return fmt.Errorf("%q: want no user or password in the URL", s)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("%q: want no query or fragment", s)
	}
	return nil
}
