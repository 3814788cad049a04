// Package plan says what a configuration of flows on one provider key will
// do before it runs: the demand it makes on each limit against the limit,
// the requests that can never fit a limit and the largest batch that does,
// when each backlog will be done under sluice's fair sharing, which flows
// risk stalling, and what it costs. On a scenario whose flows are routed
// among several targets, it says per target the demand the routes give
// it, its money a day and in 30 days against its budgets, and when a
// budget runs out.
//
// Demand is counted two ways. Demand is the real tokens (and requests) the
// flows use: what a user's own estimate adds up, as DevPick's post-mortem
// did. Charged is what the provider counts for them: a request is charged
// its input plus its max_tokens (or, when it sets none, the provider's
// default reservation), so a plan whose demand fits can still be refused.
//
// A flow either paces itself, as a scheduled job does (forecast.Flow.Every,
// PerRun, Gap) — its demand per day and in its busiest minute follow from
// its schedule — or is paced by the governor: its arrivals count towards the
// demand per day, its backlog is what is left over, and its per-minute use is
// whatever the governor admits, never more than a limit. The ETAs come from
// a replay of the scenario in virtual time under sluice's governor
// (forecast.Replay with forecast.NewSluice, the run `sluice bench quota`
// reports as its sluice policy), which paces every flow itself.
//
// Instead of a scenario written by hand, Observed derives one from what a
// store recorded: the key and flows a configuration gives (RecordedKey,
// AppKey, or a gateway's config file), each flow's call sizes and items per
// call over the last day, each backfill's backlog. That is what `sluice
// plan --db` and the dashboard's Plan page plan.
package plan

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/num"
)

// DefaultStallAfter is the stall threshold the stall risk is judged by when
// Options leaves it zero: a backfill's default.
const DefaultStallAfter = 2 * time.Hour

// Options tune a plan.
type Options struct {
	// StallAfter is the time without progress, with work eligible, that
	// counts as a stall. Default DefaultStallAfter.
	StallAfter time.Duration
}

// Plan is a configuration's fate.
type Plan struct {
	Scenario string `json:"scenario"`
	// SimulatedHours is how long the simulation behind the ETAs ran.
	SimulatedHours float64          `json:"simulated_hours"`
	Limits         map[string]Limit `json:"limits"`
	// Fit lists every flow whose largest request exceeds a limit on its
	// own: the provider refuses it however long it waits.
	Fit   []Fit           `json:"fit"`
	Flows map[string]Flow `json:"flows"`
	// Money is the cost per day and of the backlogs, when the scenario
	// has prices.
	Money *Money `json:"money,omitempty"`
	// Targets are, for a scenario with targets, each target's part: the
	// demand the routes give it, its money against its budgets.
	Targets []Target `json:"targets,omitempty"`
	// Warnings say, in words, what the figures mean for the user.
	Warnings []string `json:"warnings"`

	replay forecast.Result // the simulation the ETAs come from, for the chart
}

// Limit is the demand on one limit.
type Limit struct {
	Limit int64 `json:"limit"`
	// Per is the limit's period: "minute" or "day".
	Per string `json:"per"`
	// Demand is, for a day limit, what the paced flows and the arrivals use
	// in a day; for a minute limit, what the paced flows use in their
	// busiest minute when their runs start together. Real tokens or
	// requests.
	Demand float64 `json:"demand"`
	Ratio  float64 `json:"ratio"`
	// Charged is what the provider charges for Demand: max_tokens (or the
	// provider's default reservation) instead of the real output.
	Charged      float64 `json:"charged"`
	ChargedRatio float64 `json:"charged_ratio"`
	// ByFlow is Demand by flow.
	ByFlow map[string]float64 `json:"by_flow"`
	// Backlog is, for a day limit, what the flows' backlogs still need of
	// it (the items the flows they are after will feed them included).
	Backlog float64 `json:"backlog,omitempty"`
}

