package governor

import "math"

// flow is one flow's line of waiting reservations and its totals.
type flow struct {
	name     string
	weight   float64
	priority int
	share    float64 // weight × PriorityFactor^priority

	queue  []*Reservation // waiting, in order
	finish float64        // finish tag of the last reservation queued
	index  int            // position in the active heap, -1 when idle

	admitted   int64
	tokens     Cost // charged to admitted reservations, as corrected
	rejections [NumLimits]int64
}

func (g *Governor) newFlow(fc FlowConfig) *flow {
	w := fc.Weight
	if w == 0 {
		w = 1
	}
	return &flow{
		name:     fc.Name,
		weight:   w,
		priority: fc.Priority,
		share:    w * math.Pow(g.cfg.PriorityFactor, float64(fc.Priority)),
		index:    -1,
	}
}

func (g *Governor) flow(name string) *flow {
	f := g.flows[name]
	if f == nil {
		f = g.newFlow(FlowConfig{Name: name})
		g.flows[name] = f
	}
	return f
}

// flowHeap orders the flows that have waiting reservations by the start tag
// of their first one (start-time fair queuing), then by priority, then by arrival.
type flowHeap struct{ flows []*flow }

func (h *flowHeap) Len() int { return len(h.flows) }

func (h *flowHeap) Less(i, j int) bool {
	a, b := h.flows[i].queue[0], h.flows[j].queue[0]
	if a.start != b.start {
		return a.start < b.start
	}
	if a.f.priority != b.f.priority {
		return a.f.priority > b.f.priority
	}
	return a.id < b.id
}

func (h *flowHeap) Swap(i, j int) {
	h.flows[i], h.flows[j] = h.flows[j], h.flows[i]
	h.flows[i].index = i
	h.flows[j].index = j
}

func (h *flowHeap) Push(x any) {
	f := x.(*flow)
	f.index = len(h.flows)
	h.flows = append(h.flows, f)
}

func (h *flowHeap) Pop() any {
	n := len(h.flows) - 1
	f := h.flows[n]
	h.flows[n] = nil
	h.flows = h.flows[:n]
	f.index = -1
	return f
}
