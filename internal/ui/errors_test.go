package ui_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

// errDatabase is what a database might say: nothing of it may reach a page.
var errDatabase = errors.New(`ERROR: relation "sluice_secret_table" does not exist (SQLSTATE 42P01) at postgres://admin@db.internal`)

func TestFailingSourcesShowAReference(t *testing.T) {
	t.Parallel()
	flows := &fakeHealth{FlowsFunc: func() []health.Flow { return []health.Flow{{Name: "titles", State: health.Progressing}} }}
	for _, tc := range []struct {
		name, path string
		cfg        ui.Config
	}{
		{"samples", "/", ui.Config{
			Keys: func(context.Context, time.Time) []governor.Stats {
				return []governor.Stats{keyStats("groq", map[governor.Limit][2]int64{governor.RPM: {1, 0}}, governor.FlowStats{Name: "f"})}
			},
			History: &fakeHistory{SamplesFunc: func(context.Context, time.Time, time.Time, string) ([]store.Sample, error) { return nil, errDatabase }},
		}},
		{"runs", "/runs", ui.Config{Engine: &fakeEngine{RunsFunc: func(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, errDatabase }}}},
		{"run", "/runs/r1", ui.Config{Engine: &fakeEngine{RunDetailFunc: func(context.Context, string, int) (*engine.RunDetail, error) { return nil, errDatabase }}}},
		{"items", "/flows/titles", ui.Config{Health: flows, Items: &fakeItems{
			RecentItemsFunc: func(context.Context, string, int, store.RecentCursor) ([]store.RecentItem, error) {
				return nil, errDatabase
			},
		}}},
		{"backfill runs", "/flows/titles", ui.Config{Health: flows, Items: &fakeItems{
			RecentItemsFunc:  func(context.Context, string, int, store.RecentCursor) ([]store.RecentItem, error) { return nil, nil },
			BackfillRunsFunc: func(context.Context, string, int) ([]store.BackfillRun, error) { return nil, errDatabase },
		}}},
		{"plan", "/plan", ui.Config{Plan: func(context.Context) (*plan.Plan, error) { return nil, errDatabase }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log logBuffer
			h := newUI(t, tc.cfg, &log)
			res, body := do(t, h, req{path: tc.path})
			if res.StatusCode != http.StatusInternalServerError {
				t.Fatalf("GET %s: %d, want 500", tc.path, res.StatusCode)
			}
			for _, secret := range []string{"sluice_secret_table", "SQLSTATE", "db.internal", "relation"} {
				if strings.Contains(body, secret) {
					t.Errorf("the 500 page shows %q:\n%s", secret, body)
				}
			}
			ref := parse(t, body).one(t, "reference", classed("ref")).text()
			if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(ref) {
				t.Fatalf("reference %q", ref)
			}
			if l := log.String(); !strings.Contains(l, "ref="+ref) || !strings.Contains(l, "sluice_secret_table") {
				t.Errorf("the log does not hold the error under reference %s:\n%s", ref, l)
			}
			// The page still has its navigation.
			if n := parse(t, body).all(func(n node) bool { return n.Name == "nav" }); len(n) != 1 {
				t.Errorf("the 500 page has no navigation")
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	h := newUI(t, ui.Config{}, nil)
	for _, path := range []string{"/nothing", "/flows/a/b", "/assets/nope.css", "/v2"} {
		res, body := do(t, h, req{path: path})
		if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "Not found") || !strings.Contains(body, `<nav`) {
			t.Errorf("GET %s: %d, want the 404 page:\n%s", path, res.StatusCode, body)
		}
	}
}

func TestAssets(t *testing.T) {
	t.Parallel()
	h := newUI(t, ui.Config{}, nil)
	_, body := do(t, h, req{path: "/"})
	page := parse(t, body)
	css := page.one(t, "stylesheet", with("rel", "stylesheet")).Attrs["href"]
	js := page.one(t, "script", func(n node) bool { return n.Name == "script" }).Attrs["src"]
	for _, tc := range []struct{ url, contentType, holds string }{
		{css, "text/css; charset=utf-8", "font-family: system-ui"},
		{js, "text/javascript; charset=utf-8", "data-refresh"},
	} {
		if !regexp.MustCompile(`^/assets/[a-z]+\.(css|js)\?v=[0-9a-f]{12}$`).MatchString(tc.url) {
			t.Errorf("asset URL %q is not versioned", tc.url)
		}
		res, body := do(t, h, req{path: tc.url})
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != tc.contentType ||
			res.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" || !strings.Contains(body, tc.holds) {
			t.Errorf("GET %s: %d, %q, %q", tc.url, res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Cache-Control"))
		}
		// Nothing is fetched from elsewhere.
		if regexp.MustCompile(`https?://|@import|url\(`).MatchString(body) {
			t.Errorf("%s refers to another file", tc.url)
		}
	}
	// Pages are not kept, and allow only the dashboard's own script.
	res, _ := do(t, h, req{path: "/"})
	if res.Header.Get("Cache-Control") != "no-store" || !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") ||
		res.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("page headers %v", res.Header)
	}
	if regexp.MustCompile(`(src|href)="https?://`).MatchString(body) {
		t.Errorf("the page refers to another site")
	}
}

func TestLiveRefresh(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		refresh time.Duration
		want    string
	}{
		{0, "5"},
		{30 * time.Second, "30"},
		{-1, ""},
	} {
		e := &fakeEngine{RunsFunc: func(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, nil }}
		h := newUI(t, ui.Config{Refresh: tc.refresh, Health: &fakeHealth{}, Engine: e}, nil)
		for _, path := range []string{"/", "/flows", "/runs"} {
			_, page := get(t, h, path)
			main := page.one(t, "main", func(n node) bool { return n.Name == "main" })
			if main.Attrs["data-refresh"] != tc.want {
				t.Errorf("Refresh %s: %s refreshes every %q s, want %q", tc.refresh, path, main.Attrs["data-refresh"], tc.want)
			}
		}
	}
	// A form's page never refreshes under the writer's hands.
	_, page := get(t, newUI(t, ui.Config{Sender: &fakeSender{}}, nil), "/send")
	if n := page.all(with("data-refresh", "5")); len(n) != 0 {
		t.Errorf("the send page refreshes itself")
	}
}

func TestConfigIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  ui.Config
		want string
	}{
		{"no engine", ui.Config{}, "Config.Engine is required"},
		{"a negative output limit", ui.Config{Engine: &fakeEngine{}, OutputLimit: -1}, "OutputLimit -1 is negative"},
		{"a negative event size", ui.Config{Engine: &fakeEngine{}, MaxEventBytes: -1}, "MaxEventBytes -1 is negative"},
		{"a negative session", ui.Config{Engine: &fakeEngine{}, SessionTTL: -time.Hour}, "SessionTTL -1h0m0s is negative"},
		{"a refresh too fast", ui.Config{Engine: &fakeEngine{}, Refresh: 100 * time.Millisecond}, "Refresh 100ms is under a second"},
		{"a token with spaces", ui.Config{Engine: &fakeEngine{}, Token: " secret"}, "Token begins or ends with white space"},
	} {
		if _, err := ui.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with %s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := ui.New(ui.Config{Engine: &fakeEngine{}}); err != nil {
		t.Errorf("New with an engine alone: %v", err)
	}
}

