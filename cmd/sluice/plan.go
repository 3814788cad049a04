package main

import (
	"cmp"
	"time"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/internal/plan"
)

func init() {
	register(&cli.Command{
		Name:    "plan",
		Summary: "see a configuration's fate before running it: demand per limit, requests that never fit, ETAs, cost",
		Run:     runPlan,
	})
}

// changes collects --set and --drop-flow in the order given.
type changes []forecast.Change

type setFlag struct{ c *changes }

func (f setFlag) String() string { return "" }
func (f setFlag) Set(s string) error {
	ch, err := forecast.ParseSet(s)
	if err != nil {
		return err
	}
	*f.c = append(*f.c, ch)
	return nil
}

type dropFlag struct{ c *changes }

func (f dropFlag) String() string { return "" }
func (f dropFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("want a flow's name")
	}
	*f.c = append(*f.c, forecast.Change{DropFlow: strings.TrimSpace(s)})
	return nil
}

// whatIf is plan --json's answer when changes are given: both plans.
type whatIf struct {
	Changes []string   `json:"changes"`
	Base    *plan.Plan `json:"base"`
	WhatIf  *plan.Plan `json:"what_if"`
}

func runPlan(ctx context.Context, env *cli.Env, args []string) error {
	var chs changes
	fs := cli.NewFlagSet(env, "plan", "--scenario FILE | --config FILE | --db URL [flags]",
		"Plans a configuration of flows on one provider key (a quota scenario, see docs/plan.md) before\n"+
			"it runs: per limit, the demand per day or in the busiest minute against the limit, real and as\n"+
			"the provider charges it; every flow whose largest request can never fit a limit, with the\n"+
			"largest batch that does; each backlog's ETA and stall risk from a simulation of sluice's\n"+
			"governor (the one `sluice bench quota` runs); and, with prices, the cost per day and per\n"+
			"backlog, and a flow's (a target's) money a day and in 30 days against its own budget and when\n"+
			"that runs out. With --set or --drop-flow it plans the changed configuration too, side by side.\n\n"+
			"Instead of a scenario, --config (a gateway's config file) or --db alone (the configuration an\n"+
			"app last recorded there) gives the key and its flows, and the database the last day's calls\n"+
			"(their sizes, items per call) and each backfill's backlog. A serve config file with jobs: gives\n"+
			"the key and one flow per job, each job's request sizes from its prompt on rows of its source and\n"+
			"its backlog from its source query (docs/jobs.md).\n\n"+
			"Examples:\n"+
			"  sluice plan --scenario devpick.yaml\n"+
			"  sluice plan --scenario devpick.yaml --set tpd=500000 --set flows.summary.weight=2 --drop-flow title\n"+
			"  sluice plan --db sluice.db --set tpd=500000")
	scenarioPath := fs.String("scenario", "", "scenario `FILE` (YAML) to plan")
	configPath := fs.String("config", "", "plan a gateway's key from its config `FILE` and what its database recorded in the last day, or the jobs of a serve config `FILE` from their sources")
	dbURL := fs.String("db", "", "database to read the backlogs and the last day's calls from (default: the gateway config's db, $SLUICE_DB or sluice.db); without --config, plan the key of the configuration the app last recorded there")
	keyName := fs.String("key", "", "with --db alone: the app's provider to plan (default its first)")
	showScenario := fs.Bool("print-scenario", false, "print the scenario derived with --config or --db, in the scenario format, and stop")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	stallAfter := fs.Duration("stall-after", plan.DefaultStallAfter, "time without progress, with work waiting, that counts as a stall")
	svgPath := fs.String("svg", "", "also draw the simulation behind the ETAs (each flow's progress, each limit's use) to this SVG file; with a what-if, both side by side")
	fs.Var(setFlag{&chs}, "set", "`PATH=VALUE` to change for a what-if plan (repeatable): a limit (tpd=500000), provider.KEY, flows.NAME.KEY or duration")
	fs.Var(dropFlag{&chs}, "drop-flow", "`NAME` of a flow to leave out of the what-if plan (repeatable)")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	if *stallAfter <= 0 {
		return fmt.Errorf("--stall-after %s: want a positive duration", *stallAfter)
	}
	data, notes, err := planData(ctx, env, *scenarioPath, *configPath, *dbURL, *keyName)
	if err != nil {
		return err
	}
	if *showScenario && *scenarioPath == "" {
		_, err := env.Stdout.Write(data)
		return err
	}
	base, err := forecast.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", cmp.Or(*scenarioPath, "the derived scenario"), err)
	}
	opts := plan.Options{StallAfter: *stallAfter}
	bp, err := plan.Make(ctx, base, opts)
	if err != nil {
		return err
	}
	bp.Warnings = append(bp.Warnings, notes...)
	if len(chs) == 0 {
		if *svgPath != "" {
			if err := cli.WriteFile(*svgPath, func(w io.Writer) error { return plan.WriteSVG(w, []*plan.Plan{bp}, []string{"plan"}) }); err != nil {
				return err
			}
		}
		if *asJSON {
			return writeJSON(env.Stdout, bp)
		}
		writePlan(env.Stdout, bp, nil)
		return nil
	}
	changed, err := forecast.Edit(data, chs)
	if err != nil {
		return err
	}
	wp, err := plan.Make(ctx, changed, opts)
	if err != nil {
		return err
	}
	wp.Warnings = append(wp.Warnings, notes...)
	if *svgPath != "" {
		if err := cli.WriteFile(*svgPath, func(w io.Writer) error {
			return plan.WriteSVG(w, []*plan.Plan{bp, wp}, []string{"plan", "what if"})
		}); err != nil {
			return err
		}
	}
	if *asJSON {
		w := whatIf{Base: bp, WhatIf: wp}
		for _, c := range chs {
			w.Changes = append(w.Changes, c.String())
		}
		return writeJSON(env.Stdout, w)
	}
	writePlan(env.Stdout, bp, wp)
	return nil
}

