package ui

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/chart"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/internal/store"
)

// The overview's chart: the last day of samples, averaged over buckets.
const (
	chartWindow = 24 * time.Hour
	chartBucket = 5 * time.Minute
	rateWindow  = time.Hour // a flow's admitted rate is over the last hour of samples
	chartTop    = 200       // % of a limit: the top of the chart's y-axis
)

type overviewView struct {
	Versions  []versionView // the notice of other versions' runs
	Keys      []keyView
	States    []stateCount // the flows by state
	HistoryOn bool
}

type stateCount struct {
	State health.State
	Count int
}

// keyView is one provider key on the overview.
type keyView struct {
	Key        string
	Limits     []gaugeView // the limits in force but budgets, in governor.Limit order
	Holds      []waitView  // waits that are on no one limit: a provider pause, a turn
	Chart      template.HTML
	ChartNote  string
	Rejections []rejectionView
	Flows      []keyFlowView
	// Cluster lists each flow on every process of the cluster, with the
	// sums; empty when the process is not one of a cluster.
	Cluster []clusterFlowView
	// Spend is the key's money, on a key with a price; nil without one.
	Spend *spendView
}

// spendView is what a priced key's calls cost: its budgets now, each flow's
// spend and own budgets, and the last day's spend over time. Amounts are
// in billionths of the unit of the key's prices (governor.Nano).
type spendView struct {
	// Budgets are the key's budgets in force (mpd, mpm) as gauges in
	// money.
	Budgets []gaugeView
	// Day is what the key's calls cost in the last 24 hours, shown when
	// no budget per day does.
	Day       int64
	ShowDay   bool
	Flows     []flowSpendView
	Chart     template.HTML
	ChartNote string
}

// flowSpendView is one flow's money on a priced key.
type flowSpendView struct {
	Name  string
	Link  bool  // it has a flow page
	Spent int64 // since the process started
	// Day is what its samples of the last 24 hours say it spent; HasDay
	// that it has some.
	Day    int64
	HasDay bool
	// Budgets are its own budgets (per day, per month) with what each
	// counted.
	Budgets []gaugeView
}

// ClusterFlow is one flow on one process of a cluster (Config.Cluster).
type ClusterFlow struct {
	Node, Flow string
	Waiting    int64
	Admitted   int64
	Tokens     int64
}

// clusterFlowView is a flow's row of the cluster's table: one process's,
// or (Node "") the sum of every process's.
type clusterFlowView struct {
	ClusterFlow
	Total bool
}

// gaugeView is one limit of a key now.
type gaugeView struct {
	Limit string // "tpm"
	Title string // "tokens per minute"
	Unit  string // "tokens"
	// Money says the figures are money, in billionths (a budget): they
	// are written as money.
	Money   bool
	Used    int64
	Max     int64
	Left    int64
	Ratio   float64
	Width   float64 // of the bar, out of 100
	Level   string  // ok, high, full
	ResetAt time.Time
	Waiting []waitView // the flows whose first waiting call this limit holds back
}

// waitView is a flow's calls waiting on one thing.
type waitView struct {
	Flow   string
	Link   bool // the flow has a flow page
	Calls  int
	On     string // as governor.Blocker.String says it: "tpm", "tpd pacing"
	Pacing bool   // the day pacer holds them back, not a full window
	Until  time.Time
}

type rejectionView struct {
	Limit      string
	InForce    bool
	Rejections int64 // the provider's, since the process started
	Refusals   int64 // the governor's, up front, since the process started
	Day        int64 // the provider's, in the last 24 h of samples
}

