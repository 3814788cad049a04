package forecast

import (
	"fmt"
	"io"
	"slices"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/chart"
	"github.com/sluice-dev/sluice/internal/num"
)

// Series is what a replay's chart draws, sampled hourly.
type Series struct {
	Hours   int
	Flows   []FlowSeries   // in the scenario's order
	Limits  []LimitSeries  // the limits in force, in governor.Limit order
	Rejects []RejectSeries // by status, ascending
}

// FlowSeries is one flow's progress.
type FlowSeries struct {
	Name string
	Done []float64 // cumulative items done at the end of each hour
}

// LimitSeries is one limit's use.
type LimitSeries struct {
	Name string
	Use  []float64 // charged in the hour ÷ the hour's allowance
}

// RejectSeries is the provider's rejections of one status.
type RejectSeries struct {
	Status int
	Count  []int64 // rejections in each hour
}

func (w *World) series() *Series {
	s := &Series{Hours: w.hours}
	for _, f := range w.flows {
		fs := FlowSeries{Name: f.cfg.Name, Done: make([]float64, w.hours)}
		var v float64
		for h := range w.hours {
			v = max(v, f.doneBy[h]) // done only grows; an hour without a completion keeps the last
			fs.Done[h] = v
		}
		s.Flows = append(s.Flows, fs)
	}
	for l := range governor.NumLimits {
		if w.use[l] != nil {
			s.Limits = append(s.Limits, LimitSeries{Name: l.String(), Use: w.use[l]})
		}
	}
	for status, count := range w.rejectsByHour {
		s.Rejects = append(s.Rejects, RejectSeries{Status: status, Count: count})
	}
	slices.SortFunc(s.Rejects, func(a, b RejectSeries) int { return a.Status - b.Status })
	return s
}

// WriteSVG draws results under title: first every result's items done,
// all flows together, side by side; then per result each flow's items done
// and each limit's use per hour against the limit, with the provider's
// rejections marked. All progress panels share one scale, and all use
// panels another.
func WriteSVG(out io.Writer, title string, results []Result) error {
	c := chart.Chart{Title: title}
	all := chart.Panel{Title: "progress of every policy: items done, all flows together", Unit: "items"}
	var progress, use []*chart.Panel
	var panels []chart.Panel
	for _, res := range results {
		s := res.Series
		if s == nil || s.Hours == 0 {
			continue
		}
		c.Hours = max(c.Hours, float64(s.Hours))
		hours := make([]float64, s.Hours+1) // from 0 to the end of the last hour
		for h := range hours {
			hours[h] = float64(h)
		}
		total := make([]float64, s.Hours+1)
		done := chart.Panel{Unit: "items",
			Title: fmt.Sprintf("%s: items done per flow (work_tokens %s, bottleneck %s at %.1f %%)",
				res.Policy, num.Group(res.WorkTokens), res.Bottleneck, 100*res.BottleneckUtilization)}
		for _, f := range s.Flows {
			v := append([]float64{0}, f.Done...)
			for h := range v {
				total[h] += v[h]
			}
			done.Series = append(done.Series, chart.Series{Name: f.Name, Hours: hours, Values: v})
		}
		all.Series = append(all.Series, chart.Series{Name: res.Policy, Hours: hours, Values: total})
		// An hour's use is drawn at its middle.
		mid := make([]float64, s.Hours)
		for h := range mid {
			mid[h] = float64(h) + 0.5
		}
		u := chart.Panel{Unit: "% of limit", Lines: []chart.Line{{Value: 100, Label: "limit"}},
			Title: res.Policy + ": each limit's use per hour (for a daily limit, 100 % is the hour's even share)"}
		for _, l := range s.Limits {
			v := make([]float64, len(l.Use))
			for h, x := range l.Use {
				v[h] = 100 * x
			}
			u.Series = append(u.Series, chart.Series{Name: l.Name, Hours: mid, Values: v})
		}
		for _, r := range s.Rejects {
			for h, n := range r.Count {
				if n > 0 {
					u.Marks = append(u.Marks, chart.Mark{Hour: mid[h], Label: fmt.Sprintf("%d rejections", r.Status), Count: int(n)})
				}
			}
		}
		panels = append(panels, done, u)
	}
	c.Panels = append([]chart.Panel{all}, panels...)
	for i := 1; i < len(c.Panels); i += 2 {
		progress = append(progress, &c.Panels[i])
		use = append(use, &c.Panels[i+1])
	}
	chart.SharedScale(progress)
	chart.SharedScale(use)
	if len(use) > 0 && use[0].YMax > maxUse {
		for _, p := range use {
			p.YMax = maxUse
			p.Title += fmt.Sprintf("; above %d %% at the top edge", maxUse)
		}
	}
	return chart.Write(out, c)
}

// maxUse is the top of the use panels' scale, in %: a policy that spends a
// daily limit in a few hours reaches 1,000 % and more in them, which would
// flatten every other hour, and the limit line, against the bottom.
const maxUse = 250
