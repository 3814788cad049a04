package forecast

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/governor"
)

// budgetBase is a scenario of one key whose flow "a" has a budget of its own.
const budgetBase = `duration: 2h
prices:
  m: {input: 1, output: 2}
provider:
  limits: {rpm: 60}
flows:
  - name: a
    model: m
    budget: {day: 0.5, month: 10}
`

func TestParseFlowBudget(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(budgetBase))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Flows[0].Budget, (governor.Budget{Day: 0.5, Month: 10}); got != want {
		t.Errorf("budget = %+v, want %+v", got, want)
	}
	if got, want := s.KeyPrice(), (governor.Price{Input: 1, Output: 2}); got != want {
		t.Errorf("key price = %+v, want %+v", got, want)
	}
	s.Flows[0].Budget = governor.Budget{}
	if !s.KeyPrice().IsZero() {
		t.Errorf("key price without a flow budget = %+v, want none", s.KeyPrice())
	}
}

// TestSluiceFlowBudget: under sluice's governor, a flow whose budget is
// spent waits for it — its calls never cost more than the budget in any
// 24 hours of the simulation — while a flow without one goes on; without
// the budget, the same flow spends more than it in a day, so the budget is
// what held it.
func TestSluiceFlowBudget(t *testing.T) {
	t.Parallel()
	sc := benchScenario(t, "flow-budget.yaml")
	budgeted, other := sc.Flows[0], sc.Flows[1]
	if budgeted.Budget.Day == 0 || !other.Budget.IsZero() || other.ArrivalsPerDay == 0 {
		t.Fatalf("the scenario must hold a flow with a day budget and one with arrivals and none: %+v", sc.Flows)
	}
	res, err := replaySluice(context.Background(), t, sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fr := res.Flows[budgeted.Name]
	limit := int64(budgeted.Budget.Day * governor.Nano)
	if most := maxWindow(fr.SpendByHour, 24); most > limit || most == 0 {
		t.Errorf("%s spent at most %s in 24 hours, want some and at most its budget, %s", budgeted.Name, governor.FormatMoney(most), governor.FormatMoney(limit))
	}
	for d, m := range fr.SpendByDay {
		if m > budgeted.Budget.Day {
			t.Errorf("%s spent %v on day %d, more than its budget, %v", budgeted.Name, m, d, budgeted.Budget.Day)
		}
	}
	if fr.Remaining == 0 {
		t.Errorf("%s finished its backlog: the budget held nothing back", budgeted.Name)
	}
	if fr.BudgetDay == nil || *fr.BudgetDay != budgeted.Budget.Day || fr.Spend == nil {
		t.Errorf("%s's report has budget %v and spend %v", budgeted.Name, fr.BudgetDay, fr.Spend)
	}
	// The other flow goes on: it does its arrivals to the end.
	or := res.Flows[other.Name]
	arrived := int(other.Arrivals(sc.Duration))
	if or.Done+or.Remaining != arrived || or.Remaining > other.BatchMax {
		t.Errorf("%s did %d of %d items, %d left", other.Name, or.Done, arrived, or.Remaining)
	}
	if n := len(or.DoneByHour); n < 25 || or.DoneByHour[n-1] <= or.DoneByHour[n-25] {
		t.Errorf("%s did nothing in the last day: %v", other.Name, or.DoneByHour)
	}
	if or.Spend != nil {
		t.Errorf("%s has no budget, but its report has a spend", other.Name)
	}

	// A budget it never reaches, so that its spend is reported.
	free := *sc
	free.Flows = append([]Flow(nil), sc.Flows...)
	free.Flows[0].Budget = governor.Budget{Day: governor.MaxBudget}
	res, err = replaySluice(context.Background(), t, &free, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if most := maxWindow(res.Flows[budgeted.Name].SpendByHour, 24); most <= limit {
		t.Errorf("with a budget it never reaches %s spends at most %s in 24 hours, within the budget: the test shows nothing", budgeted.Name, governor.FormatMoney(most))
	}
}

// maxWindow is the largest sum of n consecutive hours of byHour.
func maxWindow(byHour []int64, n int) int64 {
	var sum, most int64
	for h, m := range byHour {
		sum += m
		if h >= n {
			sum -= byHour[h-n]
		}
		most = max(most, sum)
	}
	return most
}
