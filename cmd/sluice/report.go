package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/chart"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/internal/report"
	"github.com/sluice-dev/sluice/internal/store"
)

func init() {
	register(&cli.Command{
		Name:    "report",
		Summary: "what happened over a window, from sluice's records: rates, rejections by limit, stalls, spend against budgets, and which change helped",
		Run:     runReport,
	})
}

func runReport(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "report", "[flags]",
		"Reports, from sluice's own records in its database, what each job did over a window: items\n"+
			"done per hour, the provider's rejections and the governor's refusals by the limit they named,\n"+
			"the intervals it was stalled, on a key with a price the money spent and against which budget,\n"+
			"and every change of the configuration (limits, flows, weights, batch sizes, code version,\n"+
			"recorded at each start) with each job's rate before and after it, naming the change each\n"+
			"job's largest rise came with (docs/report.md).\n\n"+
			"Example:\n  sluice report --since 48h --db sluice.db")
	dbURL := fs.String("db", "", "database: an SQLite path or postgres://… URL (default $SLUICE_DB or sluice.db)")
	sinceF := fs.String("since", "48h", "start of the window: a duration before --until (48h) or a time (2026-10-18T00:00:00Z)")
	untilF := fs.String("until", "", "end of the window: a time (default now on the app's clock: the wall clock, or the latest time the app recorded when its clock ran ahead of it, as a demo's does)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	svgPath := fs.String("svg", "", "also draw each job's items per hour, rejections, stalls and the changes, and its spend per hour on a priced key, to this SVG file")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	wall := time.Now().UTC()
	until, label := wall, ""
	if *untilF != "" {
		t, err := time.Parse(time.RFC3339, *untilF)
		if err != nil {
			return fmt.Errorf("--until %q: want a time such as 2026-10-19T08:00:00Z", *untilF)
		}
		until = t
	}
	// The window's bounds are checked before the database is opened, but
	// a time --since without --until: the app's clock may be ahead.
	if _, err := parseSince(*sinceF, until); err != nil {
		if _, derr := time.ParseDuration(*sinceF); derr == nil || *untilF != "" {
			return err
		}
		if _, terr := time.Parse(time.RFC3339, *sinceF); terr != nil {
			return err
		}
	}
	db := cmp.Or(*dbURL, env.Getenv("SLUICE_DB"), "sluice.db")
	st, err := openRecords(ctx, db, "give the database sluice serve or the gateway records in")
	if err != nil {
		return err
	}
	defer st.Close()
	if *untilF == "" {
		if until, err = appClock(ctx, st, wall); err != nil {
			return err
		}
		if !until.Equal(wall) {
			label = "the app's clock: its latest record, " + progress.Span(until.Sub(wall)) + " ahead of the wall clock"
		}
	}
	since, err := parseSince(*sinceF, until)
	if err != nil {
		return err
	}
	rep, err := loadReport(ctx, st, since, until)
	if err != nil {
		return err
	}
	rep.Clock = label
	if *svgPath != "" {
		if err := cli.WriteFile(*svgPath, func(w io.Writer) error { return writeReportSVG(w, rep) }); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(env.Stdout, rep)
	}
	writeReport(env.Stdout, rep)
	return nil
}

