// Package chart draws SVG charts of stacked panels that share one time axis:
// lines over time, horizontal reference lines, marked moments and shaded
// intervals, with a y-axis of nice ticks and a legend beside each panel.
//
// Everything a panel draws stays inside its frame: coordinates are clamped
// to it (a value above the panel's scale is drawn at the top edge) and the
// plot is clipped to it besides. Labels are escaped. The same chart always
// gives the same bytes.
package chart

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/num"
)

// Chart is a column of panels over one time axis.
type Chart struct {
	Title string
	// Hours is the length of the time axis, in hours from the start.
	Hours float64
	// Start is when hour 0 is, for dates on the time axis; zero: the axis
	// reads "day 1, day 2…" or "0 h, 6 h…".
	Start  time.Time
	Panels []Panel
}

// Panel is one plot of the chart. Its y-axis runs from 0.
type Panel struct {
	Title string
	// Unit is shown along the y-axis ("items", "% of limit", "tokens/h").
	Unit string
	// YMax is the top of the y-axis, rounded up to a nice tick; 0: from the
	// series and lines. Values above it are drawn at the top edge.
	YMax   float64
	Series []Series
	// Lines are horizontal reference lines (a limit), drawn dashed with
	// their label.
	Lines []Line
	// Marks are moments to mark on the time axis (provider rejections).
	// Marks that fall in one pixel column are drawn as one marker whose
	// title counts them.
	Marks []Mark
	// Bands are time intervals to shade (stalls).
	Bands []Band
}

// Series is one line of a panel: Values[i] at Hours[i]. A NaN or infinite
// value or hour breaks the line.
type Series struct {
	Name          string
	Hours, Values []float64
	// Color is any SVG colour; empty: the next of a palette readers with
	// colour-vision deficiency can tell apart (Okabe–Ito), dashed once the
	// palette has gone round.
	Color  string
	Dashed bool
}

// Line is a horizontal reference line.
type Line struct {
	Value float64
	Label string
}

// Mark is a moment to mark; Count is how many events it stands for (0 and 1
// are one), so that a caller with counts per interval need not repeat it.
type Mark struct {
	Hour  float64
	Label string
	Count int
}

// Band is a time interval to shade.
type Band struct {
	From, To float64
	Label    string
}

// palette is Okabe and Ito's, without black (marks are black) and with the
// yellow, faint on white, last.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#F0E442"}

// Layout, in pixels.
const (
	width      = 960
	left       = 64  // frame's left edge: y tick labels and unit to its left
	legendW    = 200 // legend to the right of the frame
	plotW      = width - left - legendW
	plotH      = 150
	chartTop   = 36 // chart title above the first panel
	titleH     = 20 // panel title above the frame
	axisH      = 18 // time tick labels below the frame
	panelGap   = 16
	legendRow  = 15
	legendText = 28 // characters of a legend entry before it is cut
)

// SharedScale sets every given panel's YMax to the largest of them (a
// panel's own, or its data's when it has none), so that the panels compare
// by eye.
func SharedScale(panels []*Panel) {
	var top float64
	for _, p := range panels {
		if p != nil {
			top = math.Max(top, p.top())
		}
	}
	for _, p := range panels {
		if p != nil {
			p.YMax = top
		}
	}
}

