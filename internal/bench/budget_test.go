package bench

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// TestFlowBudgetPolicies: on a scenario where one flow has a budget of its
// own, sluice keeps it to the budget on every simulated day; the LiteLLM
// models refuse its calls once the spend they recorded reaches it, so it
// passes the budget by no more than the calls in flight then; the other
// anchors have no flow budgets and spend as they would without one; and
// the flow without a budget does its arrivals under every policy.
func TestFlowBudgetPolicies(t *testing.T) {
	t.Parallel()
	sc := load(t, "flow-budget.yaml")
	budgeted, other := sc.Flows[0], sc.Flows[1]
	budget := budgeted.Budget.Day
	policies := append(append([]string(nil), Policies...), LiteLLMUsage, LiteLLMShuffle)
	rep, err := Run(context.Background(), sc, policies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The most a call of the budgeted flow can cost: a full batch, every
	// max_token used.
	pr := sc.KeyPrice()
	call := float64(pr.Of(governor.Cost{Input: budgeted.PromptTokens + int64(budgeted.BatchMax)*budgeted.ItemInputTokens,
		Output: int64(budgeted.BatchMax) * budgeted.ItemMaxTokens})) / governor.Nano
	arrived := int(other.Arrivals(sc.Duration))
	for _, r := range rep.Results {
		fr := r.Flows[budgeted.Name]
		if fr.Spend == nil || fr.MaxDaySpend == nil || fr.BudgetDay == nil || *fr.BudgetDay != budget {
			t.Errorf("%s: %s's report has spend %v, max day %v, budget %v", r.Policy, budgeted.Name, fr.Spend, fr.MaxDaySpend, fr.BudgetDay)
			continue
		}
		switch r.Policy {
		case forecast.Sluice:
			if *fr.MaxDaySpend > budget {
				t.Errorf("sluice: %s spent %v in a day, over its budget %v", budgeted.Name, *fr.MaxDaySpend, budget)
			}
		case LiteLLMUsage, LiteLLMShuffle:
			if over := budget + litellmConcurrency*call; *fr.MaxDaySpend > over || *fr.MaxDaySpend <= budget/2 {
				t.Errorf("%s: %s spent %v in a day, want about its budget %v (at most %v: the calls in flight when it was spent)",
					r.Policy, budgeted.Name, *fr.MaxDaySpend, budget, over)
			}
		default:
			if fr.Remaining > 0 && *fr.MaxDaySpend <= budget {
				t.Errorf("%s has no flow budgets, but %s kept within one: %v a day, %d items left", r.Policy, budgeted.Name, *fr.MaxDaySpend, fr.Remaining)
			}
		}
		if o := r.Flows[other.Name]; o.Done+o.Remaining != arrived || o.Done == 0 || o.Spend != nil {
			t.Errorf("%s: %s did %d of %d items (spend %v)", r.Policy, other.Name, o.Done, arrived, o.Spend)
		}
	}
}
