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
}

// Result is one policy's run.
type Result struct {
	Policy                string                 `json:"policy"`
	SimulatedHours        float64                `json:"simulated_hours"`
	WallSeconds           float64                `json:"wall_seconds"`
	Limits                map[string]LimitResult `json:"limits"`
	Bottleneck            string                 `json:"bottleneck"`
	BottleneckUtilization float64                `json:"bottleneck_utilization"`
	WorkTokens            int64                  `json:"work_tokens"`
	ProviderRejections    map[string]int64       `json:"provider_rejections"`
	Flows                 map[string]FlowResult  `json:"flows"`

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
}

// TraceRecord is one request the provider model saw, as a JSON line of --trace.
// Times are seconds of virtual time since the start.
type TraceRecord struct {
	Policy     string        `json:"policy"`
	Time       float64       `json:"t"`
	End        float64       `json:"end"`
	Flow       string        `json:"flow"`
	Items      int           `json:"items"`
	Input      int64         `json:"input_tokens"`
	MaxTokens  int64         `json:"max_tokens"`
	Output     int64         `json:"output_tokens"`
	Status     int           `json:"status"`
	Fault      string        `json:"fault,omitempty"`
	Limit      string        `json:"limit,omitempty"`
	TooLarge   bool          `json:"too_large,omitempty"`
	RetryAfter float64       `json:"retry_after,omitempty"`
	Charged    governor.Cost `json:"charged"`
}

// Policies lists the policies "all" runs, sluice first.
var Policies = []string{"sluice", "devpick-naive", "devpick-fixed", "cookbook", "inngest-throttle"}

// ExtraPolicies are run only when named: variants of an anchor that
// docs/bench.md discusses.
var ExtraPolicies = []string{"cookbook-informed"}

func newPolicy(name string, sc *scenario.Scenario) (policy, error) {
	switch name {
	case "sluice":
		return newSluicePolicy(sc)
	case "devpick-naive":
		return newDevpick(sc, false)
	case "devpick-fixed":
		return newDevpick(sc, true)
	case "cookbook":
		return newCookbook(sc, false), nil
	case "cookbook-informed":
		return newCookbook(sc, true), nil
	case "inngest-throttle":
		return newInngest(sc), nil
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
		if traceErr != nil {
			return nil, traceErr
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

func itoa(n int) string { return strconv.Itoa(n) }
