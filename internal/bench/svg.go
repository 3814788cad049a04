package bench

import (
	"fmt"
	"html"
	"io"
	"math"

	"github.com/sluice-dev/sluice/governor"
)

// series is what the chart draws of one run, sampled hourly.
type series struct {
	hours  int
	flows  []flowSeries
	limits []limitSeries
}

type flowSeries struct {
	name string
	done []float64 // cumulative items done at the end of each hour
}

type limitSeries struct {
	name string
	use  []float64 // charged in the hour ÷ the hour's allowance
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
	return s
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteSVG draws, for each policy of rep, every flow's cumulative progress
// and every limit's use per hour over the simulated time.
func WriteSVG(out io.Writer, rep *Report) error {
	const (
		width  = 900
		panelH = 170
		gap    = 60
		left   = 60
		right  = 150
	)
	plotW := float64(width - left - right)
	blockH := 2*panelH + gap + 40
	height := 40 + len(rep.Results)*blockH
	b := &svgBuf{w: out}
	b.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	b.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	b.printf(`<text x="%d" y="24" font-size="15" font-weight="bold">sluice bench quota: %s</text>`+"\n", left, html.EscapeString(rep.Scenario))
	for i, res := range rep.Results {
		s := res.series
		if s == nil || s.hours == 0 {
			continue
		}
		y0 := 40 + i*blockH
		b.printf(`<text x="%d" y="%d" font-size="13" font-weight="bold">%s — work_tokens %d, bottleneck %s %.4f</text>`+"\n",
			left, y0+14, html.EscapeString(res.Policy), res.WorkTokens, res.Bottleneck, res.BottleneckUtilization)
		x := func(h int) float64 { return left + plotW*float64(h+1)/float64(s.hours) }
		// Progress panel: items done, each flow scaled to the panel's max.
		top := float64(y0 + 24)
		var maxDone float64 = 1
		for _, f := range s.flows {
			maxDone = math.Max(maxDone, f.done[len(f.done)-1])
		}
		b.axes(left, top, plotW, panelH, fmt.Sprintf("items done (max %.0f)", maxDone), s.hours)
		for k, f := range s.flows {
			c := palette[k%len(palette)]
			b.printf(`<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, c)
			for h, v := range f.done {
				b.printf("%.1f,%.1f ", x(h), top+panelH-panelH*v/maxDone)
			}
			b.printf(`"/>` + "\n")
			b.printf(`<text x="%d" y="%.0f" fill="%s">%s</text>`+"\n", width-right+8, top+14+float64(k)*14, c, html.EscapeString(f.name))
		}
		// Limit panel: use per hour as a fraction of the hour's allowance.
		top2 := top + panelH + gap/2
		b.axes(left, top2, plotW, panelH, "limit use per hour (dashed line: the hour's even share)", s.hours)
		scale := 2.0
		for k, l := range s.limits {
			c := palette[(k+3)%len(palette)]
			b.printf(`<polyline fill="none" stroke="%s" stroke-width="1" points="`, c)
			for h, v := range l.use {
				b.printf("%.1f,%.1f ", x(h), top2+panelH-panelH*math.Min(v, scale)/scale)
			}
			b.printf(`"/>` + "\n")
			b.printf(`<text x="%d" y="%.0f" fill="%s">%s</text>`+"\n", width-right+8, top2+14+float64(k)*14, c, l.name)
		}
		b.printf(`<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", left, left+plotW, top2+panelH/2, top2+panelH/2)
	}
	b.printf("</svg>\n")
	return b.err
}

type svgBuf struct {
	w   io.Writer
	err error
}

func (b *svgBuf) printf(format string, args ...any) {
	if b.err == nil {
		_, b.err = fmt.Fprintf(b.w, format, args...)
	}
}

func (b *svgBuf) axes(left int, top, w, h float64, label string, hours int) {
	b.printf(`<rect x="%d" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, w, h)
	b.printf(`<text x="%d" y="%.0f" fill="#444">%s</text>`+"\n", left+4, top+12, html.EscapeString(label))
	b.printf(`<text x="%d" y="%.0f" fill="#444" text-anchor="end">0 h</text>`+"\n", left, top+h+12)
	b.printf(`<text x="%.0f" y="%.0f" fill="#444" text-anchor="end">%d h simulated</text>`+"\n", float64(left)+w, top+h+12, hours)
}
