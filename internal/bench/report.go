package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/sluice-dev/sluice/internal/forecast"
)

// Report is the bench's answer for one scenario: one Result per policy, in
// the format of the scenarios README.
type Report struct {
	Scenario string            `json:"scenario"`
	Results  []forecast.Result `json:"results"`
	// Title heads the chart (default "sluice bench quota: " and the
	// scenario); not in the JSON.
	Title string `json:"-"`
}

// Policies lists the policies "all" runs: sluice first, then the anchors,
// then the greedy reference.
var Policies = []string{forecast.Sluice, "devpick-naive", "devpick-fixed", "cookbook", "inngest-throttle", Greedy}

// Greedy is the reference policy whose utilization the others are measured
// against (forecast.Result.UtilizationVsGreedy).
const Greedy = "greedy"

// ExtraPolicies are run only when named: variants of an anchor that
// docs/bench.md discusses.
var ExtraPolicies = []string{"cookbook-rpm-tpm"}

// RoutedPolicies lists the policies "all" runs on a scenario with targets:
// sluice routing among them, sluice on the first target alone, and models
// of LiteLLM's router (litellm.go). The other policies model one key and
// refuse such a scenario.
var RoutedPolicies = []string{forecast.Sluice, forecast.SluiceOneKey, FixedFallback, LiteLLMShuffle, LiteLLMUsage}

// AllPolicies returns what "all" stands for on sc.
func AllPolicies(sc *forecast.Scenario) []string {
	if sc.Routed() {
		return RoutedPolicies
	}
	return Policies
}

var (
	_ forecast.Policy = (*devpickStarter)(nil)
	_ forecast.Policy = (*cookbookPolicy)(nil)
	_ forecast.Policy = (*inngestPolicy)(nil)
	_ forecast.Policy = (*greedyPolicy)(nil)
)

// newPolicy makes the named policy for sc. It sees only the limits sc
// announces.
func newPolicy(name string, sc *forecast.Scenario) (forecast.Policy, error) {
	sc = sc.Announced()
	switch name {
	case forecast.Sluice:
		return forecast.NewSluice(sc)
	case forecast.SluiceOneKey:
		return forecast.NewSluiceOneKey(sc)
	case FixedFallback, LiteLLMShuffle, LiteLLMUsage:
		return newLiteLLM(name, sc)
	}
	if sc.Routed() {
		for _, n := range append(append([]string(nil), Policies...), ExtraPolicies...) {
			if n == name {
				return nil, fmt.Errorf("policy %s models one provider key, and the scenario lists targets (run %s on it)", name, strings.Join(RoutedPolicies, ", "))
			}
		}
	}
	switch name {
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
	return nil, fmt.Errorf("unknown policy %q (want one of %s, or all)", name, strings.Join(append(append(append([]string(nil), Policies...), ExtraPolicies...), RoutedPolicies[1:]...), ", "))
}

// Options tunes a bench run.
type Options struct {
	// Trace, if set, receives every request the provider model saw as JSON lines.
	Trace io.Writer
}

// Run replays sc under each named policy and returns the report. It stops
// soon after ctx ends, with an error that wraps ctx.Err().
func Run(ctx context.Context, sc *forecast.Scenario, policies []string, opts Options) (*Report, error) {
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
		var fopts forecast.Options
		if enc != nil {
			fopts.Trace = func(r forecast.TraceRecord) {
				r.Policy = name
				if err := enc.Encode(r); err != nil && traceErr == nil {
					traceErr = fmt.Errorf("write trace: %w", err)
				}
			}
		}
		res, err := forecast.Replay(ctx, sc, name, pol, fopts)
		if err != nil {
			return nil, err
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

func round4(x float64) float64 { return math.Round(x*10000) / 10000 }

// WriteSVG draws rep's policies side by side (forecast.WriteSVG), under
// rep.Title or, by default, "sluice bench quota: " and the scenario.
func WriteSVG(out io.Writer, rep *Report) error {
	return forecast.WriteSVG(out, cmp.Or(rep.Title, "sluice bench quota: "+rep.Scenario), rep.Results)
}
