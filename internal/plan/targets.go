package plan

import (
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/num"
)

// Target is one target's part of a plan of a scenario with targets: the
// demand sluice's routes give it in the simulation, its money per day and
// per 30 days against its budgets, and when a budget runs out.
type Target struct {
	Name  string `json:"name"`
	Model string `json:"model,omitempty"`
	// ItemsPerDay, RequestsPerDay and TokensPerDay are what the routes
	// sent it in the simulation, a day on average; TokensPerDay as the
	// provider charged them.
	ItemsPerDay    float64 `json:"items_per_day"`
	RequestsPerDay float64 `json:"requests_per_day"`
	TokensPerDay   float64 `json:"tokens_per_day"`
	// Limits are its day limits against that demand.
	Limits map[string]Limit `json:"limits"`
	Spend
	Unpriced     bool  `json:"unpriced,omitempty"`
	OutageFailed int64 `json:"outage_failures,omitempty"`
}

// Spend is a target's or a flow's money in the simulation against its
// budgets.
type Spend struct {
	// MoneyPerDay is its spend a day on average, MaxDayMoney its largest
	// day's, Money30Days thirty days at the average.
	MoneyPerDay float64 `json:"money_per_day"`
	MaxDayMoney float64 `json:"max_day_money"`
	Money30Days float64 `json:"money_30_days"`
	BudgetDay   float64 `json:"budget_day,omitempty"`
	BudgetMonth float64 `json:"budget_month,omitempty"`
	DayBudget   *Budget `json:"day_budget,omitempty"`
	MonthBudget *Budget `json:"month_budget,omitempty"`
}

// Budget says whether and when a budget runs out in the simulation.
type Budget struct {
	// RunsOutHours is when the spend of the budget's period (the last 24
	// hours, or the last 30 days) first came within 1 % of it (for a
	// flow's budget, within what its largest call may cost, when that is
	// more), in hours from the start: sluice's governor then holds the
	// target's (the flow's) calls to what the budget frees, and the routes
	// send the rest elsewhere or wait (the flow waits). Null: it did not
	// within the simulation.
	RunsOutHours *float64 `json:"runs_out_hours"`
	// Days is, for a month's budget that did not run out, how many days
	// the average spend a day takes to reach it; null when nothing is
	// spent.
	Days *float64 `json:"days,omitempty"`
}

// budgetFull is the share of a budget at which it counts as run out:
// sluice's governor spends a budget up to it, never past it.
const budgetFull = 0.99

// runsOutAt is what must be spent of budget for it to count as run out:
// budgetFull of it, or less by call, the most one call may cost (its
// worst case, which the governor admits a call on), when that is more.
func runsOutAt(budget, call float64) float64 {
	return budget - max(budget*(1-budgetFull), call)
}

// targets adds the targets' parts from the simulation res of sc.
func (p *Plan) targets(sc *forecast.Scenario, res forecast.Result) {
	days := res.SimulatedHours / 24
	for i, tr := range res.Targets {
		t := &sc.Targets[i]
		pt := Target{Name: tr.Name, Model: tr.Model, Limits: map[string]Limit{},
			ItemsPerDay: round(float64(tr.Done) / days), RequestsPerDay: round(float64(tr.Requests) / days),
			TokensPerDay: round(float64(tr.Tokens) / days), Unpriced: t.Price.IsZero(), OutageFailed: tr.OutageFailures}
		pt.Spend = p.spend(tr.Name, "the routes send the rest to the other targets or wait", tr.Spend, tr.MaxDaySpend, tr.SpendByHour, t.Budget, 0, days)
		for _, l := range []governor.Limit{governor.RPD, governor.TPD} {
			lim := t.Provider.Limits[l]
			if lim == 0 {
				continue
			}
			demand := pt.TokensPerDay
			if l == governor.RPD {
				demand = pt.RequestsPerDay
			}
			pt.Limits[l.String()] = Limit{Limit: lim, Per: "day", Demand: demand, Ratio: ratio(demand, lim), Charged: demand, ChargedRatio: ratio(demand, lim)}
		}
		p.Targets = append(p.Targets, pt)
	}
}

// spend is the money of name (a target or a flow) in the simulation, days
// long: spent in all, on its largest day and by the hour, against budget;
// a budget that runs out (call: the most one call may cost, 0 when
// unknown) is warned of, saying what then becomes of the calls (then).
func (p *Plan) spend(name, then string, spent, maxDay float64, byHour []int64, budget governor.Budget, call, days float64) Spend {
	s := Spend{MoneyPerDay: roundCents(spent / days), MaxDayMoney: roundCents(maxDay), BudgetDay: budget.Day, BudgetMonth: budget.Month}
	s.Money30Days = roundCents(s.MoneyPerDay * 30)
	if budget.Day > 0 {
		s.DayBudget = &Budget{RunsOutHours: runsOut(byHour, 24, runsOutAt(budget.Day, call))}
		if h := s.DayBudget.RunsOutHours; h != nil {
			b := governor.FormatMoney(int64(budget.Day * governor.Nano))
			p.warn("%s: its budget of %s a day runs out %s h in, and then holds it to what the budget frees (%s a day at most): %s",
				name, b, hoursText(*h), b, then)
		}
	}
	if budget.Month > 0 {
		b := &Budget{RunsOutHours: runsOut(byHour, 30*24, runsOutAt(budget.Month, call))}
		if b.RunsOutHours == nil && s.MoneyPerDay > 0 {
			d := round(budget.Month / s.MoneyPerDay)
			b.Days = &d
		}
		s.MonthBudget = b
		if h := b.RunsOutHours; h != nil {
			p.warn("%s: its budget of %s a month runs out %s h in", name, governor.FormatMoney(int64(budget.Month*governor.Nano)), hoursText(*h))
		}
	}
	return s
}

// runsOut is the first hour, counted at its end, at which the spend of the
// last window hours (by the hour each call was sent) reaches full, in
// money; nil when none does.
func runsOut(byHour []int64, window int, full float64) *float64 {
	limit := full * governor.Nano
	var sum int64
	for h, m := range byHour {
		sum += m
		if h >= window {
			sum -= byHour[h-window]
		}
		if float64(sum) >= limit {
			x := float64(h + 1)
			return &x
		}
	}
	return nil
}

func hoursText(h float64) string { return num.Group(int64(h)) }