// planData reads the scenario to plan: the file, or one derived from a
// gateway's config file or an app's recorded configuration and the
// database's last day, with notes on how it was derived.
func planData(ctx context.Context, env *cli.Env, scenarioPath, configPath, dbURL, keyName string) ([]byte, []string, error) {
	switch {
	case scenarioPath != "" && (configPath != "" || dbURL != ""):
		fmt.Fprintln(env.Stderr, "sluice plan: give --scenario, or --config and/or --db, not both")
		return nil, nil, cli.ErrUsage
	case scenarioPath != "":
		data, err := forecast.Read(scenarioPath)
		return data, nil, err
	case configPath != "":
		// A serve config with jobs: plans them from their sources.
		if data, notes, ok, err := jobsData(ctx, env, configPath, dbURL); ok {
			return data, notes, err
		}
		return observedData(ctx, env, configPath, dbURL, keyName)
	case dbURL != "":
		return observedData(ctx, env, configPath, dbURL, keyName)
	}
	fmt.Fprintln(env.Stderr, "sluice plan: --scenario, or --config and/or --db, is required")
	return nil, nil, cli.ErrUsage
}

// observedData derives a scenario from a gateway's config file or an app's
// recorded configuration, and the database's last day.
func observedData(ctx context.Context, env *cli.Env, configPath, dbURL, keyName string) ([]byte, []string, error) {
	var k plan.Key
	fileDB := ""
	if configPath != "" {
		var err error
		if k, fileDB, err = gatewayKey(configPath); err != nil {
			return nil, nil, err
		}
	}
	db := cmp.Or(dbURL, fileDB, env.Getenv("SLUICE_DB"), "sluice.db")
	st, err := openRecords(ctx, db, "give the database the app or gateway records in")
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	now := time.Now()
	if configPath == "" {
		if k, err = plan.RecordedKey(ctx, st, keyName, now); err != nil {
			if _, ok := errors.AsType[*plan.NothingError](err); ok {
				err = fmt.Errorf("%w (or give the gateway's --config)", err)
			}
			return nil, nil, err
		}
	}
	sc, notes, err := plan.Observed(ctx, st, k, now)
	if err != nil {
		return nil, nil, err
	}
	data, err := forecast.Format(sc)
	return data, notes, err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writePlan prints p as tables; with q, q's figures beside p's.
func writePlan(out io.Writer, p, q *plan.Plan) {
	if q == nil {
		fmt.Fprintf(out, "Plan of %s (ETAs from %s h of sluice's governor, simulated)\n\n", p.Scenario, num.Group(int64(p.SimulatedHours)))
	} else {
		fmt.Fprintf(out, "Plan of %s, and what if (→) (ETAs from %s h of sluice's governor, simulated)\n\n", p.Scenario, num.Group(int64(p.SimulatedHours)))
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', tabwriter.AlignRight)
	if len(p.Limits) == 0 && (q == nil || len(q.Limits) == 0) {
		// A scenario with targets: each target's limits are in its table.
		tw = tabwriter.NewWriter(io.Discard, 2, 8, 2, ' ', 0)
	}
	fmt.Fprintln(tw, "LIMIT\tPER\tLIMIT\tDEMAND\t%\tCHARGED\t%\tBACKLOG\t")
	for l := range governor.NumLimits {
		a, ok := p.Limits[l.String()]
		var b plan.Limit
		okB := false
		if q != nil {
			b, okB = q.Limits[l.String()]
		}
		if !ok && !okB {
			continue
		}
		per := cmp.Or(a.Per, b.Per)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l, per,
			pair(q != nil, ok, okB, func(x plan.Limit) string { return num.Group(x.Limit) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Limit) string { return group(x.Demand) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Limit) string { return pct(x.Ratio) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Limit) string { return group(x.Charged) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Limit) string { return pct(x.ChargedRatio) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Limit) string {
				if x.Per == "minute" {
					return "-"
				}
				return group(x.Backlog)
			}, a, b))
	}
	tw.Flush()
	fmt.Fprintln(out, "DEMAND is real use: a day's for day limits, the busiest minute's of the flows that pace themselves\nfor minute limits (the governor keeps the others within every limit). CHARGED counts max_tokens,\nor the provider's reservation for a request without one. BACKLOG is what the backlogs still need.")
	fmt.Fprintln(out, "OWN PACE is how long a flow that paces itself takes to clear its backlog if nothing is refused;\nETA is when the simulation of sluice's governor clears it (~: carried on from its last day).")
	fmt.Fprintln(out)
	names := flowNames(p, q)
	tw = tabwriter.NewWriter(out, 2, 8, 2, ' ', tabwriter.AlignRight)
	money := p.Money != nil || (q != nil && q.Money != nil)
	head := "FLOW\tPACED BY\tITEMS/DAY\tTOKENS/DAY\tBACKLOG\tOWN PACE\tETA\tSTALL RISK\t"
	if money {
		head += "COST/DAY\tBACKLOG COST\t"
	}
	fmt.Fprintln(tw, head)
	for _, n := range names {
		a, ok := p.Flows[n]
		var b plan.Flow
		okB := false
		if q != nil {
			b, okB = q.Flows[n]
		}
		by := func(x plan.Flow) string {
			if x.Paced {
				return "itself"
			}
			return "governor"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", n,
			pair(q != nil, ok, okB, by, a, b),
			pair(q != nil, ok, okB, func(x plan.Flow) string { return group(x.ItemsPerDay) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Flow) string { return group(x.TokensPerDay) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Flow) string { return num.Group(int64(x.Backlog + x.Fed)) }, a, b),
			pair(q != nil, ok, okB, func(x plan.Flow) string {
				if x.PacedDays == nil {
					return "-"
				}
				return hours(*x.PacedDays * 24)
			}, a, b),
			pair(q != nil, ok, okB, eta, a, b),
			pair(q != nil, ok, okB, func(x plan.Flow) string { return x.StallRisk }, a, b))
		if money {
			line += fmt.Sprintf("%s\t%s\t",
				pair(q != nil, ok, okB, func(x plan.Flow) string { return price(x.CostPerDay) }, a, b),
				pair(q != nil, ok, okB, func(x plan.Flow) string { return price(x.BacklogCost) }, a, b))
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for i, pl := range []*plan.Plan{p, q} {
		if pl != nil && flowBudgets(pl) {
			writeFlowBudgets(out, pl, q != nil && i == 1)
		}
	}
	for i, pl := range []*plan.Plan{p, q} {
		if pl != nil && len(pl.Targets) > 0 {
			writeTargets(out, pl, q != nil && i == 1)
		}
	}
	for i, pl := range []*plan.Plan{p, q} {
		if pl == nil {
			continue
		}
		title := "Warnings"
		if q != nil {
			title = []string{"Warnings", "Warnings, what if"}[i]
		}
		if len(pl.Warnings) > 0 {
			fmt.Fprintf(out, "\n%s:\n", title)
			for _, w := range pl.Warnings {
				fmt.Fprintf(out, "  - %s\n", w)
			}
		}
	}
}

// writeTargets prints the targets of a plan of a scenario with targets:
// the demand the routes give each, its money against its budgets, and when
// a budget runs out.
func writeTargets(out io.Writer, p *plan.Plan, whatIf bool) {
	title := "Targets"
	if whatIf {
		title = "Targets, what if"
	}
	fmt.Fprintf(out, "\n%s (the demand sluice's routes give each in the simulation, a day on average):\n", title)
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TARGET\tITEMS/DAY\tREQUESTS/DAY\tTOKENS/DAY\tRPD %\tTPD %\tMONEY/DAY\tMONEY/30 DAYS\tBUDGET/DAY\tBUDGET/MONTH\tBUDGET RUNS OUT\t")
	for _, t := range p.Targets {
		limit := func(name string) string {
			if l, ok := t.Limits[name]; ok {
				return pct(l.Ratio)
			}
			return "-"
		}
		money := func(x float64) string {
			if t.Unpriced {
				return "free"
			}
			return fmt.Sprintf("%.2f", x)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, group(t.ItemsPerDay), group(t.RequestsPerDay),
			group(t.TokensPerDay), limit("rpd"), limit("tpd"), spendCells(t.Spend, p.SimulatedHours, money))
	}
	tw.Flush()
}

// writeFlowBudgets prints the flows of p that have a budget of their own:
// their money against it, and when it runs out.
func writeFlowBudgets(out io.Writer, p *plan.Plan, whatIf bool) {
	title := "Flows' own budgets"
	if whatIf {
		title += ", what if"
	}
	fmt.Fprintf(out, "\n%s (their spend in the simulation, a day on average):\n", title)
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "FLOW\tMONEY/DAY\tMONEY/30 DAYS\tBUDGET/DAY\tBUDGET/MONTH\tBUDGET RUNS OUT\t")
	money := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	for _, n := range flowNames(p, nil) {
		if f := p.Flows[n]; f.Spend != nil {
			fmt.Fprintf(tw, "%s\t%s\n", n, spendCells(*f.Spend, p.SimulatedHours, money))
		}
	}
	tw.Flush()
}

// flowBudgets reports whether a flow of p has a budget of its own.
func flowBudgets(p *plan.Plan) bool {
	for _, f := range p.Flows {
		if f.Spend != nil {
			return true
		}
	}
	return false
}

// spendCells are the cells of a target's or a flow's money against its
// budgets, in a simulation of hours: money a day and in 30 days (as money
// writes it), the budgets, and when each runs out.
func spendCells(s plan.Spend, hours float64, money func(float64) string) string {
	budget := func(x float64) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", x)
	}
	var runs []string
	for _, b := range []struct {
		name string
		b    *plan.Budget
	}{{"day", s.DayBudget}, {"month", s.MonthBudget}} {
		switch {
		case b.b == nil:
		case b.b.RunsOutHours != nil:
			runs = append(runs, fmt.Sprintf("%s: at %s h", b.name, group(*b.b.RunsOutHours)))
		case b.b.Days != nil:
			runs = append(runs, fmt.Sprintf("%s: not within %s h (in ~%s days at this rate)", b.name, group(hours), group(*b.b.Days)))
		default:
			runs = append(runs, fmt.Sprintf("%s: not within %s h", b.name, group(hours)))
		}
	}
	if len(runs) == 0 {
		runs = []string{"-"}
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t", money(s.MoneyPerDay), money(s.Money30Days), budget(s.BudgetDay), budget(s.BudgetMonth), strings.Join(runs, "; "))
}

// eta says when a flow's backlog is done.
func eta(f plan.Flow) string {
	switch f.EtaFrom {
	case "arrivals":
		return "p95 wait " + minutes(f.P95WaitMinutes)
	case "never":
		return "never"
	}
	s := hours(*f.EtaHours)
	if f.EtaFrom == "extrapolated" {
		s = "~" + s
	}
	return s
}

func hours(h float64) string {
	if h >= 48 {
		return fmt.Sprintf("%.1f d", h/24)
	}
	return fmt.Sprintf("%.1f h", h)
}

func minutes(m float64) string {
	if m >= 120 {
		return hours(m / 60)
	}
	return fmt.Sprintf("%.0f min", m)
}

// pair is f of a, or with a what-if, "f(a) → f(b)" (one side may be absent).
func pair[T any](both, okA, okB bool, f func(T) string, a, b T) string {
	if !both {
		return f(a)
	}
	sa, sb := "-", "-"
	if okA {
		sa = f(a)
	}
	if okB {
		sb = f(b)
	}
	if sa == sb {
		return sa
	}
	return sa + " → " + sb
}

func flowNames(p, q *plan.Plan) []string {
	var names []string
	for _, pl := range []*plan.Plan{p, q} {
		if pl == nil {
			continue
		}
		for n := range pl.Flows {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

func group(x float64) string { return num.Group(int64(math.Round(x))) }

func pct(r float64) string { return fmt.Sprintf("%.1f", 100*r) }

func price(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *x)
}
