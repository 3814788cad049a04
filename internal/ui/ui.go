// Package ui is sluice's web dashboard: server-rendered pages of every
// provider key's limits, every flow's health and items, the runs and their
// steps, the plan of the running configuration, and a form to send a test
// event.
//
//	GET  /                    overview: each key's limits (and spend, when priced) now and over 24 h, its flows
//	GET  /flows               every flow's health
//	GET  /flows/{name}        one flow: health, latest items (?before_at=&before_key=), latest runs
//	GET  /runs                runs (?function=&status=&event_key=&reason=&since=&until=&limit=)
//	GET  /runs/{id}           a run: its steps, attempts, outputs and errors, its history and timeline
//	POST /runs/{id}/cancel    stop a queued or running run
//	POST /runs/{id}/rerun     re-run from the first step that did not complete, or from_step
//	POST /runs/{id}/replay    send the run's event again under a new ID
//	POST /versions/{v}/resume resume here the unfinished runs of version v
//	POST /versions/{v}/cancel cancel the unfinished runs of version v
//	GET  /plan                the planner's table for the running configuration
//	GET  /send, POST /send    send a test event
//	GET  /login, POST /login  sign in with the token; POST /logout signs out
//	GET  /assets/…            the embedded stylesheet and script
//
// The handler is meant to be mounted at "/", beside the API's /v1/ and the
// health probes. Pages are html/template, so everything that comes from
// outputs, events, errors and names is escaped; charts are the SVG of
// package chart, inlined. Nothing is fetched from elsewhere, and every
// page works without JavaScript: the one script only re-fetches the page
// every few seconds and swaps its main element.
//
// Every list a page shows is bounded (runs by limit, items by page, samples
// by the 24 hours they cover), and read through an index.
package ui

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/run"
)

// Engine is what the dashboard needs of the engine's runs. The times it
// takes and gives are on the app's clock (Config.AppNow).
type Engine interface {
	// Runs lists runs, newest first (the runs page).
	Runs(ctx context.Context, f engine.RunFilter) ([]run.Summary, error)
	// RunDetail returns a run with its steps, outputs cut to outputLimit
	// bytes (the run page).
	RunDetail(ctx context.Context, id string, outputLimit int) (*engine.RunDetail, error)
	// Cancel stops a queued or running run.
	Cancel(ctx context.Context, id string) error
	// Rerun starts a new run from the first step of id that did not
	// complete and returns its ID.
	Rerun(ctx context.Context, id string) (string, error)
	// RerunFrom starts a new run of id from its step from (a number from
	// 1, or a name) and returns its ID.
	RerunFrom(ctx context.Context, id, from string) (string, error)
	// Replay sends the event of run id again under a new ID.
	Replay(ctx context.Context, id string) (engine.Replayed, error)
}

// Sender sends a test event (the send page).
type Sender interface {
	Send(ctx context.Context, ev engine.Event) ([]run.Sent, error)
}

var (
	_ Engine = (*engine.Engine)(nil)
	_ Sender = (*engine.Engine)(nil)
)

// Health is every flow's health (the overview and the flows pages).
type Health interface {
	Flows() []health.Flow
}

var _ Health = (*health.Monitor)(nil)

// History is the flows' samples, minute by minute (the overview's charts
// and rates).
type History interface {
	// Samples returns the samples with since <= At < until, of flow only
	// unless flow is empty.
	Samples(ctx context.Context, since, until time.Time, flow string) ([]store.Sample, error)
}

// Items is a backfill's records (the flow page).
type Items interface {
	// RecentItems returns a page of backfill's items by their latest
	// activity, newest first; an error wrapping store.ErrNoJob for a
	// backfill with no job.
	RecentItems(ctx context.Context, backfill string, limit int, before store.RecentCursor) ([]store.RecentItem, error)
	// BackfillRuns returns backfill's latest runs, newest first.
	BackfillRuns(ctx context.Context, backfill string, limit int) ([]store.BackfillRun, error)
}

var (
	_ History = store.Store(nil)
	_ Items   = store.Store(nil)
)

