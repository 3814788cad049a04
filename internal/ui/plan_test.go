package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/internal/ui"
)

// TestPlanPageNothingToPlan: when the plan says there is nothing to plan
// yet, even wrapped, the page says why in its own words, escaped, with
// neither a 500 nor a log line nor empty tables; any other error stays a
// 500 (TestFailingSourcesShowAReference).
func TestPlanPageNothingToPlan(t *testing.T) {
	t.Parallel()
	var log logBuffer
	h := newUI(t, ui.Config{Plan: func(context.Context) (*plan.Plan, error) {
		return nil, fmt.Errorf("plan the app: %w", &plan.NothingError{Reason: "key groq has no flows in <the> configuration"})
	}}, &log)
	res, body := do(t, h, req{path: "/plan"})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /plan: %d, want 200:\n%s", res.StatusCode, body)
	}
	hasText(t, "plan page", parse(t, body), "Nothing to plan yet: key groq has no flows in <the> configuration.")
	if strings.Contains(body, "<the>") {
		t.Errorf("the reason is not escaped:\n%s", body)
	}
	for _, unwanted := range []string{"plan the app", "No plan is configured", "No limit.", "No flow."} {
		if strings.Contains(body, unwanted) {
			t.Errorf("the page shows %q:\n%s", unwanted, body)
		}
	}
	if l := log.String(); l != "" {
		t.Errorf("nothing to plan is logged as a failure:\n%s", l)
	}
}

// TestPlanPageMeasuredAndForecast: on a live key, a minute limit whose
// flows the governor paces shows the use measured now, not a demand of 0;
// each flow's measured progress sits beside the forecast ETA, each named
// so, and no column of the simulation's own counts is left unexplained; a
// flow without a cost says why.
func TestPlanPageMeasuredAndForecast(t *testing.T) {
	t.Parallel()
	eta := 95.1
	cost := 1.25
	mk := func(money *plan.Money) *plan.Plan {
		return &plan.Plan{Scenario: "app groq", SimulatedHours: 168, Money: money,
			Limits: map[string]plan.Limit{
				"tpm": {Limit: 8000, Per: "minute", ByFlow: map[string]float64{"summary": 0}},
				"tpd": {Limit: 200000, Per: "day", Demand: 120000, Ratio: 0.6, ByFlow: map[string]float64{"summary": 120000}},
			},
			Flows: map[string]plan.Flow{
				"summary": {Backlog: 568, EtaHours: &eta, EtaFrom: "simulated", StallRisk: "low", Done: 400, Remaining: 168},
				"title":   {Backlog: 10, EtaHours: &eta, EtaFrom: "simulated", StallRisk: "low", CostPerDay: &cost},
			}}
	}
	keys := func(context.Context, time.Time) []governor.Stats {
		var st governor.Stats
		st.Key = "groq"
		st.Limits[governor.TPM] = governor.LimitStats{Limit: governor.TPM, Max: 8000, Used: 5200}
		st.Limits[governor.TPD] = governor.LimitStats{Limit: governor.TPD, Max: 200000, Used: 50000}
		st.Flows = []governor.FlowStats{{Name: "summary"}, {Name: "title"}}
		return []governor.Stats{{Key: "other", Flows: []governor.FlowStats{{Name: "elsewhere"}}}, st}
	}
	summary := health.Flow{Name: "summary", State: health.Progressing, Done: 20, Remaining: 568, RatePerHour: 4}
	fig := progress.Of(summary, now)
	for _, tc := range []struct {
		name    string
		money   *plan.Money
		noPrice string
	}{
		{"priced", &plan.Money{PerDay: 1.25, Unpriced: []string{"summary"}}, "no price for its model"},
		{"no prices", nil, "no price set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := mk(tc.money)
			if tc.money == nil {
				f := p.Flows["title"]
				f.CostPerDay = nil
				p.Flows["title"] = f
			}
			h := newUI(t, ui.Config{Keys: keys, Health: &fakeHealth{FlowsFunc: func() []health.Flow { return []health.Flow{summary} }},
				AppNow: func() time.Time { return now }, Plan: func(context.Context) (*plan.Plan, error) { return p, nil }}, nil)
			_, page := get(t, h, "/plan")
			tpm := page.one(t, "tpm row", with("data-limit", "tpm"))
			if got := tpm.one(t, "tpm demand", classed("demand")).text(); got != "5,200 measured" {
				t.Errorf("tpm demand %q, want the use measured now", got)
			}
			hasText(t, "tpm in use", tpm.one(t, "tpm in use", classed("used")), "5,200 (65%)")
			if got, want := tpm.text(), "tpm minute 8,000 5,200 measured 65% 5,200 measured 65% 5,200 (65%) — each flow takes what the governor admits"; got != want {
				t.Errorf("tpm row %q, want %q", got, want)
			}
			hasText(t, "tpd demand", page.one(t, "tpd row", with("data-limit", "tpd")).one(t, "tpd demand", classed("demand")), "120,000")
			for _, th := range page.all(func(n node) bool { return n.Name == "th" }) {
				if th.text() == "Done" || th.text() == "Remaining" {
					t.Errorf("the page has a bare %q column", th.text())
				}
			}
			row := page.one(t, "summary row", with("data-flow", "summary"))
			hasText(t, "summary row", row, "in 95.1 h (simulated)", fig.Counts(), progress.Rate(fig.RatePerHour), "in "+fig.LeftText(), tc.noPrice)
			hasText(t, "flows table", page.one(t, "flows table", classed("plan-flows")), "ETA (forecast)", "Progress (measured)")
			// Without the key's figures, a paced minute limit says so.
			_, bare := get(t, newUI(t, ui.Config{Plan: func(context.Context) (*plan.Plan, error) { return p, nil }}, nil), "/plan")
			if got := bare.one(t, "tpm row", with("data-limit", "tpm")).text(); got != "tpm minute 8,000 paced — paced — — — each flow takes what the governor admits" {
				t.Errorf("tpm row without the key's figures %q", got)
			}
			if tc.money != nil {
				hasText(t, "title row", page.one(t, "title row", with("data-flow", "title")), "1.25")
			} else {
				hasText(t, "title row", page.one(t, "title row", with("data-flow", "title")), "no price set")
			}
		})
	}
}