// Fit is a flow whose largest request cannot fit a limit.
type Fit struct {
	Flow  string `json:"flow"`
	Limit string `json:"limit"`
	// BatchMax is the flow's largest batch, and Request what a request
	// carrying it is charged on Limit, above LimitValue.
	BatchMax   int   `json:"batch_max"`
	Request    int64 `json:"request"`
	LimitValue int64 `json:"limit_value"`
	// FitsBatch is the largest batch whose request fits every limit; 0:
	// not even one item fits.
	FitsBatch int `json:"fits_batch"`
}

// Flow is one flow's plan.
type Flow struct {
	// Paced: the flow paces itself (a scheduled job); otherwise the
	// governor does.
	Paced bool `json:"paced"`
	// ItemsPerDay and RequestsPerDay are the flow's steady demand: its
	// arrivals, or what its schedule takes a day. 0 for a backlog the
	// governor paces.
	ItemsPerDay    float64 `json:"items_per_day"`
	RequestsPerDay float64 `json:"requests_per_day"`
	TokensPerDay   float64 `json:"tokens_per_day"`
	// Backlog is the items waiting at the start, and Fed those the flows
	// it is after will hand it.
	Backlog int `json:"backlog"`
	Fed     int `json:"fed,omitempty"`
	// PacedDays is how long a paced flow's own schedule takes to clear its
	// backlog.
	PacedDays *float64 `json:"paced_days,omitempty"`
	// EtaHours is when the simulation of the governor clears the backlog,
	// in hours from the start; null when it never does at the rate it ends
	// with. EtaFrom says how it was found: "simulated" (within the run),
	// "extrapolated" (from the rate of the run's last day), "never", or
	// "arrivals" (nothing to clear: see P95WaitMinutes).
	EtaHours *float64 `json:"eta_hours"`
	EtaFrom  string   `json:"eta_from"`
	// Done and Remaining are the simulation's at its end; NeverFit the
	// items it refused up front, since no request carrying them fits a
	// limit (sluice parks them, naming the limit).
	Done      int `json:"done"`
	Remaining int `json:"remaining"`
	NeverFit  int `json:"never_fit"`
	// MaxStallMinutes is the simulation's longest stretch with work
	// eligible and none done; StallRisk judges it against the threshold:
	// "high" (at least the threshold, never done, or items that never
	// fit), "medium" (at least
	// half) or "low".
	MaxStallMinutes float64 `json:"max_stall_minutes"`
	StallRisk       string  `json:"stall_risk"`
	P95WaitMinutes  float64 `json:"p95_wait_minutes"`
	// CostPerDay and BacklogCost are in the prices' money; absent without
	// a price for the flow's model.
	CostPerDay  *float64 `json:"cost_per_day,omitempty"`
	BacklogCost *float64 `json:"backlog_cost,omitempty"`
	// Spend is, for a flow with a budget of its own, its money in the
	// simulation against that budget, and when the budget runs out;
	// absent for a flow without one.
	*Spend
}

// Money is the plan's cost.
type Money struct {
	PerDay  float64 `json:"per_day"`
	Backlog float64 `json:"backlog"`
	// Unpriced lists flows whose model has no price.
	Unpriced []string `json:"unpriced,omitempty"`
}

const day = 24 * time.Hour

