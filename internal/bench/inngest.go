package bench

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// inngestPolicy models each flow as an Inngest function with a throttle, as
// seed 002 recommends: a run starts only when the flow's throttle (GCRA,
// every run start weighs 1, no burst) lets it; a run takes the flow's next
// batch of eligible items and makes one LLM call in a step. The step honours
// retry-after on 429 (RetryAfterError), gives up at once on a request too
// large (NonRetriableError), backs off exponentially on other errors, and
// makes at most 5 retries; a failed run's items wait for a later run.
//
// The throttles are sized the way the seed's author sized DevPick's jobs:
// from each flow's daily budget. Flows with arrivals get what their arrivals
// need (with 20 % headroom); the rest of every limit's daily allowance is
// split among the other flows by weight. Runs are counted, not tokens.
type inngestPolicy struct {
	sc    *forecast.Scenario
	flows []*inngestFlow
}

type inngestFlow struct {
	f        *forecast.FlowState
	batch    int
	interval time.Duration // throttle: one run start per interval
	tat      time.Time
	wakeAt   time.Time
}

const (
	inngestRetries     = 5
	inngestBaseBackoff = 10 * time.Second
)

func newInngest(sc *forecast.Scenario) *inngestPolicy { return &inngestPolicy{sc: sc} }

func (p *inngestPolicy) Start(w *forecast.World) {
	sc := p.sc
	// What one run of each flow costs, and each limit's daily allowance.
	costs := make([]governor.Cost, len(w.Flows()))
	for i, f := range w.Flows() {
		k := max(userBatch(sc, sc.Provider.Limits, f), 1)
		out := int64(k) * f.Flow().ItemMaxTokens
		if out == 0 {
			out = sc.Provider.DefaultMaxTokens
		}
		costs[i] = governor.Cost{Requests: 1, Input: f.Flow().PromptTokens + int64(k)*f.Flow().ItemInputTokens, Output: out}
		p.flows = append(p.flows, &inngestFlow{f: f, batch: k, tat: w.Now()})
	}
	var left [governor.NumLimits]float64
	for l := range governor.NumLimits {
		if lim := sc.Provider.Limits[l]; lim > 0 {
			left[l] = float64(lim) * float64(24*time.Hour) / float64(l.Period())
		}
	}
	runs := make([]float64, len(w.Flows()))
	var weights float64
	for i, f := range w.Flows() {
		if f.Flow().ArrivalsPerDay > 0 {
			runs[i] = 1.2 * f.Flow().ArrivalsPerDay / float64(p.flows[i].batch)
			for l := range governor.NumLimits {
				left[l] -= runs[i] * float64(costs[i].On(l))
			}
		} else {
			weights += f.Flow().Weight
		}
	}
	for i, f := range w.Flows() {
		if f.Flow().ArrivalsPerDay > 0 {
			continue
		}
		share := f.Flow().Weight / weights
		runs[i] = math.Inf(1)
		for l := range governor.NumLimits {
			if sc.Provider.Limits[l] > 0 && costs[i].On(l) > 0 {
				runs[i] = math.Min(runs[i], math.Max(left[l], 0)*share/float64(costs[i].On(l)))
			}
		}
	}
	for i, fl := range p.flows {
		if math.IsInf(runs[i], 1) || runs[i] <= 0 {
			runs[i] = 24 * 60 // no limit applies: one a minute
		}
		fl.interval = time.Duration(float64(24*time.Hour) / runs[i])
	}
}

func (p *inngestPolicy) Wake(w *forecast.World) {
	for _, fl := range p.flows {
		f := fl.f
		if f.Queued() == 0 {
			continue
		}
		if w.Now().Before(fl.tat) {
			if !fl.wakeAt.After(w.Now()) {
				fl.wakeAt = fl.tat
				w.At(fl.tat, func() { p.Wake(w) })
			}
			continue
		}
		fl.tat = fl.tat.Add(fl.interval)
		if fl.tat.Before(w.Now()) {
			fl.tat = w.Now().Add(fl.interval)
		}
		p.step(w, fl, w.Take(f, fl.batch), 0)
		if f.Queued() > 0 && !fl.wakeAt.After(w.Now()) {
			fl.wakeAt = fl.tat
			w.At(fl.tat, func() { p.Wake(w) })
		}
	}
}

// step makes the run's LLM call, attempt n.
func (p *inngestPolicy) step(w *forecast.World, fl *inngestFlow, items []forecast.Item, n int) {
	f := fl.f
	w.Send(f, items, int64(len(items))*f.Flow().ItemMaxTokens, func(o forecast.Outcome) {
		if o.Response.Status == 200 && o.Response.Fault == forecast.NoFault {
			return
		}
		if o.Response.TooLarge || n >= inngestRetries {
			w.Requeue(f, items) // the run failed
			return
		}
		wait := inngestBaseBackoff << n
		if o.Response.Status == 429 && o.Response.RetryAfter > 0 {
			wait = o.Response.RetryAfter
		}
		w.At(w.Now().Add(wait), func() { p.step(w, fl, items, n+1) })
	})
}
