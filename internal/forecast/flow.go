package forecast

import (
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Item is one unit of a flow's work. It is kept small: a replay may hold a
// million of them.
type Item struct {
	eligible time.Time
	output   int32  // real output tokens it will produce (at most 1.2 × MaxOutputTokens)
	id       uint32 // its flow's serial number (a replay makes at most MaxItems items)
}

// FlowState is a flow's items and its measurements in one replay.
type FlowState struct {
	cfg        Flow
	idx        int
	serial     uint64
	queue      []Item // eligible, not yet in a request
	out        int    // items in requests not yet answered
	dependents []*FlowState

	done, neverFit int
	requests       int64
	tokens         int64
	waits          []float64 // minutes, per completed item (flows with arrivals)
	stallFrom      time.Time // when the current stretch without completion began; zero when no work
	maxStall       time.Duration
	upstream       []*FlowState // the flows this one is after, nearest first
	// cleared is when the flow's backlog, and every item the flows it is
	// after fed it, was first all done; zero until then.
	cleared time.Time
	// doneBy[h] is done as of the last completion in hour h (an hour holds
	// its end), for the chart; 0 for an hour without one.
	doneBy []float64
	// doneOn counts the items done on each target; doneIDs marks every item
	// done (a bit per serial number), so that an item done twice is
	// counted (doubleRuns) and not done twice in done; sent counts the
	// items in calls sent and not yet answered.
	doneOn     []int
	doneIDs    []uint64
	doubleRuns int
	sent       int
	// price is, for a flow with a budget of its own, what its calls cost
	// on the one key of a scenario without targets (Scenario.KeyPrice);
	// spent is what its succeeded calls cost, at that price or at their
	// target's (zero for a flow without a budget).
	price governor.Price
	spent spendLog
}

// markDone records item id done and reports whether it was done before.
func (f *FlowState) markDone(id uint32) bool {
	i, bit := int(id/64), uint64(1)<<(id%64)
	for len(f.doneIDs) <= i {
		f.doneIDs = append(f.doneIDs, 0)
	}
	if f.doneIDs[i]&bit != 0 {
		return true
	}
	f.doneIDs[i] |= bit
	return false
}

// Flow is the flow's configuration, as the scenario gives it.
func (f *FlowState) Flow() *Flow { return &f.cfg }

// Index is the flow's place in the scenario's flows.
func (f *FlowState) Index() int { return f.idx }

// Queued is how many items are eligible and in no request.
func (f *FlowState) Queued() int { return len(f.queue) }

// Oldest is when the first item in line became eligible; zero when none is.
func (f *FlowState) Oldest() time.Time {
	if len(f.queue) == 0 {
		return time.Time{}
	}
	return f.queue[0].eligible
}

// work is the flow's items not done: in line or in requests not yet
// answered.
func (f *FlowState) work() int { return len(f.queue) + f.out }

// Take removes up to n items from the head of f's queue, for a request:
// they are out until the policy sends them (Send) and then puts them back,
// requeues or refuses them, or the request succeeds.
func (w *World) Take(f *FlowState, n int) []Item {
	n = min(n, len(f.queue))
	items := append([]Item(nil), f.queue[:n]...)
	f.queue = f.queue[n:]
	f.out += n
	return items
}

// PutBack returns items of a failed request to the head of f's queue.
func (w *World) PutBack(f *FlowState, items []Item) {
	f.out -= len(items)
	f.queue = append(append(make([]Item, 0, len(items)+len(f.queue)), items...), f.queue...)
}

// Requeue returns items of a request given up on to the end of f's queue.
func (w *World) Requeue(f *FlowState, items []Item) {
	f.out -= len(items)
	f.queue = append(f.queue, items...)
}

// Refuse drops items no request could ever carry: they count as never_fit.
func (w *World) Refuse(f *FlowState, items []Item) {
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
func (w *World) refusedOn(f *FlowState, n int) (governor.Limit, bool) {
	for _, k := range []int{1, n} {
		out := int64(k) * f.cfg.ItemMaxTokens
		if out == 0 {
			out = w.sc.Provider.DefaultMaxTokens
		}
		c := governor.Cost{Requests: 1, Input: f.cfg.PromptTokens + int64(k)*f.cfg.ItemInputTokens, Output: out}
		for l := range governor.NumLimits {
			if lim := w.limits[l]; lim > 0 && c.On(l) > lim {
				return l, true
			}
		}
	}
	return 0, false
}

// requestFor shapes the request carrying items: prompt + items' input, the
// given max_tokens (0: none), and the items' real output.
func (w *World) requestFor(f *FlowState, items []Item, maxTokens int64) Request {
	r := Request{Flow: f.cfg.Name, Input: f.cfg.PromptTokens + int64(len(items))*f.cfg.ItemInputTokens, MaxTokens: maxTokens}
	for _, it := range items {
		r.Output += int64(it.output)
	}
	return r
}

// Outcome is what a policy learns of one request: the provider model's
// answer, the items it carried and the request as the provider counted it.
type Outcome struct {
	Response Response
	Items    []Item
	Request  Request
}

// Send submits a request of f carrying items (taken with Take) now, with
// max_tokens maxTokens (0: none, the provider reserves its default). done is
// called when the answer arrives: for a success after the response's latency
// (the items are then done); for a rejection at once and for a fault after
// the latency, with the items still out: the policy sends them again, puts
// them back or refuses them.
func (w *World) Send(f *FlowState, items []Item, maxTokens int64, done func(Outcome)) {
	w.SendTo(f, 0, items, maxTokens, done)
}

// SendTo is Send to target t (its index in the scenario's targets; 0 in a
// scenario without targets). A target in an outage fails the call after
// outageLatency without charging it.
func (w *World) SendTo(f *FlowState, t int, items []Item, maxTokens int64, done func(Outcome)) {
	ts := w.targets[t]
	req := w.requestFor(f, items, maxTokens)
	req.Model = ts.model
	sent := w.now
	if o, ok := ts.outageAt(w.now.Sub(epoch)); ok {
		w.failOutage(f, ts, o, items, req, done)
		return
	}
	resp := ts.prov.Submit(w.now, req)
	if resp.Rejected {
		w.record(sent, sent, f, ts, items, req, resp, governor.Cost{})
		w.rejects[resp.Status]++
		ts.rejects[resp.Status]++
		if h := int(w.now.Sub(epoch) / time.Hour); h < w.hours {
			if w.rejectsByHour[resp.Status] == nil {
				w.rejectsByHour[resp.Status] = make([]int64, w.hours)
			}
			w.rejectsByHour[resp.Status][h]++
		}
		done(Outcome{Response: resp, Items: items, Request: req})
		return
	}
	// The closure holds one copy of the call: a run may have a great many in flight.
	o := &Outcome{Response: resp, Items: items, Request: req}
	if w.inflight != nil {
		w.calls++
		w.inflight[o] = inflightCall{seq: w.calls, sent: sent, f: f}
	}
	f.sent += len(items)
	w.At(w.now.Add(resp.Latency), func() {
		if w.inflight != nil {
			delete(w.inflight, o)
		}
		f.sent -= len(o.Items)
		// A faulted call was charged too; under settle accounting the
		// provider corrects its charge when it ends, as for a success.
		final := ts.prov.Finish(w.now, o.Response)
		if o.Response.Fault != NoFault {
			ts.faults++
			w.record(sent, w.now, f, ts, o.Items, o.Request, o.Response, final)
			done(*o)
			w.pol.Wake(w)
			return
		}
		w.record(sent, w.now, f, ts, o.Items, o.Request, o.Response, final)
		w.succeed(f, ts, sent, o.Items, final, o.Request, o.Response)
		done(*o)
		w.pol.Wake(w)
	})
}

func (w *World) succeed(f *FlowState, ts *targetState, sent time.Time, items []Item, charged governor.Cost, req Request, resp Response) {
	ts.succeed(w, f, sent, items, charged, req, resp)
	for l := range governor.NumLimits {
		w.used[l] += charged.On(l)
		w.useful[l] += governor.Cost{Requests: 1, Input: req.Input, Output: resp.Output}.On(l)
	}
	if d := w.now.Sub(epoch); d >= 0 {
		for l := range governor.NumLimits {
			if h := int(d / time.Hour); w.use[l] != nil && h < w.hours {
				perHour := float64(w.limits[l]) * float64(time.Hour) / float64(l.Period())
				w.use[l][h] += float64(charged.On(l)) / perHour
			}
		}
	}
	f.requests++
	f.tokens += charged.Tokens()
	f.out -= len(items)
	for _, it := range items {
		if f.markDone(it.id) {
			f.doubleRuns++
		} else {
			f.done++
		}
	}
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
func (w *World) noteCleared() {
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