// Make plans sc: the demand from its flows' shapes, the ETAs from a
// simulation of sluice's governor over sc.Duration.
func Make(ctx context.Context, sc *forecast.Scenario, opts Options) (*Plan, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	opts.StallAfter = cmp.Or(opts.StallAfter, DefaultStallAfter)
	pol, err := forecast.NewSluice(sc)
	if err != nil {
		return nil, err
	}
	res, err := forecast.Replay(ctx, sc, forecast.Sluice, pol, forecast.Options{})
	if err != nil {
		return nil, err
	}
	p := &Plan{Scenario: sc.Name, SimulatedHours: res.SimulatedHours, Limits: map[string]Limit{}, Flows: map[string]Flow{}, Fit: []Fit{}, Warnings: []string{}, replay: res}
	byName := map[string]*forecast.Flow{}
	for i := range sc.Flows {
		byName[sc.Flows[i].Name] = &sc.Flows[i]
	}
	shapes := make([]shape, len(sc.Flows))
	for i := range sc.Flows {
		shapes[i] = shapeOf(sc, &sc.Flows[i], res.Flows[sc.Flows[i].Name], byName)
	}
	for l := range governor.NumLimits {
		lim := sc.Provider.Limits[l]
		if lim == 0 {
			continue
		}
		pl := Limit{Limit: lim, Per: "day", ByFlow: map[string]float64{}}
		if l.Period() == time.Minute {
			pl.Per = "minute"
		}
		for i, f := range sc.Flows {
			s := shapes[i]
			if pl.Per == "minute" {
				pl.Demand += s.peak.real.on(l)
				pl.Charged += s.peak.charged.on(l)
				pl.ByFlow[f.Name] = round(s.peak.real.on(l))
			} else {
				pl.Demand += s.perDay.real.on(l)
				pl.Charged += s.perDay.charged.on(l)
				pl.Backlog += s.backlog.real.on(l)
				pl.ByFlow[f.Name] = round(s.perDay.real.on(l))
			}
		}
		pl.Demand, pl.Charged, pl.Backlog = round(pl.Demand), round(pl.Charged), round(pl.Backlog)
		pl.Ratio = ratio(pl.Demand, lim)
		pl.ChargedRatio = ratio(pl.Charged, lim)
		p.Limits[l.String()] = pl
		p.warnLimit(l, pl)
	}
	for i := range sc.Flows {
		f := &sc.Flows[i]
		p.fit(sc, f)
		p.Flows[f.Name] = p.flow(f, shapes[i], res, opts)
	}
	p.flowBudgets(sc, res)
	p.waitForUpstream(sc, shapes)
	p.money(sc, shapes)
	if sc.Routed() {
		p.targets(sc, res)
	}
	return p, nil
}

// tally is a request count and token counts, fractional: a day's demand
// is an average.
type tally struct{ requests, input, output float64 }

func (t tally) add(u tally) tally {
	return tally{t.requests + u.requests, t.input + u.input, t.output + u.output}
}

func (t tally) times(x float64) tally { return tally{t.requests * x, t.input * x, t.output * x} }

// on is t's count on limit l, as governor.Cost.On counts it.
func (t tally) on(l governor.Limit) float64 {
	switch l {
	case governor.RPM, governor.RPD:
		return t.requests
	case governor.ITPM:
		return t.input
	case governor.OTPM:
		return t.output
	}
	return t.input + t.output
}

// use is real use and what the provider charges for it.
type use struct{ real, charged tally }

func (u use) add(v use) use              { return use{u.real.add(v.real), u.charged.add(v.charged)} }
func (u use) times(x float64) use        { return use{u.real.times(x), u.charged.times(x)} }
func (u use) tokens() (float64, float64) { return u.real.input, u.real.output }

// shape is a flow's demand: per day, in its busiest minute, and what its
// backlog still needs.
type shape struct {
	perDay, peak, backlog use
	itemsPerDay           float64
	backlogItems, fed     int
	// upstream are the flows f is after, nearest first.
	upstream []string
}

// request is one request carrying n items of f (n may be fractional: an
// average): real, and as the provider charges it.
func request(sc *forecast.Scenario, f *forecast.Flow, n float64) use {
	input := float64(f.PromptTokens) + n*float64(f.ItemInputTokens)
	out := n * float64(f.ItemOutputTokens)
	maxTokens := n * float64(f.ItemMaxTokens)
	if f.ItemMaxTokens == 0 {
		maxTokens = float64(sc.Provider.DefaultMaxTokens)
	}
	charged := tally{1, input, maxTokens}
	if sc.Provider.SettleOutput {
		charged.output = out
	}
	return use{tally{1, input, out}, charged}
}

// requests is n items of f sent batch items at a time: full batches and
// the rest.
func requests(sc *forecast.Scenario, f *forecast.Flow, n float64, batch int) use {
	if n <= 0 || batch < 1 {
		return use{}
	}
	b := float64(batch)
	full := math.Floor(n / b)
	u := request(sc, f, b).times(full)
	if rest := n - full*b; rest > 1e-9 {
		u = u.add(request(sc, f, rest))
	}
	return u
}