// openRecords opens the store at db to read what a sluice process recorded
// there. A SQLite file that is not there is an error saying hint, never a
// new empty database.
func openRecords(ctx context.Context, db, hint string) (store.Store, error) {
	if !cli.IsPostgresURL(db) {
		if _, err := os.Stat(db); err != nil {
			return nil, fmt.Errorf("--db %s: %w (%s)", db, err, hint)
		}
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	return st, nil
}

// appClock is the app's clock as its records in st leave it, the end of a
// report's window by default: the wall clock, or the latest time the app
// recorded when that is later — its jobs' last runs and progress, its
// configurations' starts, its samples — as an app whose clock runs ahead
// of the wall clock leaves them (a demo in compressed time). Only the
// samples after wall are read.
func appClock(ctx context.Context, st store.Store, wall time.Time) (time.Time, error) {
	latest := wall
	jobs, err := st.Jobs(ctx)
	if err != nil {
		return latest, fmt.Errorf("read the jobs: %w", err)
	}
	for _, j := range jobs {
		latest = laterOf(latest, j.LastRunAt, j.LastProgressAt)
	}
	versions, err := st.ConfigVersions(ctx, wall)
	if err != nil {
		return latest, fmt.Errorf("read the configuration versions: %w", err)
	}
	for _, v := range versions {
		latest = laterOf(latest, v.At)
	}
	samples, err := st.Samples(ctx, wall, wall.Add(maxReportWindow), "")
	if err != nil {
		return latest, fmt.Errorf("read the samples: %w", err)
	}
	for _, s := range samples {
		// The window ends before its until: a sample at the latest time
		// is in it.
		latest = laterOf(latest, s.At.Add(time.Millisecond))
	}
	return latest.UTC(), nil
}

// laterOf is the latest of t and ts.
func laterOf(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// maxReportWindow bounds a report's window: a year of hourly figures.
const maxReportWindow = 366 * 24 * time.Hour

func parseSince(s string, until time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 || d > maxReportWindow {
			return time.Time{}, fmt.Errorf("--since %s: want a duration from 1m to %s", s, maxReportWindow)
		}
		return until.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration such as 48h or a time such as 2026-10-18T00:00:00Z", s)
	}
	if !t.Before(until) || until.Sub(t) > maxReportWindow {
		return time.Time{}, fmt.Errorf("--since %s: want a time before --until and at most %s before it", s, maxReportWindow)
	}
	return t, nil
}

func loadReport(ctx context.Context, st store.Store, since, until time.Time) (*report.Report, error) {
	samples, err := st.Samples(ctx, since, until, "")
	if err != nil {
		return nil, fmt.Errorf("read the samples: %w", err)
	}
	versions, err := st.ConfigVersions(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("read the configuration versions: %w", err)
	}
	return report.Make(since, until, samples, versions)
}

// spark draws values as one bar character each, scaled to their largest.
func spark(values []int64) string {
	bars := []rune("▁▂▃▄▅▆▇█")
	var top int64
	for _, v := range values {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range values {
		switch {
		case v == 0:
			b.WriteRune('·')
		default:
			i := int(math.Ceil(float64(v)/float64(top)*float64(len(bars)))) - 1
			b.WriteRune(bars[min(max(i, 0), len(bars)-1)])
		}
	}
	return b.String()
}

func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func writeReport(out io.Writer, r *report.Report) {
	const layout = "2006-01-02 15:04"
	fmt.Fprintf(out, "Report from %s to %s UTC (%s)", r.Since.Format(layout), r.Until.Format(layout), hours(r.Until.Sub(r.Since).Hours()))
	if r.Clock != "" {
		fmt.Fprintf(out, ", on %s", r.Clock)
	}
	fmt.Fprint(out, "\n\n")
	names := slices.Sorted(maps.Keys(r.Jobs))
	if len(names) == 0 {
		fmt.Fprintln(out, "No job was sampled in the window: sluice records a sample of each job every minute while it runs.")
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	if len(names) > 0 {
		fmt.Fprintln(tw, "JOB\tDONE\tRATE/H\tSTATE\tREJECTIONS\tREFUSALS\tSTALLED\t")
	}
	for _, n := range names {
		j := r.Jobs[n]
		var stalled time.Duration
		for _, s := range j.Stalls {
			stalled += s.To.Sub(s.From)
		}
		st := "-"
		if len(j.Stalls) > 0 {
			st = fmt.Sprintf("%d× %s", len(j.Stalls), hours(stalled.Hours()))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%s\t%s\t\n", n, j.Done, j.RatePerHour, cmp.Or(j.State, "-"), counts(j.Rejections), counts(j.Refusals), st)
	}
	tw.Flush()
	if len(names) > 0 {
		fmt.Fprintf(out, "\nItems per hour, one mark an hour from %s (· none):\n", r.Since.Format(layout))
		width := 0
		for _, n := range names {
			width = max(width, len(n))
		}
		for _, n := range names {
			hs := r.Jobs[n].Hours
			vals := make([]int64, len(hs))
			for i, h := range hs {
				vals[i] = h.Done
			}
			fmt.Fprintf(out, "  %-*s  %s\n", width, n, spark(vals))
		}
	}
	writeSpend(out, r, names)
	if len(r.Versions) > 0 {
		fmt.Fprintln(out, "\nConfiguration in effect, then each change:")
	}
	changes := map[string]report.Change{}
	for _, c := range r.Changes {
		changes[c.Hash+c.At.String()] = c
	}
	for _, v := range r.Versions {
		fmt.Fprintf(out, "  %s  %s  %s  code %s\n", v.At.Format(layout), v.Source, short(v.Hash), cmp.Or(v.Code, "(unknown)"))
		for _, d := range v.Diff {
			fmt.Fprintf(out, "      %s\n", d)
		}
		c, ok := changes[v.Hash+v.At.String()]
		if !ok {
			continue
		}
		for _, n := range slices.Sorted(maps.Keys(c.Jobs)) {
			d := c.Jobs[n]
			mark := ""
			if slices.Contains(c.Helped, n) {
				mark = "   ← the change its largest rise came with"
			}
			fmt.Fprintf(out, "      %s: %.1f → %.1f items/h (%+.1f)%s\n", n, d.Before, d.After, d.Difference, mark)
		}
	}
}

func short(hash string) string { return hash[:min(len(hash), 12)] }

// writeSpend writes, for each of the jobs names on a key with a price, the
// money spent in the window and per day, each budget that applied at its
// last sample against what it had counted, and its spend per hour as
// marks. It writes nothing when no job is on a priced key.
func writeSpend(out io.Writer, r *report.Report, names []string) {
	var priced []string
	width := 0
	for _, n := range names {
		if r.Jobs[n].Spend != nil {
			priced = append(priced, n)
			width = max(width, len(n))
		}
	}
	if len(priced) == 0 {
		return
	}
	fmt.Fprintln(out, "\nSpend, in money (the unit of the key's prices), and against each budget at the job's last sample:")
	for _, n := range priced {
		sp := r.Jobs[n].Spend
		fmt.Fprintf(out, "  %-*s  %s in the window, %s a day\n", width, n, governor.FormatMoney(sp.SpentNano), governor.FormatMoney(sp.PerDayNano))
		for _, b := range sp.Budgets {
			fmt.Fprintf(out, "  %-*s    %s\n", width, "", budgetLine(b))
		}
	}
	fmt.Fprintf(out, "\nSpend per hour, one mark an hour from %s (money; · none):\n", r.Since.Format("2006-01-02 15:04"))
	for _, n := range priced {
		hs := r.Jobs[n].Hours
		vals := make([]int64, len(hs))
		for i, h := range hs {
			vals[i] = h.MoneyNano
		}
		fmt.Fprintf(out, "  %-*s  %s\n", width, n, spark(vals))
	}
}

// budgetLine says what a budget had counted against it: "spend 1.84 of
// 2.00/day (92 %), the flow's own budget".
func budgetLine(b report.BudgetUse) string {
	whose := "the flow's own budget"
	if b.Of == "key" {
		whose = "the key's budget, all its flows"
	}
	return fmt.Sprintf("spend %s of %s/%s (%s), %s", governor.FormatMoney(b.SpentNano), governor.FormatMoney(b.BudgetNano), b.Period, percent(b.Ratio), whose)
}

// percent writes a ratio as "92 %", with a decimal under 10 %.
func percent(ratio float64) string {
	p := ratio * 100
	if p != 0 && math.Abs(p) < 10 {
		return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64) + " %"
	}
	return strconv.FormatFloat(math.Round(p), 'f', -1, 64) + " %"
}

// writeReportSVG draws one panel per job: its items per hour, its stalls
// shaded, the provider's rejections and the governor's refusals marked, and
// each change of the configuration as a narrow band; every panel on one
// scale. A job on a key with a price has a second panel below its first,
// of its money spent per hour against each budget's even pace; those
// panels share a scale of their own.
func writeReportSVG(w io.Writer, r *report.Report) error {
	c := chart.Chart{Title: fmt.Sprintf("sluice report: %s to %s UTC", r.Since.Format("2006-01-02 15:04"), r.Until.Format("2006-01-02 15:04")),
		Hours: r.Until.Sub(r.Since).Hours(), Start: r.Since}
	hourOf := func(t time.Time) float64 { return t.Sub(r.Since).Hours() }
	var panels []*chart.Panel
	spend := spendPanels(r)
	var order []*chart.Panel // each job's panel, then its spend's
	for _, name := range slices.Sorted(maps.Keys(r.Jobs)) {
		j := r.Jobs[name]
		p := &chart.Panel{Title: name + ": items done per hour", Unit: "items/h"}
		s := chart.Series{Name: "items done"}
		for i, h := range j.Hours {
			s.Hours = append(s.Hours, float64(i)+0.5)
			s.Values = append(s.Values, float64(h.Done))
			for _, k := range slices.Sorted(maps.Keys(h.Rejections)) {
				p.Marks = append(p.Marks, chart.Mark{Hour: float64(i) + 0.5, Label: "provider rejection on " + k, Count: int(min(h.Rejections[k], math.MaxInt32))})
			}
			for _, k := range slices.Sorted(maps.Keys(h.Refusals)) {
				p.Marks = append(p.Marks, chart.Mark{Hour: float64(i) + 0.5, Label: "refused up front, never fits " + k, Count: int(min(h.Refusals[k], math.MaxInt32))})
			}
		}
		p.Series = append(p.Series, s)
		for _, st := range j.Stalls {
			p.Bands = append(p.Bands, chart.Band{From: hourOf(st.From), To: hourOf(st.To), Label: "stalled"})
		}
		for _, ch := range r.Changes {
			at := hourOf(ch.At)
			p.Bands = append(p.Bands, chart.Band{From: at, To: at + c.Hours/400, Label: "configuration change " + short(ch.Hash)})
		}
		panels = append(panels, p)
		order = append(order, p)
		if sp := spend[name]; sp != nil {
			order = append(order, sp)
		}
	}
	chart.SharedScale(panels)
	chart.SharedScale(slices.Collect(maps.Values(spend)))
	for _, p := range order {
		c.Panels = append(c.Panels, *p)
	}
	return chart.Write(w, c)
}

// spendPanels draws, for each job on a key with a price, its money spent
// in each hour of the window, with each budget that applied at its last
// sample as a line at that budget's even pace: a day's budget over 24
// hours, a month's over 720. Spend above a line spends the budget faster
// than its period allows.
func spendPanels(r *report.Report) map[string]*chart.Panel {
	out := map[string]*chart.Panel{}
	for name, j := range r.Jobs {
		if j.Spend == nil {
			continue
		}
		p := &chart.Panel{Title: name + ": money spent per hour", Unit: "money/h"}
		s := chart.Series{Name: "spent"}
		for i, h := range j.Hours {
			s.Hours = append(s.Hours, float64(i)+0.5)
			s.Values = append(s.Values, float64(h.MoneyNano)/governor.Nano)
		}
		p.Series = append(p.Series, s)
		for _, b := range j.Spend.Budgets {
			hours := 24.0
			if b.Period == "month" {
				hours = governor.Month.Hours()
			}
			whose := "own"
			if b.Of == "key" {
				whose = "key's"
			}
			p.Lines = append(p.Lines, chart.Line{Value: float64(b.BudgetNano) / governor.Nano / hours,
				Label: fmt.Sprintf("%s budget %s/%s, even pace", whose, governor.FormatMoney(b.BudgetNano), b.Period)})
		}
		out[name] = p
	}
	return out
}
