package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/scenario"
)

// Report is the bench's answer for one scenario: one Result per policy, in
// the format of the scenarios README.
type Report struct {
	Scenario string   `json:"scenario"`
	Results  []Result `json:"results"`
	// Title heads the chart (default "sluice bench quota: " and the
	// scenario); not in the JSON.
	Title string `json:"-"`
}

// Result is one policy's run.
type Result struct {
	Policy                string                 `json:"policy"`
	SimulatedHours        float64                `json:"simulated_hours"`
	WallSeconds           float64                `json:"wall_seconds"`
	Limits                map[string]LimitResult `json:"limits"`
	Bottleneck            string                 `json:"bottleneck"`
	BottleneckUtilization float64                `json:"bottleneck_utilization"`
	// UtilizationVsGreedy is BottleneckUtilization ÷ that of the greedy
	// reference policy, when greedy ran in the same invocation and used
	// anything; absent otherwise.
	UtilizationVsGreedy *float64              `json:"utilization_vs_greedy,omitempty"`
	WorkTokens          int64                 `json:"work_tokens"`
	ProviderRejections  map[string]int64      `json:"provider_rejections"`
	Flows               map[string]FlowResult `json:"flows"`

	series *series // for the chart; not in the JSON
}

// LimitResult is one limit's use over the run.
type LimitResult struct {
	Limit       int64   `json:"limit"`
	Capacity    int64   `json:"capacity"`
	Used        int64   `json:"used"`
	Useful      int64   `json:"useful"`
	Utilization float64 `json:"utilization"`
}

// FlowResult is one flow's outcome.
type FlowResult struct {
	Done            int     `json:"done"`
	Remaining       int     `json:"remaining"`
	Requests        int64   `json:"requests"`
	Tokens          int64   `json:"tokens"`
	WorkTokens      int64   `json:"work_tokens"`
	NeverFit        int     `json:"never_fit"`
	MaxStallMinutes float64 `json:"max_stall_minutes"`
	P95WaitMinutes  float64 `json:"p95_wait_minutes"`
	MaxWaitMinutes  float64 `json:"max_wait_minutes"`
	// ClearedHours is when the flow's backlog, with every item the flows
	// it is after fed it, was first all done, in hours since the start;
	// absent when that did not happen within the run, or the flow has
	// only arrivals.
	ClearedHours *float64 `json:"cleared_hours,omitempty"`
	// DoneByHour is the items done by the end of each hour; not in the
	// JSON (the chart and the planner read it).
	DoneByHour []float64 `json:"-"`
}

// TraceRecord is one line of --trace: a request the provider model saw, items
// refused up front, or, once a run has ended, a call still in flight or items
// still waiting. Times are seconds of virtual time since the start. With the
// scenario, the lines of a policy give back every figure of its Result but
// wall_seconds (docs/bench.md, "The trace").
type TraceRecord struct {
	Policy string `json:"policy"`
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

func (r *TraceRecord) setItems(items []item) {
	r.Items = len(items)
	r.IDs = make([]uint32, len(items))
	r.Eligible = make([]float64, len(items))
	for i, it := range items {
		r.IDs[i] = it.id
		r.Eligible[i] = it.eligible.Sub(epoch).Seconds()
	}
}

// Policies lists the policies "all" runs: sluice first, then the anchors,
// then the greedy reference.
var Policies = []string{Sluice, "devpick-naive", "devpick-fixed", "cookbook", "inngest-throttle", Greedy}

// Sluice is the policy of sluice's governor.
const Sluice = "sluice"

// Greedy is the reference policy whose utilization the others are measured
// against (Result.UtilizationVsGreedy).
const Greedy = "greedy"

// ExtraPolicies are run only when named: variants of an anchor that
// docs/bench.md discusses.
var ExtraPolicies = []string{"cookbook-rpm-tpm"}

// newPolicy makes the named policy for sc. It sees only the limits sc
// announces.
func newPolicy(name string, sc *scenario.Scenario) (policy, error) {
	sc = announced(sc)
	switch name {
	case Sluice:
		return newSluicePolicy(sc)
	case "devpick-naive":
		return newDevpick(sc, false)
	case "devpick-fixed":
		return newDevpick(sc, true)
	case "cookbook":
		return newCookbook(sc, false), nil
	case "cookbook-rpm-tpm":
		return newCookbook(sc, true), nil
	case "inngest-throttle":
		return newInngest(sc), nil
	case Greedy:
		return newGreedy(sc), nil
	}
	return nil, fmt.Errorf("unknown policy %q (want one of %s, or all)", name, strings.Join(append(append([]string(nil), Policies...), ExtraPolicies...), ", "))
}

// Options tunes a bench run.
type Options struct {
	// Trace, if set, receives every request the provider model saw as JSON lines.
	Trace io.Writer
}

// Run replays sc under each named policy and returns the report. It stops
// soon after ctx ends, with an error that wraps ctx.Err().
func Run(ctx context.Context, sc *scenario.Scenario, policies []string, opts Options) (*Report, error) {
	rep := &Report{Scenario: sc.Name}
	var enc *json.Encoder
	if opts.Trace != nil {
		enc = json.NewEncoder(opts.Trace)
	}
	for _, name := range policies {
		pol, err := newPolicy(name, sc)
		if err != nil {
			return nil, err
		}
		var traceErr error
		var trace func(TraceRecord)
		if enc != nil {
			trace = func(r TraceRecord) {
				r.Policy = name
				if err := enc.Encode(r); err != nil && traceErr == nil {
					traceErr = fmt.Errorf("write trace: %w", err)
				}
			}
		}
		w, err := newWorld(sc, pol, trace)
		if err != nil {
			return nil, err
		}
		began := time.Now()
		if err := w.run(ctx); err != nil {
			return nil, fmt.Errorf("policy %s stopped at %s of %s simulated: %w", name, w.now.Sub(epoch).Round(time.Minute), sc.Duration, err)
		}
		res := w.result(name, time.Since(began))
		res.series = w.series()
		for _, fs := range res.series.flows {
			fr := res.Flows[fs.name]
			fr.DoneByHour = fs.done
			res.Flows[fs.name] = fr
		}
		if traceErr != nil {
			return nil, traceErr
		}
		rep.Results = append(rep.Results, res)
	}
	compareToGreedy(rep)
	return rep, nil
}

// compareToGreedy sets every result's UtilizationVsGreedy when greedy ran.
func compareToGreedy(rep *Report) {
	for _, g := range rep.Results {
		if g.Policy != Greedy || g.BottleneckUtilization <= 0 {
			continue
		}
		for i := range rep.Results {
			v := round4(rep.Results[i].BottleneckUtilization / g.BottleneckUtilization)
			rep.Results[i].UtilizationVsGreedy = &v
		}
		return
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
