package forecast

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Sluice names the policy of sluice's governor (NewSluice) in a Result.
const Sluice = "sluice"

// Options tune a replay.
type Options struct {
	// Trace, if set, receives every line of the replay's trace, in order.
	Trace func(TraceRecord)
}

// Replay plays sc to its end under pol, which was made for sc and sees only
// what sc announces (sc.Announced()), and returns its Result, labelled
// policy. It stops soon after ctx ends, with an error that wraps
// ctx.Err().
func Replay(ctx context.Context, sc *Scenario, policy string, pol Policy, opts Options) (Result, error) {
	w, err := newWorld(sc, pol, opts.Trace)
	if err != nil {
		return Result{}, err
	}
	began := time.Now()
	if err := w.run(ctx); err != nil {
		return Result{}, fmt.Errorf("policy %s stopped at %s of %s simulated: %w", policy, w.now.Sub(epoch).Round(time.Minute), sc.Duration, err)
	}
	res := w.result(policy, time.Since(began))
	res.Series = w.series()
	for _, fs := range res.Series.Flows {
		fr := res.Flows[fs.Name]
		fr.DoneByHour = fs.Done
		res.Flows[fs.Name] = fr
	}
	return res, nil
}

// Result is one policy's replay of a scenario.
type Result struct {
	Policy                string                 `json:"policy"`
	SimulatedHours        float64                `json:"simulated_hours"`
	WallSeconds           float64                `json:"wall_seconds"`
	Limits                map[string]LimitResult `json:"limits"`
	Bottleneck            string                 `json:"bottleneck"`
	BottleneckUtilization float64                `json:"bottleneck_utilization"`
	// UtilizationVsGreedy is BottleneckUtilization ÷ that of the quota
	// bench's greedy reference policy, when the bench replayed it beside
	// this one and it used anything; absent otherwise (Replay leaves it
	// absent).
	UtilizationVsGreedy *float64              `json:"utilization_vs_greedy,omitempty"`
	WorkTokens          int64                 `json:"work_tokens"`
	ProviderRejections  map[string]int64      `json:"provider_rejections"`
	Flows               map[string]FlowResult `json:"flows"`

	// Series is what the chart draws (WriteSVG); not in the JSON.
	Series *Series `json:"-"`

	// In a scenario with targets (and only there, so that the report of a
	// scenario without keeps its shape): each target's part, the money
	// spent, the work per unit of money (nil when nothing was spent),
	// items completed twice or lost, and each outage's times. MarshalJSON
	// writes them.
	Targets       []TargetResult `json:"-"`
	Spend         float64        `json:"-"`
	WorkPerDollar *float64       `json:"-"`
	DoubleRuns    int            `json:"-"`
	Lost          int            `json:"-"`
	Outages       []OutageResult `json:"-"`
	routed        bool
}

// Routed reports whether r is of a scenario with targets.
func (r *Result) Routed() bool { return r.routed || r.Targets != nil }

// MarshalJSON writes r, with the fields of a scenario with targets when it
// is one.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	b, err := json.Marshal(plain(r))
	if err != nil || !r.Routed() {
		return b, err
	}
	extra, err := json.Marshal(struct {
		Targets       []TargetResult `json:"targets"`
		Spend         float64        `json:"spend"`
		WorkPerDollar *float64       `json:"work_per_dollar"`
		DoubleRuns    int            `json:"double_runs"`
		Lost          int            `json:"lost"`
		Outages       []OutageResult `json:"outages,omitempty"`
	}{r.Targets, r.Spend, r.WorkPerDollar, r.DoubleRuns, r.Lost, r.Outages})
	if err != nil {
		return nil, err
	}
	return append(append(b[:len(b)-1], ','), extra[1:]...), nil
}

// LimitResult is one limit's use over the run.
type LimitResult struct {
	Limit       int64   `json:"limit"`
	Capacity    int64   `json:"capacity"`
	Used        int64   `json:"used"`
	Useful      int64   `json:"useful"`
	Utilization float64 `json:"utilization"`
}

