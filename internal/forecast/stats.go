package forecast

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/governor"
)

// Stats counts what a Model decided since it was made.
type Stats struct {
	Requests  int64 // every Submit
	Succeeded int64 // admitted and answered 200 with a whole body
	Rejected  int64 // rate-limit and too-large rejections
	TooLarge  int64 // of Rejected, those that could never fit
	// RejectedByStatus counts rejections by HTTP status (429, 413).
	RejectedByStatus map[int]int64
	// RejectedByLimit counts rejections by the limit they named.
	RejectedByLimit [governor.NumLimits]int64
	// Faults counts admitted requests that failed, by Fault (NoFault unused).
	Faults [NumFaults]int64
	// Charged totals the final charges of admitted requests (settled where
	// Finish ran under settle accounting). Charged.On(l) is the total on l.
	Charged governor.Cost
	// Limits are the model's limits, for reading Charged against them.
	Limits governor.Limits
	// Peak is, for each limit in force, the highest ratio of the charges
	// counting in its window to its allowance, over the moments requests
	// were admitted (the admitted request included): how close the key
	// came to the limit, whoever sent the calls. Admission never takes it
	// above 1; it is 0 for a limit not in force.
	Peak [governor.NumLimits]float64
	// Flows breaks the counts down by Request.Flow.
	Flows map[string]FlowStats
}

// FlowStats counts one flow's requests.
type FlowStats struct {
	Requests  int64
	Succeeded int64
	Rejected  int64
	Faults    int64
	Charged   governor.Cost
}

// stats is the Model's live counters; Stats is a copy of them.
type stats struct {
	requests, succeeded, rejected, tooLarge int64
	byStatus                                map[int]int64
	byLimit                                 [governor.NumLimits]int64
	faults                                  [NumFaults]int64
	charged                                 governor.Cost
	peak                                    [governor.NumLimits]float64
	flows                                   map[string]*FlowStats
}

func newStats() stats {
	return stats{byStatus: map[int]int64{}, flows: map[string]*FlowStats{}}
}

// Flow names come from clients (a header, the body's user), so the stats
// keep at most maxFlowStats of them, each clipped to maxFlowName bytes; the
// requests of any further flow count under OtherFlows.
const (
	maxFlowStats = 1000
	maxFlowName  = 200
	// OtherFlows is the flow under which Stats counts requests of flows
	// beyond the first 1000 names.
	OtherFlows = "(other)"
)

func (s *stats) flow(name string) *FlowStats {
	if len(name) > maxFlowName {
		name = strings.ToValidUTF8(name[:maxFlowName], "")
	}
	f := s.flows[name]
	if f == nil {
		if len(s.flows) >= maxFlowStats {
			name = OtherFlows
			if f = s.flows[name]; f != nil {
				return f
			}
		}
		f = &FlowStats{}
		s.flows[name] = f
	}
	return f
}

func (s *stats) reject(r *Response) {
	s.rejected++
	if r.TooLarge {
		s.tooLarge++
	}
	s.byStatus[r.Status]++
	s.byLimit[r.Limit]++
	r.flow.Rejected++
}

func (s *stats) admit(r *Response) {
	s.charged = add(s.charged, r.Charged)
	r.flow.Charged = add(r.flow.Charged, r.Charged)
	if r.Fault == NoFault {
		s.succeeded++
		r.flow.Succeeded++
		return
	}
	s.faults[r.Fault]++
	r.flow.Faults++
}

// raisePeaks raises the peak of every limit in force to its window's use
// now: called once an admitted charge is in the ledgers.
func (m *Model) raisePeaks() {
	for l := range governor.NumLimits {
		if lim := m.cfg.Limits[l]; lim > 0 {
			m.stats.peak[l] = max(m.stats.peak[l], float64(m.ledger(l).sum.On(l))/float64(lim))
		}
	}
}

// Stats returns a copy of the counters.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{
		Requests: m.stats.requests, Succeeded: m.stats.succeeded, Rejected: m.stats.rejected, TooLarge: m.stats.tooLarge,
		RejectedByStatus: make(map[int]int64, len(m.stats.byStatus)), RejectedByLimit: m.stats.byLimit,
		Faults: m.stats.faults, Charged: m.stats.charged, Limits: m.cfg.Limits, Peak: m.stats.peak,
		Flows: make(map[string]FlowStats, len(m.stats.flows)),
	}
	for k, v := range m.stats.byStatus {
		s.RejectedByStatus[k] = v
	}
	for k, v := range m.stats.flows {
		s.Flows[k] = *v
	}
	return s
}

type costJSON struct {
	Requests int64 `json:"requests"`
	Input    int64 `json:"input"`
	Output   int64 `json:"output"`
}

type flowJSON struct {
	Requests  int64    `json:"requests"`
	Succeeded int64    `json:"succeeded"`
	Rejected  int64    `json:"rejected"`
	Faults    int64    `json:"faults"`
	Charged   costJSON `json:"charged"`
}

// MarshalJSON writes the shape GET /sim/stats serves: counts keyed by status
// code, limit name and fault name, and the charged totals on every limit.
func (s Stats) MarshalJSON() ([]byte, error) {
	byStatus := make(map[string]int64, len(s.RejectedByStatus))
	for k, v := range s.RejectedByStatus {
		byStatus[strconv.Itoa(k)] = v
	}
	byLimit := map[string]int64{}
	charged := map[string]int64{}
	limits := map[string]int64{}
	peak := map[string]float64{}
	for l := range governor.NumLimits {
		if s.RejectedByLimit[l] > 0 {
			byLimit[l.String()] = s.RejectedByLimit[l]
		}
		charged[l.String()] = s.Charged.On(l)
		if s.Limits[l] > 0 {
			limits[l.String()] = s.Limits[l]
			peak[l.String()] = s.Peak[l]
		}
	}
	faults := map[string]int64{}
	for f := Fault5xx; f < NumFaults; f++ {
		faults[f.String()] = s.Faults[f]
	}
	flows := make(map[string]flowJSON, len(s.Flows))
	for name, f := range s.Flows {
		flows[name] = flowJSON{f.Requests, f.Succeeded, f.Rejected, f.Faults,
			costJSON{f.Charged.Requests, f.Charged.Input, f.Charged.Output}}
	}
	return json.Marshal(struct {
		Requests         int64               `json:"requests"`
		Succeeded        int64               `json:"succeeded"`
		Rejected         int64               `json:"rejected"`
		TooLarge         int64               `json:"too_large"`
		RejectedByStatus map[string]int64    `json:"rejected_by_status"`
		RejectedByLimit  map[string]int64    `json:"rejected_by_limit"`
		Faults           map[string]int64    `json:"faults"`
		Charged          map[string]int64    `json:"charged"`
		Limits           map[string]int64    `json:"limits"`
		Peak             map[string]float64  `json:"peak"`
		Flows            map[string]flowJSON `json:"flows"`
	}{s.Requests, s.Succeeded, s.Rejected, s.TooLarge, byStatus, byLimit, faults, charged, limits, peak, flows})
}