// top is the largest value the panel's y-axis must show.
func (p *Panel) top() float64 {
	if p.YMax > 0 {
		return p.YMax
	}
	var top float64
	for _, s := range p.Series {
		for _, v := range s.Values {
			if finite(v) {
				top = math.Max(top, v)
			}
		}
	}
	for _, l := range p.Lines {
		if finite(l.Value) {
			top = math.Max(top, l.Value)
		}
	}
	return top
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Write draws c as SVG to w.
func Write(w io.Writer, c Chart) error {
	hours := c.Hours
	if !finite(hours) || hours <= 0 {
		hours = 1
	}
	xticks := timeTicks(hours, c.Start)
	var body bytes.Buffer
	y := chartTop
	for i := range c.Panels {
		y = writePanel(&body, &c.Panels[i], i, y, hours, xticks)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, y, width, y)
	fmt.Fprintf(&b, `<rect class="background" width="%d" height="%d" fill="white"/>`+"\n", width, y)
	fmt.Fprintf(&b, `<text class="title" x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(c.Title))
	b.Write(body.Bytes())
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// frame is a panel's plot area.
type frame struct {
	x0, y0, x1, y1 float64
	hours, ymax    float64
}

func (f frame) x(h float64) float64 { return clamp(f.x0+(f.x1-f.x0)*h/f.hours, f.x0, f.x1) }
func (f frame) y(v float64) float64 { return clamp(f.y1-(f.y1-f.y0)*v/f.ymax, f.y0, f.y1) }

func clamp(v, lo, hi float64) float64 { return math.Min(math.Max(v, lo), hi) }

// writePanel draws panel i with its top at y and returns where the next
// panel starts.
func writePanel(b *bytes.Buffer, p *Panel, i, y int, hours float64, xticks []tick) int {
	step, ymax := niceScale(p.top())
	f := frame{x0: left, y0: float64(y + titleH), x1: left + plotW, y1: float64(y + titleH + plotH), hours: hours, ymax: ymax}
	fmt.Fprintf(b, `<g class="panel">`+"\n")
	fmt.Fprintf(b, `<text class="panel-title" x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", left, y+titleH-6, esc(p.Title))
	fmt.Fprintf(b, `<clipPath id="clip%d"><rect x="%s" y="%s" width="%s" height="%s"/></clipPath>`+"\n", i, ff(f.x0), ff(f.y0), ff(f.x1-f.x0), ff(f.y1-f.y0))
	// Grid and tick labels.
	fmt.Fprintf(b, `<g class="plot" clip-path="url(#clip%d)">`+"\n", i)
	for _, t := range xticks {
		x := ff(f.x(t.at))
		fmt.Fprintf(b, `<line class="grid" x1="%s" x2="%s" y1="%s" y2="%s" stroke="#e3e3e3"/>`+"\n", x, x, ff(f.y0), ff(f.y1))
	}
	yticks := ticksUpTo(step, ymax)
	for _, v := range yticks {
		yy := ff(f.y(v))
		fmt.Fprintf(b, `<line class="grid" x1="%s" x2="%s" y1="%s" y2="%s" stroke="#e3e3e3"/>`+"\n", ff(f.x0), ff(f.x1), yy, yy)
	}
	legend := writePlot(b, p, f)
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<rect class="frame" x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#444"/>`+"\n", ff(f.x0), ff(f.y0), ff(f.x1-f.x0), ff(f.y1-f.y0))
	for _, v := range yticks {
		fmt.Fprintf(b, `<text class="ytick" x="%d" y="%s" text-anchor="end" fill="#444">%s</text>`+"\n", left-5, ff(f.y(v)+4), tickLabel(v, step, ymax))
	}
	fmt.Fprintf(b, `<text class="unit" transform="translate(13 %s) rotate(-90)" text-anchor="middle" fill="#444">%s</text>`+"\n", ff((f.y0+f.y1)/2), esc(p.Unit))
	for _, t := range xticks {
		if x := f.x(t.at) + 3; x+6*float64(len(t.label)) <= f.x1 { // a label would run past the frame's end: its tick stays unlabelled
			fmt.Fprintf(b, `<text class="xtick" x="%s" y="%s" fill="#444">%s</text>`+"\n", ff(x), ff(f.y1+13), esc(t.label))
		}
	}
	// Legend, right of the frame.
	lx := f.x1 + 14
	for k, e := range legend {
		ly := f.y0 + 8 + float64(k*legendRow)
		fmt.Fprintf(b, `<g class="legend">%s<text x="%s" y="%s">%s</text></g>`+"\n", e.swatch(lx, ly), ff(lx+24), ff(ly+4), legendName(e.name))
	}
	b.WriteString("</g>\n")
	return y + titleH + max(plotH, len(legend)*legendRow) + axisH + panelGap
}

// writePlot draws the panel's bands, lines, series and marks inside f and
// returns the legend's entries.
func writePlot(b *bytes.Buffer, p *Panel, f frame) []entry {
	var legend, bands []entry // the legend lists series, then marks, then bands
	seen := map[string]bool{}
	for _, band := range p.Bands {
		from, to := math.Min(band.From, band.To), math.Max(band.From, band.To)
		if !finite(from) || !finite(to) {
			continue
		}
		x0, x1 := f.x(from), f.x(to)
		x1 = math.Min(math.Max(x1, x0+1), f.x1) // an instant is one pixel wide
		x0 = math.Min(x0, x1-1)
		fmt.Fprintf(b, `<rect class="band" x="%s" y="%s" width="%s" height="%s" fill="#888" fill-opacity="0.2"><title>%s: %s–%s h</title></rect>`+"\n",
			ff(x0), ff(f.y0), ff(x1-x0), ff(f.y1-f.y0), esc(band.Label), ff(from), ff(to))
		if !seen["band "+band.Label] {
			seen["band "+band.Label] = true
			bands = append(bands, entry{name: band.Label, kind: "band"})
		}
	}
	var labels []string // the lines' labels, written over the series
	for _, l := range p.Lines {
		if !finite(l.Value) {
			continue
		}
		y := f.y(l.Value)
		fmt.Fprintf(b, `<line class="refline" x1="%s" x2="%s" y1="%s" y2="%s" stroke="#000" stroke-dasharray="6 4"/>`+"\n", ff(f.x0), ff(f.x1), ff(y), ff(y))
		ty := y - 3
		if ty < f.y0+11 { // no room above the line: below it
			ty = y + 11
		}
		labels = append(labels, fmt.Sprintf(`<text class="refline-label" x="%s" y="%s" text-anchor="end" stroke="white" stroke-width="3" paint-order="stroke">%s</text>`+"\n", ff(f.x1-4), ff(ty), esc(l.Label)))
	}
	for k, s := range p.Series {
		color, dashed := s.Color, s.Dashed
		if color == "" {
			color = palette[k%len(palette)]
			dashed = dashed || k >= len(palette)
		}
		e := entry{name: s.Name, kind: "series", color: color, dashed: dashed}
		legend = append(legend, e)
		for _, pts := range segments(s, f) {
			if len(pts) == 1 { // a lone point: a dot, not an invisible line
				fmt.Fprintf(b, `<circle class="point" data-series="%s" cx="%s" cy="%s" r="2" fill="%s"/>`+"\n",
					esc(s.Name), ff(clamp(pts[0][0], f.x0+2, f.x1-2)), ff(clamp(pts[0][1], f.y0+2, f.y1-2)), esc(color))
				continue
			}
			fmt.Fprintf(b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.5"%s points="`, esc(s.Name), esc(color), e.dash())
			for j, pt := range pts {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(ff(pt[0]) + "," + ff(pt[1]))
			}
			b.WriteString(`"/>` + "\n")
		}
	}
	legend = append(legend, writeMarks(b, p.Marks, f, seen)...)
	for _, l := range labels {
		b.WriteString(l)
	}
	return append(legend, bands...)
}

// segments are the pixel points of s, split where a value or hour is not
// finite.
func segments(s Series, f frame) [][][2]float64 {
	var segs [][][2]float64
	var cur [][2]float64
	for i := range min(len(s.Hours), len(s.Values)) {
		h, v := s.Hours[i], s.Values[i]
		if !finite(h) || !finite(v) {
			if len(cur) > 0 {
				segs, cur = append(segs, cur), nil
			}
			continue
		}
		cur = append(cur, [2]float64{f.x(h), f.y(v)})
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	return segs
}

// writeMarks draws marks as triangles on the time axis, one per pixel
// column, and returns the legend's entries for their labels.
func writeMarks(b *bytes.Buffer, marks []Mark, f frame, seen map[string]bool) []entry {
	type column struct {
		from, to float64
		counts   map[string]int
		labels   []string // in the order first seen
	}
	cols := map[int]*column{}
	var legend []entry
	for _, m := range marks {
		if !finite(m.Hour) {
			continue
		}
		px := int(math.Round(f.x(m.Hour)))
		c := cols[px]
		if c == nil {
			c = &column{from: m.Hour, to: m.Hour, counts: map[string]int{}}
			cols[px] = c
		}
		c.from, c.to = math.Min(c.from, m.Hour), math.Max(c.to, m.Hour)
		if _, ok := c.counts[m.Label]; !ok {
			c.labels = append(c.labels, m.Label)
		}
		c.counts[m.Label] += max(m.Count, 1)
		if !seen["mark "+m.Label] {
			seen["mark "+m.Label] = true
			legend = append(legend, entry{name: m.Label, kind: "mark"})
		}
	}
	xs := make([]int, 0, len(cols))
	for px := range cols {
		xs = append(xs, px)
	}
	slices.Sort(xs)
	for _, px := range xs {
		c := cols[px]
		var parts []string
		for _, l := range c.labels {
			parts = append(parts, fmt.Sprintf("%s × %s", num.Group(int64(c.counts[l])), esc(l)))
		}
		when := ff(c.from) + " h"
		if ff(c.to) != ff(c.from) {
			when = ff(c.from) + "–" + ff(c.to) + " h"
		}
		x := clamp(float64(px), f.x0+4, f.x1-4)
		fmt.Fprintf(b, `<polygon class="mark" points="%s" fill="#000"><title>%s at %s</title></polygon>`+"\n",
			triangle(x, f.y1), strings.Join(parts, ", "), when)
	}
	return legend
}

// triangle is a marker 8 pixels wide standing on y at x.
func triangle(x, y float64) string {
	return ff(x-4) + "," + ff(y) + " " + ff(x+4) + "," + ff(y) + " " + ff(x) + "," + ff(y-7)
}

// entry is one line of a panel's legend.
type entry struct {
	name   string
	kind   string // "series", "mark" or "band"
	color  string
	dashed bool
}

func (e entry) dash() string {
	if e.dashed {
		return ` stroke-dasharray="5 3"`
	}
	return ""
}

// swatch is the entry's sample at (x, y), 18 pixels wide.
func (e entry) swatch(x, y float64) string {
	switch e.kind {
	case "mark":
		return fmt.Sprintf(`<polygon points="%s" fill="#000"/>`, triangle(x+9, y+4))
	case "band":
		return fmt.Sprintf(`<rect x="%s" y="%s" width="18" height="10" fill="#888" fill-opacity="0.2" stroke="#888"/>`, ff(x), ff(y-4))
	}
	return fmt.Sprintf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`, ff(x), ff(x+18), ff(y), ff(y), esc(e.color), e.dash())
}

// legendName is name escaped, cut to fit beside the frame; a cut name keeps
// its whole self in a title.
func legendName(name string) string {
	r := []rune(name)
	if len(r) <= legendText {
		return esc(name)
	}
	return esc(string(r[:legendText-1])+"…") + "<title>" + esc(name) + "</title>"
}

// niceScale is the y-axis for values up to top: a step of 1, 2, 2.5 or 5
// times a power of ten, and the first multiple of it at or above top, so that
// the axis has 4 to 6 ticks counting 0.
func niceScale(top float64) (step, ymax float64) {
	if !finite(top) || top <= 0 {
		top = 1
	}
	for k := math.Floor(math.Log10(top)) - 1; ; k++ {
		for _, m := range []float64{1, 2, 2.5, 5} {
			step = m * math.Pow(10, k)
			if n := math.Ceil(top/step - 1e-9); n <= 5 {
				return step, n * step
			}
		}
	}
}

// ticksUpTo is 0, step, 2 step… up to ymax, a multiple of step.
func ticksUpTo(step, ymax float64) []float64 {
	var ticks []float64
	for k := 0.0; k*step <= ymax*(1+1e-9); k++ {
		ticks = append(ticks, k*step)
	}
	return ticks
}

// tickLabel writes a y tick: grouped (2,500) below ten thousand, in k or M
// above, with as many decimals as the step needs.
func tickLabel(v, step, ymax float64) string {
	div, suffix := 1.0, ""
	switch {
	case ymax >= 1e7:
		div, suffix = 1e6, "M"
	case ymax >= 1e4:
		div, suffix = 1e3, "k"
	}
	v, step = v/div, step/div
	dec := 0
	for ; dec < 6; dec++ {
		scaled := step * math.Pow(10, float64(dec))
		if math.Abs(scaled-math.Round(scaled)) < 1e-6 {
			break
		}
	}
	p := math.Pow(10, float64(dec))
	s := strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64) // 0.5, not 0.50
	whole, frac, _ := strings.Cut(s, ".")
	if n, err := strconv.ParseInt(whole, 10, 64); err == nil {
		whole = num.Group(n)
	}
	if frac != "" {
		whole += "." + frac
	}
	if whole == "0" && frac == "" {
		return "0"
	}
	return whole + suffix
}

// tick is a labelled point of the time axis.
type tick struct {
	at    float64 // hours
	label string
}

// timeTicks are the time axis's ticks: whole days from 48 hours on (every
// day, or every 2, 7, 14, 30… days so that at most 14 are labelled), else
// every 6 hours, or every hour below 12 hours. With a start they are dates
// (at midnights) or clock times; without, "day N" or "N h".
func timeTicks(hours float64, start time.Time) []tick {
	var ticks []tick
	if hours < 48 {
		step := 1.0
		if hours >= 12 {
			step = 6
		}
		for h := 0.0; h < hours; h += step {
			label := strconv.FormatFloat(h, 'f', -1, 64) + " h"
			if !start.IsZero() {
				label = start.Add(time.Duration(h * float64(time.Hour))).Format("15:04")
			}
			ticks = append(ticks, tick{h, label})
		}
		return ticks
	}
	days := 1
	for _, d := range []int{1, 2, 7, 14, 30, 60, 90, 180, 365} {
		if days = d; math.Ceil(hours/24/float64(d)) <= 14 {
			break
		}
	}
	for days*14 < int(math.Ceil(hours/24)) {
		days += 365
	}
	if start.IsZero() {
		for d := 0; float64(d*24) < hours; d += days {
			ticks = append(ticks, tick{float64(d * 24), "day " + strconv.Itoa(d+1)})
		}
		return ticks
	}
	day := time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, start.Location())
	if day.Before(start) {
		day = day.AddDate(0, 0, 1)
	}
	for ; day.Sub(start).Hours() < hours; day = day.AddDate(0, 0, days) {
		ticks = append(ticks, tick{day.Sub(start).Hours(), day.Format("2 Jan")})
	}
	return ticks
}

// ff writes a coordinate or hour with one decimal at most.
func ff(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10+0, 'f', -1, 64) } // +0: never "-0"

func esc(s string) string { return html.EscapeString(s) }
