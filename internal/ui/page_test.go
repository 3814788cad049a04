package ui_test

import (
	"errors"
	"html/template"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ui"
)

// TestPageOfTheProgram: a page of the program that mounts the dashboard is
// shown in the dashboard's layout, with its headers, its navigation (the
// page's link current), the app's clock named and the live refresh; an
// error of the page is the dashboard's error page.
func TestPageOfTheProgram(t *testing.T) {
	t.Parallel()
	var log logBuffer
	h := newUI(t, ui.Config{AppNow: func() time.Time { return now.Add(50 * time.Hour) },
		Speed: 720, Links: []ui.Link{{Label: "Side by side", Href: "/demo"}}}, &log).(*ui.Handler)
	page := h.Page("Side by side", func(r *http.Request) (template.HTML, error) {
		if r.URL.Query().Get("fail") != "" {
			return "", errors.New("the demo's database is <gone>")
		}
		return `<p class="mine">both sides</p>`, nil
	})
	rec := httptest.NewRecorder()
	page.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/demo", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET /demo: %d, headers %v", rec.Code, rec.Header())
	}
	n := parse(t, body)
	hasText(t, "page", n.one(t, "mine", classed("mine")), "both sides")
	hasText(t, "stamp", n.one(t, "stamp", classed("stamp")), "As of 2026-03-06 14:00:00Z (simulated time, ×720)")
	if a := n.one(t, "link", with("href", "/demo")); a.Attrs["aria-current"] != "page" {
		t.Errorf("the page's link is not current: %v", a.Attrs)
	}
	if m := n.one(t, "main", with("id", "main")); m.Attrs["data-refresh"] == "" {
		t.Error("the page does not refresh itself")
	}
	rec = httptest.NewRecorder()
	page.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/demo?fail=1", nil))
	if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "gone") || !strings.Contains(rec.Body.String(), "reference") {
		t.Errorf("a failing page: %d\n%s", rec.Code, rec.Body)
	}
	if !strings.Contains(log.String(), "gone") {
		t.Errorf("the page's error is not logged:\n%s", log.String())
	}
}