// Config configures the dashboard. Engine is required; every other zero
// value is a useful default.
type Config struct {
	// Engine lists, shows, cancels and re-runs runs. Required.
	Engine Engine
	// Versions are the unfinished runs of versions other than the app's:
	// the overview and the runs page show a notice per version, with
	// buttons to resume them here or cancel them. Default nil: no notice.
	Versions Versions
	// Sender sends the send page's test events. Default nil: the send page
	// says sending is not available.
	Sender Sender
	// Health is every flow's health. Default nil: no flows.
	Health Health
	// Keys returns every provider key's governor statistics at now, for
	// the overview's gauges, reading what it needs under ctx (the page's
	// request). Default nil: no keys.
	Keys func(ctx context.Context, now time.Time) []governor.Stats
	// Cluster returns, on a process of a cluster, what every process of
	// it last said of its flows on the key named key (governor.Stats.Key),
	// for the overview's table of the cluster's flows. Default nil, or no
	// rows: no such table.
	Cluster func(ctx context.Context, key string) ([]ClusterFlow, error)
	// History reads the samples behind the overview's 24 h charts and
	// rates. Default nil: no charts and no rates.
	History History
	// Items reads the flow page's items and backfill runs. Default nil: the
	// flow page shows neither.
	Items Items
	// Plan returns the plan of the running configuration. Default nil: the
	// plan page says no plan is configured.
	Plan func(ctx context.Context) (*plan.Plan, error)
	// ClientRetries returns, by key, what the gateway's callers did after
	// its own 429s (the flows page). Default nil: no such table.
	ClientRetries func() map[string][]metrics.ClientRetries
	// Functions lists the app's functions, backfills and YAML jobs (the
	// functions page). Default nil: the page says the list is not
	// available.
	Functions httpapi.Functions
	// Token, when set, is needed for every page but /login and /assets/:
	// signed in with it (a session cookie), or sent as "Authorization:
	// Bearer TOKEN". It never appears in pages, cookies or logs. Default
	// "": no sign-in, for a dashboard served on loopback only.
	Token string
	// SessionTTL is how long a sign-in lasts (default 12 h).
	SessionTTL time.Duration
	// PublicURL is the URL people open the dashboard at, when a proxy in
	// front of it terminates TLS (https://sluice.example.com): an https
	// URL marks the session cookie Secure although the proxy speaks plain
	// HTTP to the dashboard. Default "": Secure when the request came over
	// TLS. See CheckPublicURL.
	PublicURL string
	// OutputLimit bounds each step output and run output a run's page
	// shows (default 4096 bytes); a longer one is cut and the cut says so.
	OutputLimit int
	// MaxEventBytes bounds a test event's data (default 1 MiB, as the
	// API's events); larger data is refused with 413 naming the limit.
	MaxEventBytes int64
	// Refresh is how often a page with live figures re-fetches itself
	// when JavaScript runs (default 5 s; negative: never). At least a
	// second.
	Refresh time.Duration
	// Now is the wall clock, of sessions and of the throttle New makes,
	// against which the pages tell whether AppNow is another (default
	// time.Now).
	Now func() time.Time
	// Throttle counts the wrong tokens of the sign-in form and of bearer
	// tokens on the pages, and refuses a throttled address with 429: the
	// one every other door of the server that checks a token shares, so
	// that an address throttled at one is throttled at all. Default: one
	// of the dashboard's own, on Now and logging to Logger.
	Throttle *authlimit.Throttle
	// Links are further entries of the navigation, after the dashboard's
	// own, to pages of the program that mounts it. Each Href must be a
	// path on the same server ("/demo").
	Links []Link
	// AppNow is the app's clock (sluice.Config.Now), which every page's
	// times are on: the governors' figures, the backfills' samples, and the
	// runs, which the Engine shows on it too (default Now).
	AppNow func() time.Time
	// Speed is how many times as fast as the wall clock AppNow runs
	// (sluice.Config.Speed; default 1): the pages name a clock that is not
	// the wall clock ("simulated time, ×720").
	Speed float64
	// Logger receives the errors behind 500 pages, with the reference the
	// page shows (default slog.Default()).
	Logger *slog.Logger
}

// The defaults of Config.
const (
	DefaultSessionTTL    = 12 * time.Hour
	DefaultOutputLimit   = 4096
	DefaultMaxEventBytes = 1 << 20
	DefaultRefresh       = 5 * time.Second
)

