package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/chart"
	"github.com/sluice-dev/sluice/internal/num"
)

// series is what the chart draws of one run, sampled hourly.
type series struct {
	hours   int
	flows   []flowSeries
	limits  []limitSeries
	rejects []rejectSeries // by status, ascending
}

type flowSeries struct {
	name string
	done []float64 // cumulative items done at the end of each hour
}

type limitSeries struct {
	name string
	use  []float64 // charged in the hour ÷ the hour's allowance
}

type rejectSeries struct {
	status int
	count  []int64 // rejections in each hour
}

func (w *world) series() *series {
	s := &series{hours: w.hours}
	for _, f := range w.flows {
		fs := flowSeries{name: f.cfg.Name, done: make([]float64, w.hours)}
		var v float64
		for h := range w.hours {
			v = max(v, f.doneBy[h]) // done only grows; an hour without a completion keeps the last
			fs.done[h] = v
		}
		s.flows = append(s.flows, fs)
	}
	for _, l := range governor.AllLimits {
		if w.use[l] != nil {
			s.limits = append(s.limits, limitSeries{name: l.String(), use: w.use[l]})
		}
	}
	for status, count := range w.rejectsByHour {
		s.rejects = append(s.rejects, rejectSeries{status: status, count: count})
	}
	slices.SortFunc(s.rejects, func(a, b rejectSeries) int { return a.status - b.status })
	return s
}

// WriteSVG draws rep: first every policy's items done, all flows together,
// side by side; then per policy each flow's items done and each limit's use
// per hour against the limit, with the provider's rejections marked. All
// progress panels share one scale, and all use panels another.
func WriteSVG(out io.Writer, rep *Report) error {
	c := chart.Chart{Title: cmp.Or(rep.Title, "sluice bench quota: "+rep.Scenario)}
	all := chart.Panel{Title: "progress of every policy: items done, all flows together", Unit: "items"}
	var progress, use []*chart.Panel
	var panels []chart.Panel
	for _, res := range rep.Results {
		s := res.series
		if s == nil || s.hours == 0 {
			continue
		}
		c.Hours = max(c.Hours, float64(s.hours))
		hours := make([]float64, s.hours+1) // from 0 to the end of the last hour
		for h := range hours {
			hours[h] = float64(h)
		}
		total := make([]float64, s.hours+1)
		done := chart.Panel{Unit: "items",
			Title: fmt.Sprintf("%s: items done per flow (work_tokens %s, bottleneck %s at %.1f %%)",
				res.Policy, num.Group(res.WorkTokens), res.Bottleneck, 100*res.BottleneckUtilization)}
		for _, f := range s.flows {
			v := append([]float64{0}, f.done...)
			for h := range v {
				total[h] += v[h]
			}
			done.Series = append(done.Series, chart.Series{Name: f.name, Hours: hours, Values: v})
		}
		all.Series = append(all.Series, chart.Series{Name: res.Policy, Hours: hours, Values: total})
		// An hour's use is drawn at its middle.
		mid := make([]float64, s.hours)
		for h := range mid {
			mid[h] = float64(h) + 0.5
		}
		u := chart.Panel{Unit: "% of limit", Lines: []chart.Line{{Value: 100, Label: "limit"}},
			Title: res.Policy + ": each limit's use per hour (for a daily limit, 100 % is the hour's even share)"}
		for _, l := range s.limits {
			v := make([]float64, len(l.use))
			for h, x := range l.use {
				v[h] = 100 * x
			}
			u.Series = append(u.Series, chart.Series{Name: l.name, Hours: mid, Values: v})
		}
		for _, r := range s.rejects {
			for h, n := range r.count {
				if n > 0 {
					u.Marks = append(u.Marks, chart.Mark{Hour: mid[h], Label: fmt.Sprintf("%d rejections", r.status), Count: int(n)})
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