type keyFlowView struct {
	Name         string
	Link         bool // it has a flow page
	Weight       float64
	Priority     int
	Share        float64 // of the key, among all its flows
	Waiting      int
	Parked       int
	Admitted     int64
	Tokens       int64
	PerHour      float64
	HasRate      bool
	WaitingOn    string
	WaitingUntil time.Time
	// Fig is the job's progress, as every page shows it; nil for a flow
	// the health monitor does not judge.
	Fig *progress.Figures
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) error {
	now := h.cfg.AppNow()
	var flows []health.Flow
	if h.cfg.Health != nil {
		flows = h.cfg.Health.Flows()
	}
	known := make(map[string]bool, len(flows))
	figs := make(map[string]progress.Figures, len(flows))
	counts := map[health.State]int{}
	for _, f := range flows {
		known[f.Name] = true
		figs[f.Name] = progress.Of(f, now)
		counts[f.State]++
	}
	v := overviewView{HistoryOn: h.cfg.History != nil}
	var err error
	if v.Versions, err = h.otherVersions(r.Context()); err != nil {
		return fmt.Errorf("count the runs of other versions: %w", err)
	}
	for _, s := range []health.State{health.Stalled, health.Failing, health.WaitingForQuota, health.Progressing, health.Idle, health.Done} {
		if counts[s] > 0 {
			v.States = append(v.States, stateCount{State: s, Count: counts[s]})
		}
	}
	var keys []governor.Stats
	if h.cfg.Keys != nil {
		keys = slices.Clone(h.cfg.Keys(r.Context(), now))
	}
	slices.SortFunc(keys, func(a, b governor.Stats) int { return strings.Compare(a.Key, b.Key) })
	for i, k := range keys {
		samples, err := h.keySamples(r.Context(), k, now)
		if err != nil {
			return fmt.Errorf("read the samples of key %s: %w", k.Key, err)
		}
		kv, err := keyOf(k, samples, known, now, i)
		for j := range kv.Flows {
			if f, ok := figs[kv.Flows[j].Name]; ok {
				kv.Flows[j].Fig = &f
			}
		}
		if err != nil {
			return err
		}
		if h.cfg.Cluster != nil {
			rows, err := h.cfg.Cluster(r.Context(), k.Key)
			if err != nil {
				return fmt.Errorf("read the cluster's flows of key %s: %w", k.Key, err)
			}
			kv.Cluster = clusterRows(rows)
		}
		v.Keys = append(v.Keys, kv)
	}
	h.renderLiveAt(w, r, "overview", "Overview", "overview", v, now)
	return nil
}

// clusterRows lays out the cluster's flows, sorted by flow and then
// process: each flow's processes, then their sum when there are several.
func clusterRows(rows []ClusterFlow) []clusterFlowView {
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b ClusterFlow) int {
		return cmp.Or(strings.Compare(a.Flow, b.Flow), strings.Compare(a.Node, b.Node))
	})
	var out []clusterFlowView
	for i := 0; i < len(rows); {
		j, sum := i, ClusterFlow{Flow: rows[i].Flow}
		for ; j < len(rows) && rows[j].Flow == rows[i].Flow; j++ {
			out = append(out, clusterFlowView{ClusterFlow: rows[j]})
			sum.Waiting += rows[j].Waiting
			sum.Admitted += rows[j].Admitted
			sum.Tokens += rows[j].Tokens
		}
		if j-i > 1 {
			out = append(out, clusterFlowView{ClusterFlow: sum, Total: true})
		}
		i = j
	}
	return out
}

