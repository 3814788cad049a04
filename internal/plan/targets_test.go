package plan

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
)

// TestPlanTargets: on a scenario with targets the plan gives each target
// the demand the routes give it and its money against its budget, and
// says when the budget runs out.
func TestPlanTargets(t *testing.T) {
	t.Parallel()
	sc, err := forecast.Load("../bench/testdata/groq-two-models-paid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Duration = 48 * time.Hour // two days are enough
	p, err := Make(context.Background(), sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Targets) != 3 {
		t.Fatalf("targets %+v", p.Targets)
	}
	free, paid := p.Targets[0], p.Targets[2]
	if free.Name != "groq-8b" || free.MoneyPerDay != 0 || !free.Unpriced || free.DayBudget != nil || free.ItemsPerDay <= 0 {
		t.Errorf("groq-8b %+v", free)
	}
	if tpd := free.Limits["tpd"]; tpd.Limit != 500000 || tpd.Ratio < 0.9 || tpd.Ratio > 1 {
		t.Errorf("groq-8b's tpd %+v, want its demand close to its limit", tpd)
	}
	if paid.Name != "openai-mini" || paid.BudgetDay != 2 || paid.MoneyPerDay > 2 || paid.MoneyPerDay < 1.9 || math.Abs(paid.Money30Days-paid.MoneyPerDay*30) > 0.001 {
		t.Errorf("openai-mini %+v", paid)
	}
	if paid.DayBudget == nil || paid.DayBudget.RunsOutHours == nil || *paid.DayBudget.RunsOutHours > 24 {
		t.Errorf("openai-mini's day budget %+v, want it run out on the first day", paid.DayBudget)
	}
	found := false
	for _, w := range p.Warnings {
		found = found || strings.HasPrefix(w, "openai-mini: its budget of 2.00 a day runs out")
	}
	if !found {
		t.Errorf("no warning of the budget: %q", p.Warnings)
	}
}

// TestPlanTargetsBudgetLasts: a month's budget that the run does not
// reach is said not to run out, with the days the spend takes to reach it.
func TestPlanTargetsBudgetLasts(t *testing.T) {
	t.Parallel()
	sc, err := forecast.Parse([]byte(`duration: 24h
targets:
  - name: paid
    limits: {rpm: 10}
    price: {input: 1, output: 1}
    budget: {month: 100}
flows:
  - name: a
    arrivals_per_day: 1000
    prompt_tokens: 1000
    item_output_tokens: 100
    item_max_tokens: 200
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Make(context.Background(), sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := p.Targets[0].MonthBudget
	if b == nil || b.RunsOutHours != nil || b.Days == nil || *b.Days < 80 {
		t.Errorf("month budget %+v, want it lasting (1,000 calls of about 0.0011 a day: about 90 days)", b)
	}
}
