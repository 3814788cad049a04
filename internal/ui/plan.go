package ui

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/progress"
)

type planView struct {
	Configured bool
	// Nothing is why there is nothing to plan yet, when Config.Plan says
	// so with a *plan.NothingError.
	Nothing string
	Plan    *plan.Plan
	Limits  []planLimit
	Flows   []planFlow
	// Key names the provider key whose use now the limits show; "" when
	// the dashboard has no key's figures.
	Key string
}

type planLimit struct {
	Name string
	plan.Limit
	ByFlow []flowDemand
	// Measured says Used is known: what the key's governor counts on the
	// limit now, in its current window (the last minute, or day).
	Measured bool
	Used     int64
	UsedOf   float64 // Used of the limit
	// Stands says Used stands for the demand and the charge: a minute
	// limit whose flows the governor paces has no demand of its own.
	Stands bool
}

type flowDemand struct {
	Flow   string
	Demand float64
}

type planFlow struct {
	Name string
	plan.Flow
	// Fig is the job's progress now, measured, as every page shows it;
	// nil for a flow the health monitor does not judge.
	Fig *progress.Figures
	// NoPrice says why there is no cost: "" when there is one.
	NoPrice string
}

// plan shows the plan Config.Plan makes. A *plan.NothingError (nothing
// configured or recorded to plan yet) is the page's message, in its own
// words; any other error is a 500, whose text stays in the log.
func (h *Handler) plan(w http.ResponseWriter, r *http.Request) error {
	v := planView{Configured: h.cfg.Plan != nil}
	if h.cfg.Plan != nil {
		p, err := h.cfg.Plan(r.Context())
		if ne, ok := errors.AsType[*plan.NothingError](err); ok {
			v.Nothing = ne.Reason
		} else if err != nil {
			return fmt.Errorf("make the plan: %w", err)
		}
		v.Plan = p
	}
	if p := v.Plan; p != nil {
		now := h.cfg.AppNow()
		key := h.planKey(r, p, now)
		v.Key = key.Key
		// Limits in the governor's order, then any other by name.
		names := make([]string, 0, len(p.Limits))
		for name := range p.Limits {
			names = append(names, name)
		}
		slices.SortFunc(names, func(a, b string) int {
			ia, ib := limitOrder(a), limitOrder(b)
			if ia != ib {
				return ia - ib
			}
			return strings.Compare(a, b)
		})
		for _, name := range names {
			l := planLimit{Name: name, Limit: p.Limits[name]}
			if lim, err := govtext.Limit(name); err == nil && key.Key != "" && key.Limits[lim].Max > 0 {
				l.Measured, l.Used = true, key.Limits[lim].Used
				l.UsedOf = ratio(float64(l.Used), float64(key.Limits[lim].Max))
				l.Stands = l.Per == "minute" && l.Demand == 0 && l.Charged == 0
			}
			for f, d := range l.Limit.ByFlow {
				l.ByFlow = append(l.ByFlow, flowDemand{Flow: f, Demand: d})
			}
			slices.SortFunc(l.ByFlow, func(a, b flowDemand) int { return strings.Compare(a.Flow, b.Flow) })
			v.Limits = append(v.Limits, l)
		}
		figs := map[string]progress.Figures{}
		if h.cfg.Health != nil {
			for _, f := range h.cfg.Health.Flows() {
				figs[f.Name] = progress.Of(f, now)
			}
		}
		for name, f := range p.Flows {
			pf := planFlow{Name: name, Flow: f}
			if g, ok := figs[name]; ok {
				pf.Fig = &g
			}
			switch {
			case f.CostPerDay != nil:
			case p.Money == nil:
				pf.NoPrice = "no price set"
			default:
				pf.NoPrice = "no price for its model"
			}
			v.Flows = append(v.Flows, pf)
		}
		slices.SortFunc(v.Flows, func(a, b planFlow) int { return strings.Compare(a.Name, b.Name) })
	}
	h.render(w, r, http.StatusOK, "plan", "Plan", "plan", v)
	return nil
}

// planKey is the key the plan is of, as its governor stands at now: the
// key whose flows are most of the plan's (the first by name on a tie);
// the zero Stats without Config.Keys.
func (h *Handler) planKey(r *http.Request, p *plan.Plan, now time.Time) governor.Stats {
	if h.cfg.Keys == nil {
		return governor.Stats{}
	}
	keys := h.cfg.Keys(r.Context(), now)
	best, most := governor.Stats{}, -1
	for _, k := range slices.SortedFunc(slices.Values(keys), func(a, b governor.Stats) int { return strings.Compare(a.Key, b.Key) }) {
		n := 0
		for _, f := range k.Flows {
			if _, ok := p.Flows[f.Name]; ok {
				n++
			}
		}
		if n > most {
			best, most = k, n
		}
	}
	return best
}

// limitOrder is a limit name's place in governor.Limit order, after them
// all when it is none of them.
func limitOrder(name string) int {
	l, err := govtext.Limit(name)
	if err != nil {
		return int(governor.NumLimits)
	}
	return int(l)
}