// keySamples reads the last day's samples of the key's flows, a flow at a
// time: each read is one range of the samples' primary key.
func (h *Handler) keySamples(ctx context.Context, k governor.Stats, now time.Time) ([]store.Sample, error) {
	if h.cfg.History == nil {
		return nil, nil
	}
	var out []store.Sample
	for _, f := range k.Flows {
		s, err := h.cfg.History.Samples(ctx, now.Add(-chartWindow), now.Add(time.Second), f.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	return out, nil
}

// keyOf builds key k's view at now from its samples of the last day.
// known names the flows that have a flow page; i numbers the key's chart
// on the page.
func keyOf(k governor.Stats, samples []store.Sample, known map[string]bool, now time.Time, i int) (keyView, error) {
	kv := keyView{Key: k.Key}
	var budgets []gaugeView
	for l := range governor.NumLimits {
		ls := k.Limits[l]
		if ls.Max <= 0 {
			continue // not in force
		}
		g := gauge(l, ls.Used, ls.Max, ls.ResetAt)
		for _, f := range k.Flows {
			if b := f.WaitingOn; f.Waiting > 0 && (b.Kind == "limit" || b.Kind == "pacing") && b.Limit == l {
				g.Waiting = append(g.Waiting, waitView{Flow: f.Name, Link: known[f.Name], Calls: f.Waiting, On: b.String(), Pacing: b.Kind == "pacing", Until: b.Until})
			}
		}
		if l.Budget() {
			budgets = append(budgets, g) // shown with the key's spend
			continue
		}
		kv.Limits = append(kv.Limits, g)
	}
	var shares float64
	for _, f := range k.Flows {
		shares += f.Share
	}
	// The admitted rate of each flow, over the last hour of samples.
	admitted, sampled := map[string]int64{}, map[string]bool{}
	day := map[string]int64{}
	for _, s := range samples {
		for name, n := range s.Rejections {
			day[name] += n
		}
		if s.At.After(now.Add(-rateWindow)) {
			admitted[s.Flow] += s.Admitted
			sampled[s.Flow] = true
		}
	}
	var rejections, refusals [governor.NumLimits]int64
	for _, f := range k.Flows {
		fv := keyFlowView{Name: f.Name, Link: known[f.Name], Weight: f.Weight, Priority: f.Priority, Share: ratio(f.Share, shares),
			Waiting: f.Waiting, Parked: f.Parked, Admitted: f.Admitted, Tokens: f.Tokens.Tokens()}
		if sampled[f.Name] {
			fv.HasRate, fv.PerHour = true, float64(admitted[f.Name])*float64(time.Hour)/float64(rateWindow)
		}
		if f.Waiting > 0 && f.WaitingOn.Kind != "" {
			fv.WaitingOn, fv.WaitingUntil = f.WaitingOn.String(), f.WaitingOn.Until
			if b := f.WaitingOn; b.Kind == "pause" || b.Kind == "turn" {
				kv.Holds = append(kv.Holds, waitView{Flow: f.Name, Link: known[f.Name], Calls: f.Waiting, On: b.String(), Until: b.Until})
			}
		}
		kv.Flows = append(kv.Flows, fv)
		for l := range governor.NumLimits {
			rejections[l] += f.Rejections[l]
			refusals[l] += f.Refusals[l]
		}
	}
	for l := range governor.NumLimits {
		inForce := k.Limits[l].Max > 0
		if !inForce && rejections[l] == 0 && refusals[l] == 0 && day[l.String()] == 0 {
			continue
		}
		kv.Rejections = append(kv.Rejections, rejectionView{Limit: l.String(), InForce: inForce, Rejections: rejections[l], Refusals: refusals[l], Day: day[l.String()]})
	}
	svg, note, err := useChart(k, samples, now, i)
	if err != nil {
		return keyView{}, err
	}
	kv.Chart, kv.ChartNote = svg, note
	if k.Priced {
		if kv.Spend, err = spendOf(k, budgets, samples, known, now, i); err != nil {
			return keyView{}, err
		}
	}
	return kv, nil
}

// gauge is limit l's gauge: used of allowance, reset at resetAt. A
// budget's figures are money.
func gauge(l governor.Limit, used, allowance int64, resetAt time.Time) gaugeView {
	g := gaugeView{Limit: l.String(), Title: l.Title(), Unit: l.Unit(), Money: l.Budget(), Used: used, Max: allowance, Left: max(allowance-used, 0), ResetAt: resetAt}
	g.Ratio = ratio(float64(used), float64(allowance))
	g.Width, g.Level = barWidth(g.Ratio), level(g.Ratio)
	return g
}

// spendOf builds priced key k's spend at now: its budgets' gauges (built
// with the limits'), each flow's spend since the process started and in
// the last day of samples against its own budgets, and the chart of the
// last day's spend.
func spendOf(k governor.Stats, budgets []gaugeView, samples []store.Sample, known map[string]bool, now time.Time, i int) (*spendView, error) {
	sv := &spendView{Budgets: budgets, ShowDay: k.Limits[governor.MPD].Max <= 0, Day: k.Limits[governor.MPD].Used}
	day, sampled := map[string]int64{}, map[string]bool{}
	for _, s := range samples {
		day[s.Flow] += s.Money
		sampled[s.Flow] = true
	}
	for _, f := range k.Flows {
		fv := flowSpendView{Name: f.Name, Link: known[f.Name], Spent: f.Tokens.Money, Day: day[f.Name], HasDay: sampled[f.Name]}
		for _, l := range [...]governor.Limit{governor.MPD, governor.MPM} {
			if f.Budget[l] > 0 {
				fv.Budgets = append(fv.Budgets, gauge(l, f.Spent[l], f.Budget[l], time.Time{}))
			}
		}
		sv.Flows = append(sv.Flows, fv)
	}
	svg, note, err := spendChart(k, samples, now, i)
	if err != nil {
		return nil, err
	}
	sv.Chart, sv.ChartNote = svg, note
	return sv, nil
}

// spendChart draws priced key k's spend over the last day: for each flow
// and, with several, for all of them, the money spent since the day's
// start, summed over chartBucket, with the key's budget per day and each
// flow's own as lines. The spend of all the flows at the right edge is
// the day's, which the key's budget per day counts. It is empty without
// samples.
func spendChart(k governor.Stats, samples []store.Sample, now time.Time, i int) (template.HTML, string, error) {
	if len(samples) == 0 {
		return "", "No samples were recorded in the last 24 hours: no spend to draw.", nil
	}
	n := int(chartWindow / chartBucket)
	start := now.Add(-chartWindow)
	byFlow := map[string][]float64{}
	total := make([]float64, n)
	for _, s := range samples {
		b := int(s.At.Add(-time.Millisecond).Sub(start) / chartBucket) // stamped with its interval's end
		if b < 0 || b >= n {
			continue
		}
		if byFlow[s.Flow] == nil {
			byFlow[s.Flow] = make([]float64, n)
		}
		v := float64(s.Money) / governor.Nano
		byFlow[s.Flow][b] += v
		total[b] += v
	}
	cumulative := func(name string, perBucket []float64) chart.Series {
		s := chart.Series{Name: name, Hours: make([]float64, n+1), Values: make([]float64, n+1)}
		for b := range n {
			s.Hours[b+1] = float64(b+1) * chartBucket.Hours()
			s.Values[b+1] = s.Values[b] + perBucket[b]
		}
		return s
	}
	p := chart.Panel{Title: "Money spent since 24 h ago, cumulative", Unit: "money"}
	var names []string
	for _, f := range k.Flows {
		if byFlow[f.Name] != nil {
			names = append(names, f.Name)
		}
	}
	if len(names) > 1 {
		p.Series = append(p.Series, cumulative("all flows", total))
	}
	for _, name := range names {
		p.Series = append(p.Series, cumulative(name, byFlow[name]))
	}
	if lim := k.Limits[governor.MPD].Max; lim > 0 {
		p.Lines = append(p.Lines, chart.Line{Value: float64(lim) / governor.Nano, Label: "key's budget per day " + governor.FormatMoney(lim)})
	}
	for _, f := range k.Flows {
		if lim := f.Budget[governor.MPD]; lim > 0 && byFlow[f.Name] != nil {
			p.Lines = append(p.Lines, chart.Line{Value: float64(lim) / governor.Nano, Label: f.Name + "'s budget per day " + governor.FormatMoney(lim)})
		}
	}
	var out bytes.Buffer
	if err := chart.Write(&out, chart.Chart{Title: k.Key + ": spend, last 24 h", Hours: chartWindow.Hours(), Start: start.UTC(), Panels: []chart.Panel{p}}); err != nil {
		return "", "", fmt.Errorf("draw the spend chart of key %s: %w", k.Key, err)
	}
	note := "Money in the unit of the key's prices, summed from the samples over 5-minute steps since 24 hours ago: " +
		"where a line ends is what the last 24 hours cost, which a budget per day counts."
	return inlineSVG(out.Bytes(), fmt.Sprintf("spend%d-", i)), note, nil
}

// inlineSVG returns a chart's SVG to inline in a page, its clip paths'
// ids prefixed: package chart numbers them from 0 in every chart, and the
// charts of one page must not share ids. The patterns hold a quote, which
// the chart's escaped labels never do.
func inlineSVG(svg []byte, prefix string) template.HTML {
	svg = bytes.ReplaceAll(svg, []byte(`<clipPath id="clip`), []byte(`<clipPath id="`+prefix+`clip`))
	svg = bytes.ReplaceAll(svg, []byte(`clip-path="url(#clip`), []byte(`clip-path="url(#`+prefix+`clip`))
	// The chart's labels are escaped by package chart.
	return template.HTML(svg)
}

// useChart draws key k's use of each limit in force over the last day, as
// a percentage of the limit: a minute limit's use per minute against it,
// and a day limit's against its day spread evenly over the day's minutes
// (100 %: on course to use the whole day's allowance), averaged over
// chartBucket, with the provider's rejections marked. It is empty without
// samples.
func useChart(k governor.Stats, samples []store.Sample, now time.Time, i int) (template.HTML, string, error) {
	if len(samples) == 0 {
		return "", "No samples were recorded in the last 24 hours.", nil
	}
	n := int(chartWindow / chartBucket)
	start := now.Add(-chartWindow)
	requests, tokens, seen := useOf(samples, start, n)
	rejected := make([]map[string]int, n)
	for _, s := range samples {
		// A sample is stamped with its interval's end.
		b := int(s.At.Add(-time.Millisecond).Sub(start) / chartBucket)
		if b < 0 || b >= n {
			continue
		}
		for name, c := range s.Rejections {
			if c > 0 {
				if rejected[b] == nil {
					rejected[b] = map[string]int{}
				}
				rejected[b][name] += int(c)
			}
		}
	}
	// The y-axis stops at chartTop: a day limit's burst (a backlog spent at
	// the minute limit's pace, 40 times the day's even spread) would
	// otherwise flatten every other line to the floor.
	p := chart.Panel{Title: "Use per limit, 5-minute averages", Unit: "% of limit", YMax: chartTop, Lines: []chart.Line{{Value: 100, Label: "limit"}}}
	minutes := chartBucket.Minutes()
	partTokens := false
	for l := range governor.NumLimits {
		lim := k.Limits[l].Max
		if lim <= 0 || l.Budget() { // a budget's use is money: the spend chart's
			continue
		}
		perMinute := float64(lim)
		if l.Period() == 24*time.Hour {
			perMinute /= 24 * 60
		}
		use := tokens
		switch l {
		case governor.RPM, governor.RPD:
			use = requests
		case governor.ITPM, governor.OTPM:
			partTokens = true
		}
		s := chart.Series{Name: l.String(), Hours: make([]float64, n), Values: make([]float64, n)}
		for b := range n {
			s.Hours[b] = (float64(b) + 0.5) * chartBucket.Hours()
			s.Values[b] = math.NaN()
			if seen[b] {
				s.Values[b] = use[b] / minutes / perMinute * 100
			}
		}
		p.Series = append(p.Series, s)
	}
	for b, m := range rejected {
		names := make([]string, 0, len(m))
		for name := range m {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			p.Marks = append(p.Marks, chart.Mark{Hour: (float64(b) + 0.5) * chartBucket.Hours(), Label: "rejected: " + name, Count: m[name]})
		}
	}
	var out bytes.Buffer
	if err := chart.Write(&out, chart.Chart{Title: k.Key + ": use per limit, last 24 h", Hours: chartWindow.Hours(), Start: start.UTC(), Panels: []chart.Panel{p}}); err != nil {
		return "", "", fmt.Errorf("draw the chart of key %s: %w", k.Key, err)
	}
	note := "A minute limit's use per minute, and a day limit's use per minute against its day spread evenly " +
		"over 1,440 minutes (100 %: on course to use the whole day), each averaged over 5 minutes of samples; use above 200 % is drawn at the top edge."
	if partTokens {
		note += " Samples count tokens, not input and output apart: itpm and otpm are drawn from all tokens, an upper bound."
	}
	return inlineSVG(out.Bytes(), fmt.Sprintf("key%d-", i)), note, nil
}

// useOf sums the calls and tokens of samples into n buckets of chartBucket
// from start, each sample's counts spread evenly over the interval it
// covers: from the flow's sample before it to its own end. Samples taken
// less often than a bucket would otherwise pile an interval's use into one
// bucket and draw it as a multiple of the rate it was spent at. A gap of
// more than three of the flow's usual intervals is a process that was down
// (its first sample after a start counts from that start), and the sample
// is taken to cover the usual interval; so is a flow's first sample. seen
// marks the buckets some sample covers.
func useOf(samples []store.Sample, start time.Time, n int) (requests, tokens []float64, seen []bool) {
	requests, tokens, seen = make([]float64, n), make([]float64, n), make([]bool, n)
	type series struct{ flow, source string }
	byFlow := map[series][]store.Sample{}
	for _, s := range samples {
		k := series{s.Flow, s.Source}
		byFlow[k] = append(byFlow[k], s)
	}
	for _, ss := range byFlow {
		slices.SortFunc(ss, func(a, b store.Sample) int { return a.At.Compare(b.At) })
		gaps := make([]time.Duration, 0, len(ss))
		for i := 1; i < len(ss); i++ {
			if g := ss[i].At.Sub(ss[i-1].At); g > 0 {
				gaps = append(gaps, g)
			}
		}
		usual := chartBucket
		if len(gaps) > 0 {
			slices.Sort(gaps)
			usual = gaps[len(gaps)/2]
		}
		for i, s := range ss {
			d := usual
			if i > 0 {
				if g := s.At.Sub(ss[i-1].At); g > 0 && g <= 3*usual {
					d = g
				}
			}
			// The interval, as offsets from start.
			to := s.At.Sub(start)
			from := to - d
			for b := max(int(from/chartBucket), 0); b < n; b++ {
				lo, hi := time.Duration(b)*chartBucket, time.Duration(b+1)*chartBucket
				if lo >= to {
					break
				}
				overlap := min(hi, to) - max(lo, from)
				if overlap <= 0 {
					continue
				}
				f := float64(overlap) / float64(d)
				requests[b] += f * float64(s.Admitted)
				tokens[b] += f * float64(s.Tokens)
				seen[b] = true
			}
		}
	}
	return requests, tokens, seen
}
