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
	// MoneyPerDay is its spend a day on average, MaxDayMoney its largest
	// day's, Money30Days thirty days at the average.
	MoneyPerDay  float64 `json:"money_per_day"`
	MaxDayMoney  float64 `json:"max_day_money"`
	Money30Days  float64 `json:"money_30_days"`
	BudgetDay    float64 `json:"budget_day,omitempty"`
	BudgetMonth  float64 `json:"budget_month,omitempty"`
	DayBudget    *Budget `json:"day_budget,omitempty"`
	MonthBudget  *Budget `json:"month_budget,omitempty"`
	Unpriced     bool    `json:"unpriced,omitempty"`
	OutageFailed int64   `json:"outage_failures,omitempty"`
}

// Budget says whether and when a budget runs out in the simulation.
type Budget struct {
	// RunsOutHours is when the spend of the budget's period (the last 24
	// hours, or the last 30 days) first came within 1 % of it, in hours
	// from the start: sluice's governor then holds the target's calls to
	// what the budget frees, and the routes send the rest elsewhere or
	// wait. Null: it did not within the simulation.
	RunsOutHours *float64 `json:"runs_out_hours"`
	// Days is, for a month's budget that did not run out, how many days
	// the average spend a day takes to reach it; null when nothing is
	// spent.
	Days *float64 `json:"days,omitempty"`
}

// budgetFull is the share of a budget at which it counts as run out:
// sluice's governor spends a budget up to it, never past it.
const budgetFull = 0.99

// targets adds the targets' parts from the simulation res of sc.
func (p *Plan) targets(sc *forecast.Scenario, res forecast.Result) {
	days := res.SimulatedHours / 24
	for i, tr := range res.Targets {
		t := &sc.Targets[i]
		pt := Target{Name: tr.Name, Model: tr.Model, Limits: map[string]Limit{},
			ItemsPerDay: round(float64(tr.Done) / days), RequestsPerDay: round(float64(tr.Requests) / days),
			TokensPerDay: round(float64(tr.Tokens) / days), MoneyPerDay: roundCents(tr.Spend / days),
			MaxDayMoney: roundCents(tr.MaxDaySpend), BudgetDay: t.Budget.Day, BudgetMonth: t.Budget.Month,
			Unpriced: t.Price.IsZero(), OutageFailed: tr.OutageFailures}
		pt.Money30Days = roundCents(pt.MoneyPerDay * 30)
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
		if t.Budget.Day > 0 {
			pt.DayBudget = &Budget{RunsOutHours: runsOut(tr.SpendByHour, 24, t.Budget.Day)}
			if h := pt.DayBudget.RunsOutHours; h != nil {
				p.warn("%s: its budget of %s a day runs out %s h in, and then holds it to what the budget frees (%s a day at most): the routes send the rest to the other targets or wait",
					tr.Name, governor.FormatMoney(int64(t.Budget.Day*governor.Nano)), hoursText(*h), governor.FormatMoney(int64(t.Budget.Day*governor.Nano)))
			}
		}
		if t.Budget.Month > 0 {
			b := &Budget{RunsOutHours: runsOut(tr.SpendByHour, 30*24, t.Budget.Month)}
			if b.RunsOutHours == nil && pt.MoneyPerDay > 0 {
				d := round(t.Budget.Month / pt.MoneyPerDay)
				b.Days = &d
			}
			pt.MonthBudget = b
			if h := b.RunsOutHours; h != nil {
				p.warn("%s: its budget of %s a month runs out %s h in", tr.Name, governor.FormatMoney(int64(t.Budget.Month*governor.Nano)), hoursText(*h))
			}
		}
		p.Targets = append(p.Targets, pt)
	}
}

// runsOut is the first hour, counted at its end, at which the spend of the
// last window hours (by the hour each call was sent) reaches budgetFull of
// budget; nil when none does.
func runsOut(byHour []int64, window int, budget float64) *float64 {
	limit := budget * governor.Nano * budgetFull
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
