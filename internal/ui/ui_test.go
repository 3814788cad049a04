package ui_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

// now is the fixed time of every test's dashboard.
var now = time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)

// The fakes answer with their Func fields; a call to one without a Func
// is an error the page shows, so a test that did not expect it fails.

type fakeEngine struct {
	RunsFunc      func(ctx context.Context, f engine.RunFilter) ([]run.Summary, error)
	RunDetailFunc func(ctx context.Context, id string, outputLimit int) (*engine.RunDetail, error)
	CancelFunc    func(ctx context.Context, id string) error
	RerunFunc     func(ctx context.Context, id string) (string, error)
	RerunFromFunc func(ctx context.Context, id, from string) (string, error)
	ReplayFunc    func(ctx context.Context, id string) (engine.Replayed, error)
}

var errUnexpected = errors.New("fake: unexpected call")

func (f *fakeEngine) Runs(ctx context.Context, fl engine.RunFilter) ([]run.Summary, error) {
	if f.RunsFunc == nil {
		return nil, errUnexpected
	}
	return f.RunsFunc(ctx, fl)
}

func (f *fakeEngine) RunDetail(ctx context.Context, id string, limit int) (*engine.RunDetail, error) {
	if f.RunDetailFunc == nil {
		return nil, errUnexpected
	}
	return f.RunDetailFunc(ctx, id, limit)
}

func (f *fakeEngine) Cancel(ctx context.Context, id string) error {
	if f.CancelFunc == nil {
		return errUnexpected
	}
	return f.CancelFunc(ctx, id)
}

func (f *fakeEngine) Rerun(ctx context.Context, id string) (string, error) {
	if f.RerunFunc == nil {
		return "", errUnexpected
	}
	return f.RerunFunc(ctx, id)
}

func (f *fakeEngine) RerunFrom(ctx context.Context, id, from string) (string, error) {
	if f.RerunFromFunc == nil {
		return "", errUnexpected
	}
	return f.RerunFromFunc(ctx, id, from)
}

func (f *fakeEngine) Replay(ctx context.Context, id string) (engine.Replayed, error) {
	if f.ReplayFunc == nil {
		return engine.Replayed{}, errUnexpected
	}
	return f.ReplayFunc(ctx, id)
}

type fakeSender struct {
	SendFunc func(ctx context.Context, ev engine.Event) ([]run.Sent, error)
}

func (f *fakeSender) Send(ctx context.Context, ev engine.Event) ([]run.Sent, error) {
	if f.SendFunc == nil {
		return nil, errUnexpected
	}
	return f.SendFunc(ctx, ev)
}

type fakeHealth struct {
	FlowsFunc func() []health.Flow
}

func (f *fakeHealth) Flows() []health.Flow {
	if f.FlowsFunc == nil {
		return nil
	}
	return f.FlowsFunc()
}

type fakeHistory struct {
	SamplesFunc func(ctx context.Context, since, until time.Time, flow string) ([]store.Sample, error)
}

func (f *fakeHistory) Samples(ctx context.Context, since, until time.Time, flow string) ([]store.Sample, error) {
	if f.SamplesFunc == nil {
		return nil, errUnexpected
	}
	return f.SamplesFunc(ctx, since, until, flow)
}

type fakeItems struct {
	RecentItemsFunc  func(ctx context.Context, backfill string, limit int, before store.RecentCursor) ([]store.RecentItem, error)
	BackfillRunsFunc func(ctx context.Context, backfill string, limit int) ([]store.BackfillRun, error)
}

func (f *fakeItems) RecentItems(ctx context.Context, backfill string, limit int, before store.RecentCursor) ([]store.RecentItem, error) {
	if f.RecentItemsFunc == nil {
		return nil, errUnexpected
	}
	return f.RecentItemsFunc(ctx, backfill, limit, before)
}

func (f *fakeItems) BackfillRuns(ctx context.Context, backfill string, limit int) ([]store.BackfillRun, error) {
	if f.BackfillRunsFunc == nil {
		return nil, errUnexpected
	}
	return f.BackfillRunsFunc(ctx, backfill, limit)
}

