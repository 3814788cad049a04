package ui

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/plan"
)

type planView struct {
	Configured bool
	// Nothing is why there is nothing to plan yet, when Config.Plan says
	// so with a *plan.NothingError.
	Nothing string
	Plan    *plan.Plan
	Limits  []planLimit
	Flows   []planFlow
}

type planLimit struct {
	Name string
	plan.Limit
	ByFlow []flowDemand
}

type flowDemand struct {
	Flow   string
	Demand float64
}

type planFlow struct {
	Name string
	plan.Flow
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
			for f, d := range l.Limit.ByFlow {
				l.ByFlow = append(l.ByFlow, flowDemand{Flow: f, Demand: d})
			}
			slices.SortFunc(l.ByFlow, func(a, b flowDemand) int { return strings.Compare(a.Flow, b.Flow) })
			v.Limits = append(v.Limits, l)
		}
		for name, f := range p.Flows {
			v.Flows = append(v.Flows, planFlow{Name: name, Flow: f})
		}
		slices.SortFunc(v.Flows, func(a, b planFlow) int { return strings.Compare(a.Name, b.Name) })
	}
	h.render(w, r, http.StatusOK, "plan", "Plan", "plan", v)
	return nil
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
