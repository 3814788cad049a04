package bench

import (
	"container/heap"
	"context"
	"math"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/scenario"
	"github.com/sluice-dev/sluice/internal/sim"
)

// epoch is where virtual time starts: a Monday at midnight UTC, so fixed
// windows start on whole minutes and days.
var epoch = time.Date(2026, 10, 19, 0, 0, 0, 0, time.UTC)

// item is one unit of a flow's work. It is kept small: a run may hold a
// million of them.
type item struct {
	eligible time.Time
	output   int32  // real output tokens it will produce (at most 1.2 × MaxOutputTokens)
	id       uint32 // its flow's serial number (a run makes at most MaxItems items)
}

// flowState is a flow's items and its measurements in one run.
type flowState struct {
	cfg        scenario.Flow
	idx        int
	serial     uint64
	queue      []item // eligible, not yet in a request
	out        int    // items in requests not yet answered
	dependents []*flowState

	done, neverFit int
	requests       int64
	tokens         int64
	waits          []float64 // minutes, per completed item (flows with arrivals)
	stallFrom      time.Time // when the current stretch without completion began; zero when no work
	maxStall       time.Duration
	upstream       []*flowState // the flows this one is after, nearest first
	// cleared is when the flow's backlog, and every item the flows it is
	// after fed it, was first all done; zero until then.
	cleared time.Time
	// doneBy[h] is done as of the last completion in hour h (an hour holds
	// its end), for the chart; 0 for an hour without one.
	doneBy []float64
}

func (f *flowState) work() int { return len(f.queue) + f.out }

// world is one policy's run of a scenario in virtual time.
type world struct {
	// sc is the scenario as policies see it: the provider's limits are the
	// announced ones (scenario.Provider.Announced).
	sc *scenario.Scenario
	// limits are the limits the provider enforces, announced or not: what
	// the report measures.
	limits  governor.Limits
	now     time.Time
	end     time.Time
	events  eventHeap
	seq     uint64
	prov    *sim.Model
	flows   []*flowState
	byName  map[string]*flowState
	pol     policy
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
	inflight map[*outcome]inflightCall
	calls    uint64 // calls admitted so far, when tracing
}

// inflightCall is a call in flight as the trace lists it at the end.
type inflightCall struct {
	seq  uint64 // orders the calls by when they were sent
	sent time.Time
	f    *flowState
}

// policy decides when each flow's requests are sent.
type policy interface {
	// start is called once at time zero.
	start(w *world)
	// wake is called after anything happened that may let the policy act:
	// items arrived, a response ended.
	wake(w *world)
}

// announced returns sc as policies see it: a copy whose provider limits are
// only the announced ones.
func announced(sc *scenario.Scenario) *scenario.Scenario {
	view := *sc
	view.Provider.Limits = sc.Provider.Announced()
	view.Provider.Unannounced = [governor.NumLimits]bool{}
	return &view
}

