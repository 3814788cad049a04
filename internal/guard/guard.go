// Package guard bounds and protects sluice's HTTP servers (serve, gateway,
// sim-provider): deadlines on every phase of a connection, and the checks
// that keep a web page the developer visits from driving a server bound to
// loopback (cross-site requests and DNS rebinding).
//
// A browser can send a cross-site POST only with a "simple" content type
// (text/plain, a form) unless the server approves a CORS preflight, which
// these servers never do; so requiring Content-Type: application/json on
// every request that changes something stops forged requests. A page that
// rebinds its own host name to 127.0.0.1 sends its name as Host; so a
// server on loopback answers only Host names that are loopback (and those
// configured).
package guard

import (
	"cmp"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/httpjson"
)

// Config says how a server is bounded. Every zero field takes its default.
type Config struct {
	// Addr is the address the server listens on. When its host is a
	// loopback address or "localhost", requests must name a loopback host
	// (or one of Hosts) in Host and Origin. Off loopback the Host check
	// applies only when Hosts is set.
	Addr string

	// Hosts are further host names (without port) accepted in Host and
	// Origin, e.g. the name a reverse proxy forwards.
	Hosts []string

	// HeaderTimeout bounds reading a request's headers. Default 10s.
	HeaderTimeout time.Duration

	// BodyTimeout bounds reading a request's body, from the end of its
	// headers; a client that sends it slower is cut off. Default 30s.
	BodyTimeout time.Duration

	// WriteTimeout bounds each write to the client: a client that stops
	// reading (a stream nobody reads) is cut off this long after its
	// buffers fill, which ends the request's context. It does not bound a
	// request's total time, so long waits and streams are fine. Default 30s.
	WriteTimeout time.Duration

	// IdleTimeout bounds how long a kept-alive connection waits for its
	// next request. Default 60s.
	IdleTimeout time.Duration

	// MaxHeaderBytes bounds a request's headers. Default 64 KiB.
	MaxHeaderBytes int

	// Error writes a refusal in the server's own error format. Default:
	// {"error": MESSAGE}.
	Error func(w http.ResponseWriter, status int, message string)

	// Forms, if set, reports whether a request goes to a handler that
	// checks a CSRF token of its own on every form it accepts (a
	// dashboard's): such a request may send a form instead of JSON. Host and
	// Origin are checked all the same. Default nil: JSON only.
	Forms func(r *http.Request) bool
}

// Defaults of Config.
const (
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultBodyTimeout    = 30 * time.Second
	DefaultWriteTimeout   = 30 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultMaxHeaderBytes = 64 << 10
)

// MinTokenLen is the shortest API token or client key a server accepts:
// a short one is guessed in a few requests.
const MinTokenLen = 16

func (c Config) withDefaults() Config {
	c.HeaderTimeout = cmp.Or(c.HeaderTimeout, DefaultHeaderTimeout)
	c.BodyTimeout = cmp.Or(c.BodyTimeout, DefaultBodyTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.MaxHeaderBytes = cmp.Or(c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	if c.Error == nil {
		c.Error = httpjson.Error
	}
	return c
}

// Validate reports a negative timeout or header bound.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"header timeout", c.HeaderTimeout}, {"body timeout", c.BodyTimeout}, {"write timeout", c.WriteTimeout}, {"idle timeout", c.IdleTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s is negative", d.name, d.v)
		}
	}
	if c.MaxHeaderBytes < 0 {
		return fmt.Errorf("max header bytes %d is negative", c.MaxHeaderBytes)
	}
	for _, h := range c.Hosts {
		if h == "" || strings.ContainsAny(h, "/: \t") {
			return fmt.Errorf("allowed host %q: want a bare host name such as sluice.internal", h)
		}
	}
	return nil
}

// NewServer returns an http.Server for h with every deadline of c and the
// checks of Handler in front of h.
func NewServer(h http.Handler, c Config) *http.Server {
	c = c.withDefaults()
	return &http.Server{
		Handler:           Handler(h, c),
		ReadHeaderTimeout: c.HeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		// No ReadTimeout or WriteTimeout: they bound a whole request, and
		// net/http cancels a handler's context when ReadTimeout passes, which
		// would end every long wait for admission and every long stream. The
		// body and each write get their own deadlines instead.
	}
}