func shapeOf(sc *forecast.Scenario, f *forecast.Flow, fr forecast.FlowResult, byName map[string]*forecast.Flow) shape {
	s := shape{backlogItems: f.Backlog}
	for u := byName[f.After]; u != nil; u = byName[u.After] {
		s.fed += u.Backlog
		s.upstream = append(s.upstream, u.Name)
	}
	switch {
	case f.Paced():
		runs := float64(day) / float64(f.Every)
		perRun := float64(cmp.Or(f.PerRun, f.BatchMax))
		take := perRun
		if f.ArrivalsPerDay > 0 && f.Backlog == 0 && f.After == "" {
			take = min(perRun, f.ArrivalsPerDay/runs)
		}
		// A run's requests carry the items it takes, spread evenly.
		reqs := math.Ceil(take/float64(f.BatchMax) - 1e-9)
		if reqs > 0 {
			s.perDay = request(sc, f, take/reqs).times(reqs * runs)
		}
		s.itemsPerDay = take * runs
		// The busiest minute: a full run's requests that start within it.
		full := math.Ceil(perRun / float64(f.BatchMax))
		inMinute := full
		if f.Gap > 0 {
			inMinute = min(full, math.Ceil(float64(time.Minute)/float64(f.Gap)))
		}
		s.peak = requests(sc, f, min(perRun, inMinute*float64(f.BatchMax)), f.BatchMax)
	case f.ArrivalsPerDay > 0:
		// The governor sends arrivals as they come: as many items a
		// request as the simulation put in one.
		s.itemsPerDay = f.ArrivalsPerDay
		perReq := float64(f.BatchMax)
		if fr.Requests > 0 && fr.Done > 0 {
			perReq = min(float64(fr.Done)/float64(fr.Requests), perReq)
		}
		s.perDay = request(sc, f, perReq).times(f.ArrivalsPerDay / perReq)
	}
	// A paced job sends the batches it is configured to; the governor
	// sends the largest that fits every limit.
	batch := f.BatchMax
	if !f.Paced() {
		batch = max(largestFit(sc, f), 1)
	}
	s.backlog = requests(sc, f, float64(s.backlogItems+s.fed), batch)
	return s
}

// fit lists f's requests that exceed a limit on their own.
func (p *Plan) fit(sc *forecast.Scenario, f *forecast.Flow) {
	largest := largestFit(sc, f)
	for l := range governor.NumLimits {
		lim := sc.Provider.Limits[l]
		size := size(sc, f, f.BatchMax, l)
		if lim == 0 || size <= float64(lim) {
			continue
		}
		p.Fit = append(p.Fit, Fit{Flow: f.Name, Limit: l.String(), BatchMax: f.BatchMax, Request: int64(size), LimitValue: lim, FitsBatch: largest})
		if largest == 0 {
			p.warn("%s: a request of even one item counts %s on %s, above its limit of %s: the provider refuses it however long it waits",
				f.Name, num.Group(int64(size)), l.Title(), num.Group(lim))
		} else {
			p.warn("%s: a request of %d items counts %s on %s, above its limit of %s: it never fits; batches of at most %d do",
				f.Name, f.BatchMax, num.Group(int64(size)), l.Title(), num.Group(lim), largest)
		}
	}
}

// size is what one request of n items of f counts on l: its charge, or its
// real use when that is more (a request without max_tokens may answer more
// than the provider reserved for it).
func size(sc *forecast.Scenario, f *forecast.Flow, n int, l governor.Limit) float64 {
	u := request(sc, f, float64(n))
	return max(u.charged.on(l), u.real.on(l))
}

