package benchcmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
)

func newQuotaCommand(Config) *cli.Command {
	return &cli.Command{
		Name:    "quota",
		Summary: "replay a quota scenario in virtual time under sluice and the alternatives",
		Run:     runBenchQuota,
	}
}

func runBenchQuota(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "bench quota", "--scenario FILE [flags]",
		"Replays a quota scenario (see docs/bench.md) in virtual time under one policy or all of them\n"+
			"and reports, per policy, each limit's use, the work done and each flow's stalls and waits.\n"+
			"Policies (all): "+strings.Join(bench.Policies, ", ")+"; by name only: "+strings.Join(bench.ExtraPolicies, ", ")+".\n"+
			"On a scenario with targets (all): "+strings.Join(bench.RoutedPolicies, ", ")+".")
	scenarioPath := fs.String("scenario", "", "scenario file (YAML, required)")
	policy := fs.String("policy", "all", `policies to run, comma-separated; "all" stands for every policy but those run by name only`)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	svgPath := fs.String("svg", "", "also draw every policy's progress, each flow's items done, each limit's use per hour and the provider's rejections to this SVG file")
	tracePath := fs.String("trace", "", "also write every request the provider model saw to this file, one JSON object a line")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	if *scenarioPath == "" {
		fmt.Fprintln(env.Stderr, "sluice bench quota: --scenario is required")
		return cli.ErrUsage
	}
	sc, err := forecast.Load(*scenarioPath)
	if err != nil {
		return err
	}
	// The scenario bounds keep a run's live memory under about 1.5 GB; a
	// soft limit keeps the garbage collector from letting it double
	// (docs/bench.md). GOMEMLIMIT, when set, wins.
	if env.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(quotaMemoryLimit))
	}
	// "all" stands for every policy of bench.Policies (bench.RoutedPolicies
	// on a scenario with targets), alone or in a list
	// ("all,cookbook-rpm-tpm").
	var policies []string
	for _, name := range strings.Split(*policy, ",") {
		if name == "all" {
			policies = append(policies, bench.AllPolicies(sc)...)
		} else {
			policies = append(policies, name)
		}
	}
	var opts bench.Options
	if *tracePath != "" {
		f, err := os.Create(*tracePath)
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		defer f.Close()
		opts.Trace = f
	}
	rep, err := bench.Run(ctx, sc, policies, opts)
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("bench quota interrupted, no report: %w", err)
	}
	if err != nil {
		return err
	}
	if *svgPath != "" {
		if err := cli.WriteFile(*svgPath, func(w io.Writer) error { return bench.WriteSVG(w, rep) }); err != nil {
			return fmt.Errorf("svg: %w", err)
		}
	}
	return printReport(env.Stdout, *asJSON, "  ", rep, func(w io.Writer) { printQuotaReport(w, rep) })
}

// quotaMemoryLimit is the soft memory limit of a quota bench run.
const quotaMemoryLimit = 1536 << 20

func printQuotaReport(w io.Writer, rep *bench.Report) {
	fmt.Fprintf(w, "scenario %s\n\n", rep.Scenario)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	// The column "vs greedy" is there when the greedy reference ran.
	vsGreedy := len(rep.Results) > 0 && rep.Results[0].UtilizationVsGreedy != nil
	head := "policy\tbottleneck\tutilization\t"
	if vsGreedy {
		head += "vs greedy\t"
	}
	fmt.Fprintln(tw, head+"work_tokens\t429\t413\twall s\t")
	for _, r := range rep.Results {
		// A scenario with targets has no key's limits: each target's are
		// in the tables below.
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t", r.Policy, cmp.Or(r.Bottleneck, "-"), r.BottleneckUtilization)
		if vsGreedy {
			fmt.Fprintf(tw, "%.4f\t", *r.UtilizationVsGreedy)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.2f\t\n", r.WorkTokens, r.ProviderRejections["429"], r.ProviderRejections["413"], r.WallSeconds)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tflow\tdone\tremaining\trequests\ttokens\twork_tokens\tnever_fit\tmax_stall_min\tp95_wait_min\tmax_wait_min\t")
	for _, r := range rep.Results {
		for _, name := range sortedKeys(r.Flows) {
			f := r.Flows[name]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n", r.Policy, name, f.Done, f.Remaining,
				f.Requests, f.Tokens, f.WorkTokens, f.NeverFit, f.MaxStallMinutes, f.P95WaitMinutes, f.MaxWaitMinutes)
		}
	}
	tw.Flush()
	printRoutedReport(w, rep)
}

// printRoutedReport adds, for a scenario with targets, each policy's money
// and work, each target's part and each outage's times.
func printRoutedReport(w io.Writer, rep *bench.Report) {
	if len(rep.Results) == 0 || !rep.Results[0].Routed() {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tspend\twork_tokens\twork_per_dollar\tdouble_runs\tlost\t")
	for _, r := range rep.Results {
		wpd := "-"
		if r.WorkPerDollar != nil {
			wpd = fmt.Sprintf("%.0f", *r.WorkPerDollar)
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%d\t%s\t%d\t%d\t\n", r.Policy, r.Spend, r.WorkTokens, wpd, r.DoubleRuns, r.Lost)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\ttarget\trequests\ttokens\tdone\tspend\tmax_day_spend\tbudget_day\t429\t413\toutage_failures\t")
	for _, r := range rep.Results {
		for _, t := range r.Targets {
			budget := "-"
			if t.BudgetDay != nil {
				budget = fmt.Sprintf("%.4f", *t.BudgetDay)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.4f\t%.4f\t%s\t%d\t%d\t%d\t\n", r.Policy, t.Name, t.Requests, t.Tokens, t.Done,
				t.Spend, t.MaxDaySpend, budget, t.ProviderRejections["429"], t.ProviderRejections["413"], t.OutageFailures)
		}
	}
	tw.Flush()
	if len(rep.Results[0].Outages) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\ttarget\toutage\tstart_s\tend_s\tfallback_after_s\tback_after_s\t")
	seconds := func(v *float64) string {
		if v == nil {
			return "never"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	for _, r := range rep.Results {
		for _, o := range r.Outages {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t\n", r.Policy, o.Target, o.Mode, o.StartSeconds, o.EndSeconds,
				seconds(o.FallbackAfterSeconds), seconds(o.BackAfterSeconds))
		}
	}
	tw.Flush()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
