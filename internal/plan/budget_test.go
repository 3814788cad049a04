package plan

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
)

// TestPlanFlowBudget: a flow with a budget of its own is planned against
// it: its money a day and in 30 days, and when the budget runs out. The
// flow's calls cost their input alone (its output is free and empty), so
// what each costs is known exactly. The key would let the flow spend its
// day's budget within its first hours; the governor paces the budget over
// the day instead (an hour's burst, then a call's share of the day apart),
// so it runs out late in its day — once what is left cannot pay for one
// more call — and not in the morning.
func TestPlanFlowBudget(t *testing.T) {
	t.Parallel()
	sc, err := forecast.Parse([]byte(`duration: 26h
prices:
  m: {input: 1, output: 0}
provider:
  latency: 1s
  limits: {rpm: 1}
flows:
  - name: capped
    model: m
    backlog: 1000
    prompt_tokens: 10000
    item_max_tokens: 10
    budget: {day: 1, month: 100}
  - name: free
    model: m
    backlog: 1000
    prompt_tokens: 10000
    item_max_tokens: 10
`))
	if err != nil {
		t.Fatal(err)
	}
	f := sc.Flows[0]
	perCall := float64(f.PromptTokens) * sc.Prices["m"].Input / 1e6
	// Unpaced, the calls the budget pays for before what is left is less
	// than a call go at the flow's half of one call a minute: within hours.
	unpaced := math.Ceil((f.Budget.Day-max(perCall, f.Budget.Day/100))/perCall) * float64(len(sc.Flows)) / 60
	if unpaced > 4 {
		t.Fatalf("the key should let the flow spend its budget in %v h, well before its day ends", unpaced)
	}
	// Paced: the budget less a call, spent at 0.995 of the even pace after
	// an hour's burst, runs out in the day's last hours.
	paced := (f.Budget.Day - perCall - f.Budget.Day/24) / (f.Budget.Day * 0.995 / 24)
	p, err := Make(context.Background(), sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pf := p.Flows[f.Name]
	if pf.Spend == nil || pf.DayBudget == nil || pf.DayBudget.RunsOutHours == nil {
		t.Fatalf("%s's plan has no budget run out: %+v", f.Name, pf)
	}
	if got := *pf.DayBudget.RunsOutHours; got < math.Floor(paced) || got > math.Ceil(paced)+1 {
		t.Errorf("day budget runs out at %v h, want about %.1f h, paced over the day (unpaced it would at %.1f h)", got, paced, unpaced)
	}
	if pf.BudgetDay != f.Budget.Day || pf.BudgetMonth != f.Budget.Month || pf.MaxDayMoney > f.Budget.Day || pf.MaxDayMoney < f.Budget.Day-perCall {
		t.Errorf("%s's money %+v, want its budget %+v spent on its day, never more", f.Name, *pf.Spend, f.Budget)
	}
	days := p.SimulatedHours / 24
	// Over 26 hours the flow spends its first day's budget and, paced,
	// about two hours' share of the next.
	if spent := pf.MoneyPerDay * days; spent < pf.MaxDayMoney-0.01 || spent > pf.MaxDayMoney+f.Budget.Day*3/24+perCall || pf.Money30Days != roundCents(pf.MoneyPerDay*30) {
		t.Errorf("money a day %v (%v in %v days), in 30 days %v; want its largest day, %v, and a paced two hours, and 30 times the day's", pf.MoneyPerDay, spent, days, pf.Money30Days, pf.MaxDayMoney)
	}
	if m := pf.MonthBudget; m == nil || m.RunsOutHours != nil || m.Days == nil || *m.Days != round(f.Budget.Month/pf.MoneyPerDay) {
		t.Errorf("month budget %+v, want it lasting %v days at this rate", m, round(f.Budget.Month/pf.MoneyPerDay))
	}
	found := false
	for _, w := range p.Warnings {
		found = found || strings.HasPrefix(w, "capped: its budget of 1.00 a day runs out")
	}
	if !found {
		t.Errorf("no warning of the budget: %q", p.Warnings)
	}
	// The other flow goes on: it sends its calls to the end.
	if other := p.Flows["free"]; other.Spend != nil || other.Done < int(26*time.Hour/time.Minute)/2 {
		t.Errorf("the flow without a budget did %d items (spend %+v)", other.Done, other.Spend)
	}

	// The JSON has the flow's money beside its other figures, and none
	// for a flow without a budget.
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Flows map[string]map[string]any `json:"flows"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"money_per_day", "money_30_days", "max_day_money", "budget_day", "budget_month", "day_budget", "month_budget"} {
		if _, ok := out.Flows["capped"][k]; !ok {
			t.Errorf("the JSON of a flow with a budget has no %s: %s", k, data)
		}
		if _, ok := out.Flows["free"][k]; ok {
			t.Errorf("the JSON of a flow without a budget has %s", k)
		}
	}
}