// largestFit is the largest batch of f, up to BatchMax, whose request fits
// every limit; 0 when not even one item does.
func largestFit(sc *forecast.Scenario, f *forecast.Flow) int {
	return sort0(f.BatchMax, func(n int) bool {
		for l := range governor.NumLimits {
			if lim := sc.Provider.Limits[l]; lim > 0 && size(sc, f, n, l) > float64(lim) {
				return false
			}
		}
		return true
	})
}

// sort0 is the largest n in [0, hi] for which ok holds, ok being true up to
// some n and false after.
func sort0(hi int, ok func(int) bool) int {
	lo := 0
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func (p *Plan) flow(f *forecast.Flow, s shape, res forecast.Result, opts Options) Flow {
	fr := res.Flows[f.Name]
	pf := Flow{
		Paced: f.Paced(), ItemsPerDay: round(s.itemsPerDay), RequestsPerDay: round(s.perDay.real.requests),
		TokensPerDay: round(s.perDay.real.input + s.perDay.real.output),
		Backlog:      s.backlogItems, Fed: s.fed, Done: fr.Done, Remaining: fr.Remaining, NeverFit: fr.NeverFit,
		MaxStallMinutes: fr.MaxStallMinutes, P95WaitMinutes: fr.P95WaitMinutes,
	}
	if f.Paced() && s.itemsPerDay > 0 && s.backlogItems+s.fed > 0 {
		d := round(float64(s.backlogItems+s.fed) / s.itemsPerDay)
		pf.PacedDays = &d
	}
	// What the flows it is after still hold will come to it.
	pending := fr.Remaining
	for _, u := range s.upstream {
		pending += res.Flows[u].Remaining
	}
	switch {
	case s.backlogItems+s.fed == 0:
		pf.EtaFrom = "arrivals"
	case fr.ClearedHours != nil:
		pf.EtaHours, pf.EtaFrom = fr.ClearedHours, "simulated"
	default:
		if rate := lastDayRate(fr.DoneByHour); rate > 0 {
			eta := round(res.SimulatedHours + float64(pending)/rate)
			pf.EtaHours, pf.EtaFrom = &eta, "extrapolated"
		} else {
			pf.EtaFrom = "never"
		}
	}
	stall := time.Duration(fr.MaxStallMinutes * float64(time.Minute))
	switch {
	case pf.NeverFit > 0:
		pf.StallRisk = "high"
		p.warn("%s: %s items can never be sent: no request carrying them fits a limit (see above); they are parked, not done",
			f.Name, num.Group(int64(pf.NeverFit)))
	case pf.EtaFrom == "never" || stall >= opts.StallAfter:
		pf.StallRisk = "high"
		p.warn("%s: stall risk high: in the simulation it went %s with work waiting and nothing done (threshold %s)",
			f.Name, stall.Round(time.Minute), opts.StallAfter)
	case stall >= opts.StallAfter/2:
		pf.StallRisk = "medium"
	default:
		pf.StallRisk = "low"
	}
	return pf
}

// waitForUpstream makes a flow's ETA no earlier than that of the flows it
// is after: they feed it its last items. A flow after one that never
// clears never clears either.
func (p *Plan) waitForUpstream(sc *forecast.Scenario, shapes []shape) {
	for i, f := range sc.Flows {
		pf := p.Flows[f.Name]
		for _, u := range shapes[i].upstream {
			if pf.EtaHours == nil {
				break
			}
			up := p.Flows[u]
			switch {
			case up.EtaFrom == "never":
				pf.EtaHours, pf.EtaFrom = nil, "never"
			case up.EtaHours != nil && *up.EtaHours > *pf.EtaHours:
				eta := *up.EtaHours
				pf.EtaHours, pf.EtaFrom = &eta, up.EtaFrom
			}
		}
		p.Flows[f.Name] = pf
	}
}

// lastDayRate is the items done per hour over the last day of done-by-hour
// figures (or all of them, when fewer).
func lastDayRate(done []float64) float64 {
	if len(done) == 0 {
		return 0
	}
	span := min(len(done), 24)
	end := done[len(done)-1]
	start := 0.0
	if len(done) > span {
		start = done[len(done)-1-span]
	}
	return (end - start) / float64(span)
}

func (p *Plan) warnLimit(l governor.Limit, pl Limit) {
	what := "a day"
	if pl.Per == "minute" {
		what = "in their busiest minute"
	}
	unit := l.Unit()
	switch {
	case pl.Ratio > 1:
		p.warn("%s: the steady demand (paced flows and arrivals) is %s %s %s, %.0f %% of its limit of %s: it does not fit",
			l.Title(), num.Group(int64(pl.Demand)), unit, what, 100*pl.Ratio, num.Group(pl.Limit))
	case pl.ChargedRatio > 1:
		p.warn("%s: the steady demand is %s %s %s (%.0f %%), but the provider charges %s (%.0f %%): max_tokens, or the reservation of a request that sets none, counts in full",
			l.Title(), num.Group(int64(pl.Demand)), unit, what, 100*pl.Ratio, num.Group(int64(pl.Charged)), 100*pl.ChargedRatio)
	}
}

func (p *Plan) money(sc *forecast.Scenario, shapes []shape) {
	if len(sc.Prices) == 0 {
		return
	}
	m := &Money{}
	for i := range sc.Flows {
		f := &sc.Flows[i]
		price, ok := sc.PriceOf(f)
		if !ok {
			m.Unpriced = append(m.Unpriced, f.Name)
			continue
		}
		cost := func(u use) float64 {
			in, out := u.tokens()
			return (in*price.Input + out*price.Output) / 1e6
		}
		pf := p.Flows[f.Name]
		perDay, backlog := roundCents(cost(shapes[i].perDay)), roundCents(cost(shapes[i].backlog))
		pf.CostPerDay, pf.BacklogCost = &perDay, &backlog
		p.Flows[f.Name] = pf
		m.PerDay += perDay
		m.Backlog += backlog
	}
	m.PerDay, m.Backlog = roundCents(m.PerDay), roundCents(m.Backlog)
	slices.Sort(m.Unpriced)
	p.Money = m
}

// flowBudgets adds, to each flow with a budget of its own, its money in
// the simulation res of sc against the budget.
func (p *Plan) flowBudgets(sc *forecast.Scenario, res forecast.Result) {
	for i := range sc.Flows {
		f := &sc.Flows[i]
		fr := res.Flows[f.Name]
		if f.Budget.IsZero() || fr.Spend == nil {
			continue
		}
		// The governor admits a call on its worst case: the budget has run
		// out once what is left cannot pay for the flow's largest call.
		worst := governor.Cost{Input: f.PromptTokens + int64(f.BatchMax)*f.ItemInputTokens, Output: int64(f.BatchMax) * f.ItemMaxTokens}
		if f.ItemMaxTokens == 0 {
			worst.Output = sc.Provider.DefaultMaxTokens
		}
		call := float64(sc.KeyPrice().Of(worst)) / governor.Nano
		s := p.spend(f.Name, "its calls wait while the other flows go on", *fr.Spend, *fr.MaxDaySpend, fr.SpendByHour, f.Budget, call, res.SimulatedHours/24)
		pf := p.Flows[f.Name]
		pf.Spend = &s
		p.Flows[f.Name] = pf
	}
}

func (p *Plan) warn(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
}

func ratio(x float64, lim int64) float64 { return math.Round(x/float64(lim)*10000) / 10000 }

func round(x float64) float64 { return math.Round(x*10) / 10 }

func roundCents(x float64) float64 { return math.Round(x*10000) / 10000 }

// WriteSVG draws the simulation behind each plan, side by side on one
// scale, labelled by labels ("plan", "what if"): each flow's progress and
// each limit's use per hour against the limit, the provider's rejections
// marked.
func WriteSVG(w io.Writer, plans []*Plan, labels []string) error {
	var title string
	results := make([]forecast.Result, len(plans))
	for i, p := range plans {
		results[i] = p.replay
		results[i].Policy = labels[i]
	}
	if len(plans) > 0 {
		title = "sluice plan: " + plans[0].Scenario + ", the governor simulated"
	}
	return forecast.WriteSVG(w, title, results)
}