var (
	_ ui.Engine  = (*fakeEngine)(nil)
	_ ui.Sender  = (*fakeSender)(nil)
	_ ui.Health  = (*fakeHealth)(nil)
	_ ui.History = (*fakeHistory)(nil)
	_ ui.Items   = (*fakeItems)(nil)
)

// logBuffer collects a logger's lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newUI builds the dashboard on cfg, with the test's clock and a logger
// into log (nil: discarded) unless cfg has its own.
func newUI(t *testing.T, cfg ui.Config, log *logBuffer) http.Handler {
	t.Helper()
	if cfg.Engine == nil {
		cfg.Engine = &fakeEngine{}
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return now }
	}
	if cfg.Logger == nil {
		var w io.Writer = io.Discard
		if log != nil {
			w = log
		}
		cfg.Logger = slog.New(slog.NewTextHandler(w, nil))
	}
	h, err := ui.New(cfg)
	if err != nil {
		t.Fatalf("ui.New: %v", err)
	}
	return h
}

// req is a request to make of the dashboard.
type req struct {
	method, path string
	form         url.Values
	header       map[string]string
	cookies      []*http.Cookie
	tls          bool
	remote       string // the client's address (default httptest's 192.0.2.1:1234)
}

// do serves r and returns the response and its body.
func do(t *testing.T, h http.Handler, r req) (*http.Response, string) {
	t.Helper()
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	hr := httptest.NewRequest(method, r.path, body)
	if r.tls {
		hr = httptest.NewRequest(method, "https://example.com"+r.path, body)
	}
	if r.form != nil {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	for _, c := range r.cookies {
		hr.AddCookie(c)
	}
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, hr)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// get serves a GET of path and fails t unless it answers 200.
func get(t *testing.T, h http.Handler, path string) (*http.Response, node) {
	t.Helper()
	res, body := do(t, h, req{path: path})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, want 200:\n%s", path, res.StatusCode, body)
	}
	return res, parse(t, body)
}

// csrfOf is the CSRF token of the first form of a page.
var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field in the page:\n%s", body)
	}
	return m[1]
}

// node is an element of a page, as encoding/xml reads HTML leniently.
type node struct {
	Name     string
	Attrs    map[string]string
	Children []*node
	Text     string // the text directly inside it
}

// parse reads a page into its elements, failing t if it is not even
// lenient HTML.
func parse(t *testing.T, body string) node {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(body))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	root := node{Name: "#root"}
	stack := []*node{&root}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the page does not parse: %v\n%s", err, body)
		}
		top := stack[len(stack)-1]
		switch tk := tok.(type) {
		case xml.StartElement:
			n := &node{Name: tk.Name.Local, Attrs: map[string]string{}}
			for _, a := range tk.Attr {
				n.Attrs[a.Name.Local] = a.Value
			}
			top.Children = append(top.Children, n)
			stack = append(stack, n)
		case xml.EndElement:
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
		case xml.CharData:
			top.Text += string(tk)
			top.Children = append(top.Children, &node{Name: "#text", Text: string(tk)})
		}
	}
	return root
}

// all returns the elements at or below n for which ok holds, in order.
func (n node) all(ok func(node) bool) []node {
	var out []node
	if ok(n) {
		out = append(out, n)
	}
	for _, c := range n.Children {
		out = append(out, c.all(ok)...)
	}
	return out
}

// with is the predicate of elements whose attribute name is value.
func with(name, value string) func(node) bool {
	return func(n node) bool { v, ok := n.Attrs[name]; return ok && v == value }
}

// classed is the predicate of elements of class c.
func classed(c string) func(node) bool {
	return func(n node) bool {
		for _, f := range strings.Fields(n.Attrs["class"]) {
			if f == c {
				return true
			}
		}
		return false
	}
}

// one returns the one element below n for which ok holds, failing t if
// there is none or more.
func (n node) one(t *testing.T, what string, ok func(node) bool) node {
	t.Helper()
	got := n.all(ok)
	if len(got) != 1 {
		t.Fatalf("%d elements %s, want 1", len(got), what)
	}
	return got[0]
}

