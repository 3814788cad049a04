package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/plan"
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