// Handler wraps h with c's body and write deadlines and its request checks:
// Host and Origin name an allowed host, and every request but GET, HEAD and
// OPTIONS carries Content-Type: application/json.
func Handler(h http.Handler, c Config) http.Handler {
	c = c.withDefaults()
	hosts := allowedHosts(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hosts != nil {
			if host := hostOnly(r.Host); !hosts.allows(host) {
				c.Error(w, http.StatusMisdirectedRequest, fmt.Sprintf("host %q is not served here: this server answers loopback names%s", clip(host), hosts.also()))
				return
			}
			if o := r.Header.Get("Origin"); o != "" && o != "null" {
				u, err := url.Parse(o)
				if err != nil || !hosts.allows(u.Hostname()) {
					c.Error(w, http.StatusForbidden, fmt.Sprintf("origin %q may not call this server", clip(o)))
					return
				}
			} else if o == "null" {
				c.Error(w, http.StatusForbidden, `origin "null" may not call this server`)
				return
			}
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !isJSON(r.Header.Get("Content-Type")) && (c.Forms == nil || !c.Forms(r) || !isForm(r.Header.Get("Content-Type"))) {
				c.Error(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: %s requests must send Content-Type: application/json", clip(r.Header.Get("Content-Type")), r.Method))
				return
			}
		}
		rc := http.NewResponseController(w)
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			// The deadline ends with the body: a handler that then waits long
			// (for admission, for the provider) must keep its context.
			_ = rc.SetReadDeadline(time.Now().Add(c.BodyTimeout))
			r.Body = &body{ReadCloser: r.Body, rc: rc}
		}
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, d: c.WriteTimeout}
		h.ServeHTTP(dw, r)
		// The response's last bytes are written after the handler returns.
		_ = rc.SetWriteDeadline(time.Now().Add(c.WriteTimeout))
	})
}

// body clears the read deadline once the body has been read to its end.
type body struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// Only a whole body lifts the deadline: after a timeout it must stay,
	// or the server's own read of the rest of the body would wait forever.
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// deadlineWriter gives each write to the client its own deadline.
type deadlineWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	d    time.Duration
	last time.Time // when the deadline was last moved
}

// arm moves the write deadline to now + d. It moves it at most every
// second: the deadline each write gets is between d−1s and d away.
func (w *deadlineWriter) arm() {
	now := time.Now()
	if now.Sub(w.last) >= time.Second {
		w.last = now
		_ = w.rc.SetWriteDeadline(now.Add(w.d))
	}
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// FlushError flushes, reporting a client that stopped reading.
func (w *deadlineWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// CheckBind refuses an address off loopback unless the server has
// authorization: what a caller reaching it over the network would need.
// remedy says how to give it one, e.g. "set SLUICE_API_TOKEN".
func CheckBind(addr string, authorized bool, remedy string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	if authorized || IsLoopback(host) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s, off loopback, without authentication: %s (or bind to 127.0.0.1)", addr, remedy)
}

// IsLoopback reports whether host (no port) names this machine only:
// localhost, 127.0.0.0/8 or ::1.
func IsLoopback(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// CheckToken refuses an API token or client key shorter than MinTokenLen
// or containing white space or control characters. what names it in the
// error, e.g. "SLUICE_API_TOKEN".
func CheckToken(what, token string) error {
	if len(token) < MinTokenLen {
		return fmt.Errorf("%s is %d characters long: a token needs at least %d (e.g. openssl rand -hex 16)", what, len(token), MinTokenLen)
	}
	for _, r := range token {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%s contains white space or a control character", what)
		}
	}
	return nil
}

type hostSet map[string]bool

// allowedHosts is nil when any Host is accepted: off loopback with no
// Hosts configured.
func allowedHosts(c Config) hostSet {
	host, _, err := net.SplitHostPort(c.Addr)
	if (err != nil || !IsLoopback(host)) && len(c.Hosts) == 0 {
		return nil
	}
	s := hostSet{}
	for _, h := range c.Hosts {
		s[strings.ToLower(h)] = true
	}
	return s
}

func (s hostSet) allows(host string) bool {
	return IsLoopback(host) || s[strings.TrimSuffix(strings.ToLower(host), ".")]
}

func (s hostSet) also() string {
	if len(s) == 0 {
		return " (configure more with --allowed-hosts)"
	}
	names := make([]string, 0, len(s))
	for h := range s {
		names = append(names, h)
	}
	return " and " + strings.Join(names, ", ")
}

// hostOnly strips the port from a Host header.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.Trim(h, "[]")
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// isForm reports whether a Content-Type is an HTML form's.
func isForm(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/x-www-form-urlencoded"
}

// clip shortens what a client sent before it is echoed in an error.
func clip(s string) string {
	const n = 100
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