func TestPlanPage(t *testing.T) {
	t.Parallel()
	_, page := get(t, newUI(t, ui.Config{}, nil), "/plan")
	hasText(t, "plan page", page, "No plan is configured")

	eta := 30.5
	p := &plan.Plan{
		Scenario: "archive", SimulatedHours: 72,
		Limits: map[string]plan.Limit{
			"tpd": {Limit: 1_000_000, Per: "day", Demand: 1_250_000, Ratio: 1.25, Charged: 1_500_000, ChargedRatio: 1.5, ByFlow: map[string]float64{"titles": 250_000, "summaries": 1_000_000}},
			"rpm": {Limit: 30, Per: "minute", Demand: 12, Ratio: 0.4, Charged: 12, ChargedRatio: 0.4},
		},
		Fit:      []plan.Fit{{Flow: "summaries", Limit: "otpm", BatchMax: 8, Request: 9000, LimitValue: 8000, FitsBatch: 6}},
		Flows:    map[string]plan.Flow{"titles": {Backlog: 1200, EtaHours: &eta, EtaFrom: "simulated", StallRisk: "low"}, "summaries": {Backlog: 50, EtaFrom: "never", StallRisk: "high"}},
		Warnings: []string{"tpd: demand is 125% of the limit"},
	}
	_, page = get(t, newUI(t, ui.Config{Plan: func(context.Context) (*plan.Plan, error) { return p, nil }}, nil), "/plan")
	hasText(t, "plan", page, "archive", "72 h", "tpd: demand is 125% of the limit")
	var limits []string
	for _, r := range page.all(func(n node) bool { return n.Name == "tr" && n.Attrs["data-limit"] != "" }) {
		limits = append(limits, r.Attrs["data-limit"])
	}
	if strings.Join(limits, ",") != "rpm,tpd" {
		t.Errorf("plan limits in order %q, want the governor's", limits)
	}
	hasText(t, "tpd", page.one(t, "tpd", with("data-limit", "tpd")), "1,000,000", "1,250,000", "125%", "150%", "summaries 1,000,000, titles 250,000")
	hasText(t, "fit", page.one(t, "fit", func(n node) bool {
		return n.Name == "tr" && n.Attrs["data-flow"] == "summaries" && strings.Contains(n.text(), "otpm")
	}),
		"summaries otpm 8 9,000 8,000 6")
	hasText(t, "titles", page.one(t, "titles", func(n node) bool { return n.Name == "tr" && n.Attrs["data-flow"] == "titles" }), "1,200", "30.5 h", "simulated", "low")
	hasText(t, "summaries", page.one(t, "summaries plan", func(n node) bool {
		return n.Name == "tr" && n.Attrs["data-flow"] == "summaries" && strings.Contains(n.text(), "never")
	}), "high")
}