// newWorld prepares a run of sc under pol. The provider model enforces every
// limit of sc; pol should have been made from announced(sc), as newPolicy does.
func newWorld(sc *scenario.Scenario, pol policy, trace func(TraceRecord)) (*world, error) {
	p := sc.Provider
	prov, err := sim.NewModel(sim.Config{
		Profile: p.Profile, Window: p.Window, Accounting: p.Accounting, Latency: p.Latency,
		DefaultMaxTokens: p.DefaultMaxTokens, Faults: p.Faults, Limits: p.Limits, Seed: sc.Seed,
		Wire: true, // headers and error bodies, as the policies' clients would read them
	})
	if err != nil {
		return nil, err
	}
	w := &world{
		sc: announced(sc), limits: p.Limits, now: epoch, end: epoch.Add(sc.Duration), prov: prov, pol: pol, trace: trace,
		byName: map[string]*flowState{}, rejects: map[int]int64{}, rejectsByHour: map[int][]int64{},
		hours: int(math.Ceil(sc.Duration.Hours())),
	}
	if trace != nil {
		w.inflight = map[*outcome]inflightCall{}
	}
	for _, l := range governor.AllLimits {
		if p.Limits[l] > 0 {
			w.use[l] = make([]float64, w.hours)
		}
	}
	for i, fc := range sc.Flows {
		f := &flowState{cfg: fc, idx: i, doneBy: make([]float64, w.hours)}
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

// at schedules fn at time t (not before now).
func (w *world) at(t time.Time, fn func()) {
	w.seq++
	w.atSeq(t, w.seq, fn)
}

// atSeq schedules fn at time t (not before now) with sequence number seq,
// which orders events at the same time.
func (w *world) atSeq(t time.Time, seq uint64, fn func()) {
	if t.Before(w.now) {
		t = w.now
	}
	heap.Push(&w.events, event{at: t, seq: seq, fn: fn})
}

// checkEvery is how many events run between two looks at the context: often
// enough to stop within milliseconds, rarely enough to cost nothing.
const checkEvery = 4096

// run plays the scenario to its end, or until ctx ends (returning its error).
func (w *world) run(ctx context.Context) error {
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
	w.pol.start(w)
	w.pol.wake(w)
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
func (w *world) scheduleArrival(f *flowState, seq0 uint64, i, n int64) {
	slot := f.cfg.ArrivalSlot()
	jitter := time.Duration(unit(uint64(w.sc.Seed), uint64(f.idx)+1000, uint64(i)) * float64(slot))
	t := epoch.Add(time.Duration(i)*slot + jitter)
	w.atSeq(t, seq0+uint64(i)+1, func() {
		if i+1 < n {
			w.scheduleArrival(f, seq0, i+1, n)
		}
		w.addItem(f)
		w.pol.wake(w)
	})
}

// addItem makes one item of f eligible now.
func (w *world) addItem(f *flowState) {
	f.serial++
	v := 0.8 + 0.4*unit(uint64(w.sc.Seed), uint64(f.idx), f.serial)
	it := item{eligible: w.now, output: int32(math.Round(float64(f.cfg.ItemOutputTokens) * v)), id: uint32(f.serial)}
	if f.work() == 0 {
		f.stallFrom = w.now
	}
	f.queue = append(f.queue, it)
}

// take removes up to n items from the head of f's queue.
func (w *world) take(f *flowState, n int) []item {
	n = min(n, len(f.queue))
	items := append([]item(nil), f.queue[:n]...)
	f.queue = f.queue[n:]
	f.out += n
	return items
}

// putBack returns items of a failed request to the head of f's queue.
func (w *world) putBack(f *flowState, items []item) {
	f.out -= len(items)
	f.queue = append(append(make([]item, 0, len(items)+len(f.queue)), items...), f.queue...)
}

// requeue returns items of a request given up on to the end of f's queue.
func (w *world) requeue(f *flowState, items []item) {
	f.out -= len(items)
	f.queue = append(f.queue, items...)
}

// refuse drops items no request could ever carry.
func (w *world) refuse(f *flowState, items []item) {
	if w.trace != nil {
		rec := TraceRecord{Kind: KindNeverFit, Time: w.since(w.now), End: w.since(w.now), Flow: f.cfg.Name}
		rec.setItems(items)
		if l, ok := w.refusedOn(f, len(items)); ok {
			rec.Limit = l.String()
		}
		w.trace(rec)
	}
	f.out -= len(items)
	f.neverFit += len(items)
	if f.work() == 0 {
		f.maxStall = max(f.maxStall, w.now.Sub(f.stallFrom))
		f.stallFrom = time.Time{}
	}
	w.noteCleared()
}

// refusedOn names the limit that refuses n items of f: the first limit the
// provider enforces (in its order: rpm, rpd, tpm, tpd, itpm, otpm) that a
// request carrying one of them exceeds on its own or, when one fits every
// limit, the first that a request carrying all n exceeds — what the provider
// answered to the call too large that made a policy refuse them.
func (w *world) refusedOn(f *flowState, n int) (governor.Limit, bool) {
	for _, k := range []int{1, n} {
		out := int64(k) * f.cfg.ItemMaxTokens
		if out == 0 {
			out = w.sc.Provider.DefaultMaxTokens
		}
		c := governor.Cost{Requests: 1, Input: f.cfg.PromptTokens + int64(k)*f.cfg.ItemInputTokens, Output: out}
		for _, l := range governor.AllLimits {
			if lim := w.limits[l]; lim > 0 && c.On(l) > lim {
				return l, true
			}
		}
	}
	return 0, false
}

// requestFor shapes the request carrying items: prompt + items' input, the
// given max_tokens (0: none), and the items' real output.
func (w *world) requestFor(f *flowState, items []item, maxTokens int64) sim.Request {
	r := sim.Request{Flow: f.cfg.Name, Input: f.cfg.PromptTokens + int64(len(items))*f.cfg.ItemInputTokens, MaxTokens: maxTokens}
	for _, it := range items {
		r.Output += int64(it.output)
	}
	return r
}

// outcome is what a policy learns of one request.
type outcome struct {
	resp  sim.Response
	items []item
	req   sim.Request
}

// send submits a request of f carrying items (taken with take) now. done is
// called when the answer arrives: for a success after the response's latency
// (the items are then done); for a rejection at once and for a fault after
// the latency, with the items still out: the policy sends them again, puts
// them back or refuses them.
func (w *world) send(f *flowState, items []item, maxTokens int64, done func(outcome)) {
	req := w.requestFor(f, items, maxTokens)
	resp := w.prov.Submit(w.now, req)
	sent := w.now
	if resp.Rejected {
		w.record(sent, sent, f, items, req, resp, governor.Cost{})
		w.rejects[resp.Status]++
		if h := int(w.now.Sub(epoch) / time.Hour); h < w.hours {
			if w.rejectsByHour[resp.Status] == nil {
				w.rejectsByHour[resp.Status] = make([]int64, w.hours)
			}
			w.rejectsByHour[resp.Status][h]++
		}
		done(outcome{resp: resp, items: items, req: req})
		return
	}
	// The closure holds one copy of the call: a run may have a great many in flight.
	o := &outcome{resp: resp, items: items, req: req}
	if w.inflight != nil {
		w.calls++
		w.inflight[o] = inflightCall{seq: w.calls, sent: sent, f: f}
	}
	w.at(w.now.Add(resp.Latency), func() {
		if w.inflight != nil {
			delete(w.inflight, o)
		}
		// A faulted call was charged too; under settle accounting the
		// provider corrects its charge when it ends, as for a success.
		final := w.prov.Finish(w.now, o.resp)
		if o.resp.Fault != sim.NoFault {
			w.record(sent, w.now, f, o.items, o.req, o.resp, final)
			done(*o)
			w.pol.wake(w)
			return
		}
		w.record(sent, w.now, f, o.items, o.req, o.resp, final)
		w.succeed(f, o.items, final, o.req, o.resp)
		done(*o)
		w.pol.wake(w)
	})
}

func (w *world) succeed(f *flowState, items []item, charged governor.Cost, req sim.Request, resp sim.Response) {
	for _, l := range governor.AllLimits {
		w.used[l] += charged.On(l)
		w.useful[l] += governor.Cost{Requests: 1, Input: req.Input, Output: resp.Output}.On(l)
	}
	if d := w.now.Sub(epoch); d >= 0 {
		for _, l := range governor.AllLimits {
			if h := int(d / time.Hour); w.use[l] != nil && h < w.hours {
				perHour := float64(w.limits[l]) * float64(time.Hour) / float64(l.Period())
				w.use[l][h] += float64(charged.On(l)) / perHour
			}
		}
	}
	f.requests++
	f.tokens += charged.Tokens()
	f.out -= len(items)
	f.done += len(items)
	if f.cfg.ArrivalsPerDay > 0 {
		for _, it := range items {
			f.waits = append(f.waits, w.now.Sub(it.eligible).Minutes())
		}
	}
	f.maxStall = max(f.maxStall, w.now.Sub(f.stallFrom))
	if f.work() > 0 {
		f.stallFrom = w.now
	} else {
		f.stallFrom = time.Time{}
	}
	// The hour whose end is at or after now: an hour holds its end.
	if h := int(max(w.now.Sub(epoch)-1, 0) / time.Hour); h < w.hours {
		f.doneBy[h] = float64(f.done)
	}
	for _, d := range f.dependents {
		for range items {
			w.addItem(d)
		}
	}
	w.noteCleared()
}

// noteCleared records, for each flow with a backlog or an upstream flow
// whose work is all done (its own and its upstream flows'), that it was
// cleared now. A flow with arrivals only has nothing to clear.
func (w *world) noteCleared() {
next:
	for _, f := range w.flows {
		if !f.cleared.IsZero() || f.work() > 0 || (f.cfg.Backlog == 0 && len(f.upstream) == 0) {
			continue
		}
		for _, u := range f.upstream {
			if u.work() > 0 {
				continue next
			}
		}
		f.cleared = w.now
	}
}

func (w *world) record(sent, end time.Time, f *flowState, items []item, req sim.Request, resp sim.Response, charged governor.Cost) {
	if w.trace == nil {
		return
	}
	rec := TraceRecord{
		Kind: KindRequest, Time: w.since(sent), End: w.since(end), Flow: f.cfg.Name,
		Input: req.Input, MaxTokens: req.MaxTokens, Status: resp.Status,
		Charged: charged,
	}
	rec.setItems(items)
	if resp.Status == 200 && resp.Fault == sim.NoFault {
		rec.Output = resp.Output
	}
	if resp.Rejected {
		rec.Limit = resp.Limit.String()
		rec.TooLarge = resp.TooLarge
		rec.RetryAfter = resp.RetryAfter.Seconds()
	}
	if resp.Fault != sim.NoFault {
		rec.Fault = resp.Fault.String()
	}
	w.trace(rec)
}

// traceEnd lists, when tracing, what was still out or waiting at the end:
// the calls in flight (in the order they were sent) with what they were
// charged at admission, then every flow's items still in line.
func (w *world) traceEnd() {
	if w.trace == nil {
		return
	}
	calls := make([]*outcome, 0, len(w.inflight))
	for o := range w.inflight {
		calls = append(calls, o)
	}
	sort.Slice(calls, func(i, j int) bool { return w.inflight[calls[i]].seq < w.inflight[calls[j]].seq })
	for _, o := range calls {
		c := w.inflight[o]
		rec := TraceRecord{
			Kind: KindInFlight, Time: w.since(c.sent), End: w.since(w.end), Flow: c.f.cfg.Name,
			Input: o.req.Input, MaxTokens: o.req.MaxTokens, Charged: o.resp.Charged,
		}
		rec.setItems(o.items)
		w.trace(rec)
	}
	for _, f := range w.flows {
		for q := f.queue; len(q) > 0; {
			n := min(len(q), traceChunk)
			rec := TraceRecord{Kind: KindWaiting, Time: w.since(w.end), End: w.since(w.end), Flow: f.cfg.Name}
			rec.setItems(q[:n])
			w.trace(rec)
			q = q[n:]
		}
	}
}

// traceChunk is the most items one "waiting" line of the trace lists.
const traceChunk = 1000

// since is t as the trace writes it: seconds since the start.
func (w *world) since(t time.Time) float64 { return t.Sub(epoch).Seconds() }

// result summarises the run.
func (w *world) result(name string, wall time.Duration) Result {
	r := Result{
		Policy:             name,
		SimulatedHours:     w.sc.Duration.Hours(),
		WallSeconds:        wall.Seconds(),
		Limits:             map[string]LimitResult{},
		ProviderRejections: map[string]int64{"429": 0, "413": 0},
		Flows:              map[string]FlowResult{},
	}
	for status, n := range w.rejects {
		r.ProviderRejections[itoa(status)] += n
	}
	for _, l := range governor.AllLimits {
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
		r.WorkTokens += fr.WorkTokens
		r.Flows[f.cfg.Name] = fr
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
