package forecast

import (
	"sort"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// TraceRecord is one line of a replay's trace (`sluice bench quota
// --trace`): a request the provider model saw, items refused up front, or,
// once a replay has ended, a call still in flight or items still waiting.
// Times are seconds of virtual time since the start. With the scenario, the
// lines of a policy give back every figure of its Result but wall_seconds
// (docs/bench.md, "The trace").
type TraceRecord struct {
	Policy string `json:"policy"`
	// Target names the target a request went to, in a scenario with targets.
	Target string `json:"target,omitempty"`
	Kind   string `json:"kind"` // KindRequest, KindNeverFit, KindInFlight or KindWaiting
	// Time is when the request was sent or the items refused; for lines
	// written at the end, the call's sending or the run's end.
	Time float64 `json:"t"`
	// End is when the answer ended (a request), the run's end (a call in
	// flight or items waiting), or Time (items refused).
	End   float64 `json:"end"`
	Flow  string  `json:"flow"`
	Items int     `json:"items"`
	// IDs and Eligible give, for each item of the line, its serial number in
	// its flow and when it became eligible (seconds since the start).
	IDs      []uint32  `json:"ids"`
	Eligible []float64 `json:"eligible"`
	// The request: its input and max_tokens (0: none set), and the real
	// output of a success.
	Input     int64 `json:"input_tokens"`
	MaxTokens int64 `json:"max_tokens"`
	Output    int64 `json:"output_tokens"`
	// Status is the provider's status code (0 for a timeout or reset, and on
	// lines that are not a request's answer).
	Status int    `json:"status"`
	Fault  string `json:"fault,omitempty"`
	// Limit is the limit that refused a request, or that the items of a
	// never_fit line exceed.
	Limit      string  `json:"limit,omitempty"`
	TooLarge   bool    `json:"too_large,omitempty"`
	RetryAfter float64 `json:"retry_after,omitempty"`
	// Charged is what the provider charged the request: its final charge for
	// a success or a fault, the admission charge for a call in flight, zero
	// for a refusal.
	Charged governor.Cost `json:"charged"`
}

// Kinds of trace lines.
const (
	KindRequest  = "request"   // a request the provider model answered or refused
	KindNeverFit = "never_fit" // items refused before any call: no request carrying them fits Limit
	KindInFlight = "in_flight" // at the end: a call sent and not yet answered
	KindWaiting  = "waiting"   // at the end: items eligible and in no call (up to 1,000 a line)
)

func (r *TraceRecord) setItems(items []Item) {
	r.Items = len(items)
	r.IDs = make([]uint32, len(items))
	r.Eligible = make([]float64, len(items))
	for i, it := range items {
		r.IDs[i] = it.id
		r.Eligible[i] = it.eligible.Sub(epoch).Seconds()
	}
}

func (w *World) record(sent, end time.Time, f *FlowState, ts *targetState, items []Item, req Request, resp Response, charged governor.Cost) {
	if w.trace == nil {
		return
	}
	rec := TraceRecord{
		Kind: KindRequest, Time: w.since(sent), End: w.since(end), Flow: f.cfg.Name,
		Input: req.Input, MaxTokens: req.MaxTokens, Status: resp.Status,
		Charged: charged,
	}
	if w.routed {
		rec.Target = ts.name
	}
	rec.setItems(items)
	if resp.Status == 200 && resp.Fault == NoFault {
		rec.Output = resp.Output
	}
	if resp.Rejected {
		rec.Limit = resp.Limit.String()
		rec.TooLarge = resp.TooLarge
		rec.RetryAfter = resp.RetryAfter.Seconds()
	}
	if resp.Fault != NoFault {
		rec.Fault = resp.Fault.String()
	}
	w.trace(rec)
}

// traceEnd lists, when tracing, what was still out or waiting at the end:
// the calls in flight (in the order they were sent) with what they were
// charged at admission, then every flow's items still in line.
func (w *World) traceEnd() {
	if w.trace == nil {
		return
	}
	calls := make([]*Outcome, 0, len(w.inflight))
	for o := range w.inflight {
		calls = append(calls, o)
	}
	sort.Slice(calls, func(i, j int) bool { return w.inflight[calls[i]].seq < w.inflight[calls[j]].seq })
	for _, o := range calls {
		c := w.inflight[o]
		rec := TraceRecord{
			Kind: KindInFlight, Time: w.since(c.sent), End: w.since(w.end), Flow: c.f.cfg.Name,
			Input: o.Request.Input, MaxTokens: o.Request.MaxTokens, Charged: o.Response.Charged,
		}
		rec.setItems(o.Items)
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
func (w *World) since(t time.Time) float64 { return t.Sub(epoch).Seconds() }