// FlowResult is one flow's outcome.
type FlowResult struct {
	Done            int     `json:"done"`
	Remaining       int     `json:"remaining"`
	Requests        int64   `json:"requests"`
	Tokens          int64   `json:"tokens"`
	WorkTokens      int64   `json:"work_tokens"`
	NeverFit        int     `json:"never_fit"`
	MaxStallMinutes float64 `json:"max_stall_minutes"`
	P95WaitMinutes  float64 `json:"p95_wait_minutes"`
	MaxWaitMinutes  float64 `json:"max_wait_minutes"`
	// ClearedHours is when the flow's backlog, with every item the flows
	// it is after fed it, was first all done, in hours since the start;
	// absent when that did not happen within the run, or the flow has
	// only arrivals.
	ClearedHours *float64 `json:"cleared_hours,omitempty"`
	// DoneByTarget counts the items done on each target, in a scenario
	// with targets.
	DoneByTarget map[string]int `json:"done_by_target,omitempty"`
	// DoneByHour is the items done by the end of each hour; not in the
	// JSON (the chart and the planner read it).
	DoneByHour []float64 `json:"-"`
	// For a flow with a budget of its own (and only there, so that the
	// report of a flow without keeps its shape): Spend is what its
	// succeeded calls cost at its price, SpendByDay the same by the
	// simulated day each call was sent, MaxDaySpend the largest of those,
	// BudgetDay and BudgetMonth its budget (absent: none).
	Spend       *float64  `json:"spend,omitempty"`
	SpendByDay  []float64 `json:"spend_by_day,omitempty"`
	MaxDaySpend *float64  `json:"max_day_spend,omitempty"`
	BudgetDay   *float64  `json:"budget_day,omitempty"`
	BudgetMonth *float64  `json:"budget_month,omitempty"`
	// SpendByHour is, for a flow with a budget, its spend by the simulated
	// hour each call was sent, in billionths; not in the JSON (the planner
	// reads it).
	SpendByHour []int64 `json:"-"`
}

// result summarises the replay.
func (w *World) result(name string, wall time.Duration) Result {
	r := Result{
		Policy:             name,
		SimulatedHours:     w.sc.Duration.Hours(),
		WallSeconds:        wall.Seconds(),
		Limits:             map[string]LimitResult{},
		ProviderRejections: map[string]int64{"429": 0, "413": 0},
		Flows:              map[string]FlowResult{},
	}
	for status, n := range w.rejects {
		r.ProviderRejections[strconv.Itoa(status)] += n
	}
	for l := range governor.NumLimits {
		lim := w.limits[l]
		if lim == 0 {
			continue
		}
		capacity := int64(math.Round(float64(lim) * float64(w.sc.Duration) / float64(l.Period())))
		lr := LimitResult{Limit: lim, Capacity: capacity, Used: w.used[l], Useful: w.useful[l]}
		lr.Utilization = round4(float64(lr.Used) / float64(capacity))
		r.Limits[l.String()] = lr
		if lr.Utilization > r.BottleneckUtilization || r.Bottleneck == "" {
			r.Bottleneck, r.BottleneckUtilization = l.String(), lr.Utilization
		}
	}
	for _, f := range w.flows {
		fr := FlowResult{
			Done: f.done, Remaining: f.work(), Requests: f.requests, Tokens: f.tokens,
			WorkTokens: int64(f.done) * (f.cfg.ItemInputTokens + f.cfg.ItemOutputTokens),
			NeverFit:   f.neverFit, MaxStallMinutes: round1(f.maxStall.Minutes()),
			P95WaitMinutes: round1(percentile(f.waits, 0.95)),
			MaxWaitMinutes: round1(percentile(f.waits, 1)),
		}
		if !f.cleared.IsZero() {
			h := round1(f.cleared.Sub(epoch).Hours())
			fr.ClearedHours = &h
		}
		if b := f.cfg.Budget; !b.IsZero() {
			fr.SpendByHour = f.spent.byHour
			spend := money(f.spent.total)
			fr.Spend = &spend
			var most float64
			fr.SpendByDay, most = f.spent.days()
			fr.MaxDaySpend = &most
			if b.Day > 0 {
				fr.BudgetDay = &b.Day
			}
			if b.Month > 0 {
				fr.BudgetMonth = &b.Month
			}
		}
		r.WorkTokens += fr.WorkTokens
		r.Flows[f.cfg.Name] = fr
	}
	if w.routed {
		w.routedResult(&r)
	}
	return r
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func round4(x float64) float64 { return math.Round(x*10000) / 10000 }
func round1(x float64) float64 { return math.Round(x*10) / 10 }
