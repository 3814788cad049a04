package bench

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/scenario"
	"github.com/sluice-dev/sluice/internal/sim"
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
	sc    *scenario.Scenario
	flows []*inngestFlow
}

type inngestFlow struct {
	f        *flowState
	batch    int
	interval time.Duration // throttle: one run start per interval
	tat      time.Time
	wakeAt   time.Time
}

const (
	inngestRetries     = 5
	inngestBaseBackoff = 10 * time.Second
)

func newInngest(sc *scenario.Scenario) *inngestPolicy { return &inngestPolicy{sc: sc} }

func (p *inngestPolicy) start(w *world) {
	sc := p.sc
	// What one run of each flow costs, and each limit's daily allowance.
	costs := make([]governor.Cost, len(w.flows))
	for i, f := range w.flows {
		k := max(userBatch(sc, sc.Provider.Limits, f), 1)
		out := int64(k) * f.cfg.ItemMaxTokens
		if out == 0 {
			out = sc.Provider.DefaultMaxTokens
		}
		costs[i] = governor.Cost{Requests: 1, Input: f.cfg.PromptTokens + int64(k)*f.cfg.ItemInputTokens, Output: out}
		p.flows = append(p.flows, &inngestFlow{f: f, batch: k, tat: w.now})
	}
	var left [governor.NumLimits]float64
	for _, l := range governor.AllLimits {
		if lim := sc.Provider.Limits[l]; lim > 0 {
			left[l] = float64(lim) * float64(24*time.Hour) / float64(l.Period())
		}
	}
	runs := make([]float64, len(w.flows))
	var weights float64
	for i, f := range w.flows {
		if f.cfg.ArrivalsPerDay > 0 {
			runs[i] = 1.2 * f.cfg.ArrivalsPerDay / float64(p.flows[i].batch)
			for _, l := range governor.AllLimits {
				left[l] -= runs[i] * float64(costs[i].On(l))
			}
		} else {
			weights += f.cfg.Weight
		}
	}
	for i, f := range w.flows {
		if f.cfg.ArrivalsPerDay > 0 {
			continue
		}
		share := f.cfg.Weight / weights
		runs[i] = math.Inf(1)
		for _, l := range governor.AllLimits {
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

func (p *inngestPolicy) wake(w *world) {
	for _, fl := range p.flows {
		f := fl.f
		if len(f.queue) == 0 {
			continue
		}
		if w.now.Before(fl.tat) {
			if !fl.wakeAt.After(w.now) {
				fl.wakeAt = fl.tat
				w.at(fl.tat, func() { p.wake(w) })
			}
			continue
		}
		fl.tat = fl.tat.Add(fl.interval)
		if fl.tat.Before(w.now) {
			fl.tat = w.now.Add(fl.interval)
		}
		p.step(w, fl, w.take(f, fl.batch), 0)
		if len(f.queue) > 0 && !fl.wakeAt.After(w.now) {
			fl.wakeAt = fl.tat
			w.at(fl.tat, func() { p.wake(w) })
		}
	}
}

// step makes the run's LLM call, attempt n.
func (p *inngestPolicy) step(w *world, fl *inngestFlow, items []item, n int) {
	f := fl.f
	w.send(f, items, int64(len(items))*f.cfg.ItemMaxTokens, func(o outcome) {
		if o.resp.Status == 200 && o.resp.Fault == sim.NoFault {
			return
		}
		if o.resp.TooLarge || n >= inngestRetries {
			w.requeue(f, items) // the run failed
			return
		}
		wait := inngestBaseBackoff << n
		if o.resp.Status == 429 && o.resp.RetryAfter > 0 {
			wait = o.resp.RetryAfter
		}
		w.at(w.now.Add(wait), func() { p.step(w, fl, items, n+1) })
	})
}