func (c *Config) validate() error {
	switch {
	case c.Engine == nil:
		return errors.New("ui: Config.Engine is required")
	case c.SessionTTL < 0:
		return fmt.Errorf("ui: SessionTTL %s is negative", c.SessionTTL)
	case c.OutputLimit < 0:
		return fmt.Errorf("ui: OutputLimit %d is negative", c.OutputLimit)
	case c.MaxEventBytes < 0:
		return fmt.Errorf("ui: MaxEventBytes %d is negative", c.MaxEventBytes)
	case c.Refresh > 0 && c.Refresh < time.Second:
		return fmt.Errorf("ui: Refresh %s is under a second", c.Refresh)
	case strings.TrimSpace(c.Token) != c.Token:
		return errors.New("ui: Token begins or ends with white space")
	}
	if c.PublicURL != "" {
		if err := CheckPublicURL(c.PublicURL); err != nil {
			return fmt.Errorf("ui: PublicURL %w", err)
		}
	}
	for _, l := range c.Links {
		if l.Label == "" || !strings.HasPrefix(l.Href, "/") || strings.HasPrefix(l.Href, "//") {
			return fmt.Errorf("ui: link %q to %q: want a label and a path on this server", l.Label, l.Href)
		}
	}
	c.SessionTTL = cmp.Or(c.SessionTTL, DefaultSessionTTL)
	c.OutputLimit = cmp.Or(c.OutputLimit, DefaultOutputLimit)
	c.MaxEventBytes = cmp.Or(c.MaxEventBytes, DefaultMaxEventBytes)
	c.Refresh = cmp.Or(c.Refresh, DefaultRefresh)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AppNow == nil {
		c.AppNow = c.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets/*
var assetFS embed.FS

// Handler serves the dashboard. Build it with New.
type Handler struct {
	cfg    Config
	mux    *http.ServeMux
	pages  map[string]*template.Template // by page name
	assets map[string]asset              // by file name
	auth   auth
	// throttle counts wrong tokens per client address (Config.Throttle).
	throttle *authlimit.Throttle
}

// asset is an embedded file with its content type and version.
type asset struct {
	body        []byte
	contentType string
	version     string // of its content: the URL's ?v=, so a new one is fetched
}

// New returns the dashboard's handler, or an error naming what in cfg is
// wrong.
func New(cfg Config) (*Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, assets: map[string]asset{}}
	var err error
	if h.auth, err = newAuth(cfg.Token, cfg.SessionTTL); err != nil {
		return nil, err
	}
	h.throttle = cfg.Throttle
	if h.throttle == nil {
		h.throttle = authlimit.New(authlimit.Config{Logger: cfg.Logger, Now: cfg.Now})
	}
	if err := h.loadAssets(); err != nil {
		return nil, err
	}
	if h.pages, err = parsePages(h.assetURL); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", h.page(h.overview))
	mux.Handle("GET /flows", h.page(h.flows))
	mux.Handle("GET /flows/{name}", h.page(h.flow))
	mux.Handle("GET /runs", h.page(h.runs))
	mux.Handle("GET /runs/{id}", h.page(h.run))
	mux.Handle("POST /runs/{id}/cancel", h.form(h.cancel))
	mux.Handle("POST /runs/{id}/rerun", h.form(h.rerun))
	mux.Handle("POST /runs/{id}/replay", h.form(h.replay))
	mux.Handle("POST /versions/{version}/resume", h.form(h.moveVersion(true)))
	mux.Handle("POST /versions/{version}/cancel", h.form(h.moveVersion(false)))
	mux.Handle("GET /plan", h.page(h.plan))
	mux.Handle("GET /functions", h.page(h.functions))
	mux.Handle("GET /send", h.page(h.sendForm))
	mux.Handle("POST /send", h.form(h.send))
	mux.HandleFunc("GET /login", h.loginForm)
	mux.HandleFunc("POST /login", h.login)
	mux.Handle("POST /logout", h.form(h.logout))
	mux.HandleFunc("GET /assets/{file}", h.asset)
	mux.Handle("/", h.page(func(w http.ResponseWriter, r *http.Request) error {
		return httperr.NotFound(fmt.Errorf("there is no page at %s", r.URL.Path))
	}))
	h.mux = mux
	return h, nil
}

// ServeHTTP serves the dashboard's pages.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secureHeaders(w.Header())
	h.mux.ServeHTTP(w, r)
}

// secureHeaders sets the headers every page of the dashboard is served
// with.
func secureHeaders(hd http.Header) {
	// Nothing but the dashboard's own files: no inline script, no frames.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
}

func (h *Handler) loadAssets() error {
	return fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := assetFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // the system's MIME table may lack them, or differ
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		h.assets[path.Base(p)] = asset{body: body, contentType: ct, version: hex.EncodeToString(sum[:6])}
		return nil
	})
}

// assetURL is the versioned URL of an embedded file.
func (h *Handler) assetURL(name string) string {
	return "/assets/" + name + "?v=" + h.assets[name].version
}

// asset serves an embedded file. Its URL changes with its content, so it
// may be kept for a year.
func (h *Handler) asset(w http.ResponseWriter, r *http.Request) {
	a, ok := h.assets[r.PathValue("file")]
	if !ok {
		h.fail(w, r, httperr.NotFound(fmt.Errorf("there is no asset %s", r.PathValue("file"))))
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.Header().Set("ETag", `"`+a.version+`"`)
	if r.Header.Get("If-None-Match") == `"`+a.version+`"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(a.body)
}

// A page handler renders its page, or returns the error to show instead.
type pageFunc func(w http.ResponseWriter, r *http.Request) error

// page serves a page that needs a sign-in when a token is set.
func (h *Handler) page(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.admit(w, r) {
			return
		}
		if err := fn(w, r); err != nil {
			h.fail(w, r, err)
		}
	})
}

// form serves a POST of a page's form: signed in, from this site, with the
// form's CSRF token.
func (h *Handler) form(fn pageFunc) http.Handler {
	return h.page(func(w http.ResponseWriter, r *http.Request) error {
		if err := h.checkPost(w, r); err != nil {
			return err
		}
		return fn(w, r)
	})
}

// errorView is the error page's content.
type errorView struct {
	Status  int
	Heading string
	Message string
	Ref     string // the log line's reference, for a 500
}

// fail shows err's page. A 500's page gives a reference to the log line
// that holds the error, never its text, which may quote SQL or the
// database's own words.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := httperr.Status(err)
	v := errorView{Status: status, Heading: http.StatusText(status), Message: err.Error()}
	if status == http.StatusInternalServerError {
		v.Ref = newRef()
		v.Message = ""
		h.cfg.Logger.Error("sluice: dashboard request failed", "ref", v.Ref, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusNotFound {
		v.Heading = "Not found"
	}
	h.render(w, r, status, "error", v.Heading, "", v)
}

func newRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// view is what the layout shows around a page.
type view struct {
	Title    string
	Nav      string    // the navigation entry of the page
	CSRF     string    // the token every form of the page carries
	SignOut  bool      // signed in with a session: the sign-out button shows
	Refresh  int       // seconds between live refreshes; 0: none
	Now      time.Time // on the app's clock
	Clock    string    // names the app's clock when it is not the wall clock
	Path     string    // of the request: a link of Config.Links to it is the current page
	at       time.Time // when the page's figures were read on the app's clock; zero: now
	Data     any
	AssetCSS string
	AssetJS  string
	Links    []Link
}

// Link is an entry of the navigation to a page the program that mounts
// the dashboard serves itself.
type Link struct {
	Label string
	Href  string // a path on the same server, such as "/demo"
}

// render writes page name with data, or a 500 page if it cannot be
// rendered. live pages refresh themselves.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) {
	h.renderView(w, r, status, name, view{Title: title, Nav: nav, Data: data})
}

// renderLive is render for a page whose figures change: it refreshes itself.
func (h *Handler) renderLive(w http.ResponseWriter, r *http.Request, name, title, nav string, data any) {
	h.renderLiveAt(w, r, name, title, nav, data, time.Time{})
}

// renderLiveAt is renderLive for a page whose figures were read at at, a
// time of the app's clock: its stamp says that time.
func (h *Handler) renderLiveAt(w http.ResponseWriter, r *http.Request, name, title, nav string, data any, at time.Time) {
	v := view{Title: title, Nav: nav, Data: data, at: at}
	if h.cfg.Refresh > 0 {
		v.Refresh = int(h.cfg.Refresh / time.Second)
	}
	h.renderView(w, r, http.StatusOK, name, v)
}

func (h *Handler) renderView(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	v.CSRF = h.csrf(r)
	v.SignOut = h.hasSession(r)
	v.Now = v.at
	if v.Now.IsZero() {
		v.Now = h.cfg.AppNow()
	}
	v.Now = v.Now.UTC()
	v.Clock = clock.Label(h.cfg.Speed, v.Now, h.cfg.Now())
	v.Links, v.Path = h.cfg.Links, r.URL.Path
	v.AssetCSS, v.AssetJS = h.assetURL("style.css"), h.assetURL("live.js")
	var b bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&b, "layout", v); err != nil {
		ref := newRef()
		h.cfg.Logger.Error("sluice: dashboard page cannot be rendered", "ref", ref, "page", name, "path", r.URL.Path, "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "internal error (reference %s in the server's log)\n", ref)
		return
	}
	out := b.Bytes()
	if !utf8.Valid(out) {
		// Text from outputs or errors that is not UTF-8 shows as U+FFFD,
		// as the page says its charset is.
		out = bytes.ToValidUTF8(out, []byte("\uFFFD"))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}