// text is all the text inside n, its runs of space made one.
func (n node) text() string {
	var b strings.Builder
	var walk func(node)
	walk = func(m node) {
		if m.Name == "#text" {
			b.WriteString(m.Text)
			b.WriteByte(' ')
		}
		for _, c := range m.Children {
			walk(*c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// hasText fails t unless n's text holds each of want.
func hasText(t *testing.T, what string, n node, want ...string) {
	t.Helper()
	got := n.text()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: text %q lacks %q", what, got, w)
		}
	}
}

// keyStats is a key's governor stats with limits (limit → max, used) and
// flows.
func keyStats(key string, limits map[governor.Limit][2]int64, flows ...governor.FlowStats) governor.Stats {
	s := governor.Stats{Key: key, Flows: flows}
	for l, v := range limits {
		s.Limits[l] = governor.LimitStats{Limit: l, Max: v[0], Used: v[1], Capacity: max(v[0]-v[1], 0), ResetAt: now.Add(l.Period() / 2)}
	}
	return s
}

// The program mounting the dashboard adds its own pages to the navigation;
// a link off the server is refused.
func TestNavigationLinks(t *testing.T) {
	t.Parallel()
	h := newUI(t, ui.Config{Links: []ui.Link{{Label: "Side by side", Href: "/demo"}}}, nil)
	_, page := get(t, h, "/")
	nav := page.one(t, "the navigation", func(n node) bool { return n.Name == "nav" })
	if links := nav.all(with("href", "/demo")); len(links) != 1 || links[0].text() != "Side by side" {
		t.Fatalf("the navigation has %d links to /demo, want one named Side by side", len(links))
	}
	for _, l := range []ui.Link{{Label: "x", Href: "https://elsewhere.example/"}, {Label: "x", Href: "//elsewhere"}, {Href: "/demo"}} {
		if _, err := ui.New(ui.Config{Engine: &fakeEngine{}, Links: []ui.Link{l}}); err == nil {
			t.Errorf("link %+v accepted", l)
		}
	}
}

// Every page reads the app's clock, which may run ahead of the wall clock
// (a rehearsal in compressed time): the runs' pages too, whose runs the
// engine gives on that clock. A search back from now goes back from its
// now, and a run under way has run until its now.
func TestPagesReadTheirClock(t *testing.T) {
	t.Parallel()
	wall := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	app := wall.Add(36 * time.Hour)
	running := run.Summary{ID: "summarize:doc/1", Function: "summarize", Status: run.Running, CreatedAt: app.Add(-10 * time.Minute), StartedAt: app.Add(-10 * time.Minute)}
	var since time.Time
	h := newUI(t, ui.Config{Now: func() time.Time { return wall }, AppNow: func() time.Time { return app },
		Engine: &fakeEngine{
			RunsFunc: func(_ context.Context, f engine.RunFilter) ([]run.Summary, error) {
				since = f.Since
				return []run.Summary{running}, nil
			},
			RunDetailFunc: func(context.Context, string, int) (*engine.RunDetail, error) {
				return &engine.RunDetail{Summary: running}, nil
			},
		}}, nil)
	for _, path := range []string{"/", "/flows", "/runs?since=1h", "/runs/" + url.PathEscape(running.ID)} {
		_, page := get(t, h, path)
		stamp := page.one(t, path+"'s stamp", classed("stamp"))
		if got := stamp.all(func(n node) bool { return n.Name == "time" }); len(got) != 1 || got[0].Attrs["datetime"] != app.Format(time.RFC3339) {
			t.Errorf("%s is as of %v, want %s", path, got, app.Format(time.RFC3339))
		}
		// How long the run under way has taken, on the runs' list and its
		// page.
		var took []node
		switch {
		case strings.HasPrefix(path, "/runs?"):
			took = page.one(t, "the run's row", with("data-run", running.ID)).all(func(n node) bool { return n.Name == "td" })[6:7]
		case strings.HasPrefix(path, "/runs/"):
			took = page.one(t, "the run's facts", classed("facts")).all(func(n node) bool { return n.Name == "div" && strings.HasPrefix(n.text(), "Took") })
		}
		for _, n := range took {
			if !strings.HasSuffix(n.text(), "10m 0s") {
				t.Errorf("%s: the run under way took %q, want 10m 0s", path, n.text())
			}
		}
	}
	if want := app.Add(-time.Hour); !since.Equal(want) {
		t.Errorf("since=1h searched from %s, want %s: an hour back on the app's clock", since, want)
	}
}
