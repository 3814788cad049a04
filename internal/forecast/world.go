package forecast

import (
	"container/heap"
	"context"
	"math"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// epoch is where virtual time starts: a Monday at midnight UTC, so fixed
// windows start on whole minutes and days.
var epoch = time.Date(2026, 10, 19, 0, 0, 0, 0, time.UTC)

// Policy decides when each flow's requests are sent. Its methods run on the
// replay's one goroutine, in virtual time: they act through the World
// (World.Take, World.Send, World.At) and return.
type Policy interface {
	// Start is called once at time zero, before the first Wake.
	Start(w *World)
	// Wake is called after anything happened that may let the policy act:
	// items arrived, a response ended.
	Wake(w *World)
}

// World is one policy's replay of a scenario in virtual time: the flows'
// items, the provider model, the clock and the events to come. A Policy is
// handed it; it is not safe for use by several goroutines.
type World struct {
	// sc is the scenario as policies see it: the provider's limits are the
	// announced ones (Scenario.Announced).
	sc *Scenario
	// limits are the limits the provider enforces, announced or not: what
	// the report measures.
	limits  governor.Limits
	now     time.Time
	end     time.Time
	events  eventHeap
	seq     uint64
	prov    *Model
	flows   []*FlowState
	byName  map[string]*FlowState
	pol     Policy
	trace   func(TraceRecord)
	used    [governor.NumLimits]int64
	useful  [governor.NumLimits]int64
	rejects map[int]int64
	// hours of simulated time, and per configured limit the charges of
	// succeeded requests in each hour as a fraction of the hour's allowance,
	// for the chart. Kept per hour, not per request, so that memory does not
	// grow with the requests of a run.
	hours int
	use   [governor.NumLimits][]float64
	// rejectsByHour counts, per status (429, 413), the rejections in each
	// hour, for the chart.
	rejectsByHour map[int][]int64
	// inflight holds, when tracing, the calls sent and not yet answered, so
	// that the trace can list those still out at the end.
	inflight map[*Outcome]inflightCall
	calls    uint64 // calls admitted so far, when tracing
	// targets are the places calls go: the scenario's targets, or the one
	// key of its provider section (targets[0] is always prov).
	targets []*targetState
	routed  bool
	// outages lists every target's outages, for the report's times.
	outages []*outageState
}

// inflightCall is a call in flight as the trace lists it at the end.
type inflightCall struct {
	seq  uint64 // orders the calls by when they were sent
	sent time.Time
	f    *FlowState
}

// Now is the virtual time.
func (w *World) Now() time.Time { return w.now }

// Scenario is the scenario as policies see it: its provider's limits are
// the announced ones.
func (w *World) Scenario() *Scenario { return w.sc }

// Flows are the scenario's flows, in its order.
func (w *World) Flows() []*FlowState { return w.flows }

// newWorld prepares a replay of sc under pol. The provider model enforces
// every limit of sc; pol should have been made from sc.Announced().
func newWorld(sc *Scenario, pol Policy, trace func(TraceRecord)) (*World, error) {
	p := sc.Provider
	w := &World{
		sc: sc.Announced(), limits: p.Limits, now: epoch, end: epoch.Add(sc.Duration), pol: pol, trace: trace,
		byName: map[string]*FlowState{}, rejects: map[int]int64{}, rejectsByHour: map[int][]int64{},
		hours: int(math.Ceil(sc.Duration.Hours())),
	}
	if err := w.makeTargets(sc); err != nil {
		return nil, err
	}
	w.prov = w.targets[0].prov
	if trace != nil {
		w.inflight = map[*Outcome]inflightCall{}
	}
	for l := range governor.NumLimits {
		if p.Limits[l] > 0 {
			w.use[l] = make([]float64, w.hours)
		}
	}
	for i, fc := range sc.Flows {
		f := &FlowState{cfg: fc, idx: i, doneBy: make([]float64, w.hours), doneOn: make([]int, len(w.targets))}
		if !fc.Budget.IsZero() {
			// Only a flow with a budget reports its spend: the others
			// keep no log of it.
			f.price, f.spent = sc.KeyPrice(), w.newSpendLog()
		}
		w.flows = append(w.flows, f)
		w.byName[fc.Name] = f
	}
	for _, f := range w.flows {
		if f.cfg.After != "" {
			up := w.byName[f.cfg.After]
			up.dependents = append(up.dependents, f)
		}
		// Validate refused cycles, so the chain ends.
		for u := w.byName[f.cfg.After]; u != nil; u = w.byName[u.cfg.After] {
			f.upstream = append(f.upstream, u)
		}
	}
	return w, nil
}

// At schedules fn at time t (now, if t is before now). Events at the same
// time run in the order At scheduled them, the flows' arrivals at that time
// first.
func (w *World) At(t time.Time, fn func()) {
	w.seq++
	w.atSeq(t, w.seq, fn)
}

// atSeq schedules fn at time t (not before now) with sequence number seq,
// which orders events at the same time.
func (w *World) atSeq(t time.Time, seq uint64, fn func()) {
	if t.Before(w.now) {
		t = w.now
	}
	heap.Push(&w.events, event{at: t, seq: seq, fn: fn})
}

// checkEvery is how many events run between two looks at the context: often
// enough to stop within milliseconds, rarely enough to cost nothing.
const checkEvery = 4096

// run plays the scenario to its end, or until ctx ends (returning its error).
func (w *World) run(ctx context.Context) error {
	for _, f := range w.flows {
		for i := range f.cfg.Backlog {
			if i%(16*checkEvery) == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			w.addItem(f)
		}
	}
	// Arrivals are scheduled one at a time, each when the one before it
	// happens, so the queue of events does not hold a whole run's arrivals.
	// Each gets the sequence number it would have had were all scheduled
	// now, flow by flow, so that events at the same moment keep their order.
	for _, f := range w.flows {
		if n := f.cfg.Arrivals(w.sc.Duration); n > 0 {
			w.scheduleArrival(f, w.seq, 0, n)
			w.seq += uint64(n)
		}
	}
	w.pol.Start(w)
	w.pol.Wake(w)
	for n := 1; w.events.Len() > 0; n++ {
		if n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		ev := heap.Pop(&w.events).(event)
		if !ev.at.Before(w.end) {
			break
		}
		w.now = ev.at
		ev.fn()
	}
	w.now = w.end
	for _, f := range w.flows {
		if !f.stallFrom.IsZero() {
			f.maxStall = max(f.maxStall, w.end.Sub(f.stallFrom))
		}
	}
	w.traceEnd()
	return nil
}

// scheduleArrival schedules the i-th of a flow's n arrivals, one in each
// slot of the day at a random moment of the slot; seq0 is the sequence number
// before its first. When it happens it schedules the next.
func (w *World) scheduleArrival(f *FlowState, seq0 uint64, i, n int64) {
	slot := f.cfg.ArrivalSlot()
	jitter := time.Duration(unit(uint64(w.sc.Seed), uint64(f.idx)+1000, uint64(i)) * float64(slot))
	t := epoch.Add(time.Duration(i)*slot + jitter)
	w.atSeq(t, seq0+uint64(i)+1, func() {
		if i+1 < n {
			w.scheduleArrival(f, seq0, i+1, n)
		}
		w.addItem(f)
		w.pol.Wake(w)
	})
}

// addItem makes one item of f eligible now.
func (w *World) addItem(f *FlowState) {
	f.serial++
	v := 0.8 + 0.4*unit(uint64(w.sc.Seed), uint64(f.idx), f.serial)
	it := Item{eligible: w.now, output: int32(math.Round(float64(f.cfg.ItemOutputTokens) * v)), id: uint32(f.serial)}
	if f.work() == 0 {
		f.stallFrom = w.now
	}
	f.queue = append(f.queue, it)
}

// unit returns a deterministic number in [0, 1) from three integers
// (splitmix64), so every policy sees the same items and arrivals.
func unit(a, b, c uint64) float64 {
	x := a*0x9E3779B97F4A7C15 ^ b*0xBF58476D1CE4E5B9 ^ c*0x94D049BB133111EB
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	*h = old[:n]
	return e
}
