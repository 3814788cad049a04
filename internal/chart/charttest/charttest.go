// Package charttest reads back, for tests, the SVG that package chart
// writes, and checks what every chart must hold: each panel one frame, all
// it draws inside that frame and its legend beside it, y ticks that are
// nice and rise, time ticks that run left to right.
package charttest

import (
	"encoding/xml"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Node is an element of the SVG.
type Node struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []Node     `xml:",any"`
}

// Parse reads an SVG, failing t if it is not well-formed XML.
func Parse(t testing.TB, svg []byte) Node {
	t.Helper()
	var root Node
	if err := xml.Unmarshal(svg, &root); err != nil {
		t.Fatalf("the SVG does not parse: %v", err)
	}
	return root
}

// Attr is the value of the attribute name, "" without one.
func (n Node) Attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n Node) num(t testing.TB, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(n.Attr(name), 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", n.XMLName.Local, name, n.Attr(name), err)
	}
	return v
}

// All returns the elements of class c at or below n, in document order.
func (n Node) All(c string) []Node {
	var out []Node
	if n.Attr("class") == c {
		out = append(out, n)
	}
	for _, k := range n.Children {
		out = append(out, k.All(c)...)
	}
	return out
}

// Panels returns the chart's panels, each checked: one frame, everything
// inside it but the legend, which lies right of it, and sound ticks.
func Panels(t testing.TB, root Node) []Node {
	t.Helper()
	panels := root.All("panel")
	for _, p := range panels {
		CheckInside(t, p)
		YTicks(t, p)
		XTicks(t, p)
	}
	return panels
}

// Box is a rectangle in pixels.
type Box struct{ X0, Y0, X1, Y1 float64 }

func (b Box) has(x, y float64) bool {
	const eps = 1e-9
	return x >= b.X0-eps && x <= b.X1+eps && y >= b.Y0-eps && y <= b.Y1+eps
}

// Frame is a panel's frame, failing t unless it has exactly one.
func Frame(t testing.TB, p Node) Box {
	t.Helper()
	frames := p.All("frame")
	if len(frames) != 1 {
		t.Fatalf("panel has %d frames, want 1", len(frames))
	}
	f := frames[0]
	x, y := f.num(t, "x"), f.num(t, "y")
	return Box{x, y, x + f.num(t, "width"), y + f.num(t, "height")}
}

// points returns the points an element reaches: corners of a rectangle,
// extremes of a circle, every point of a polyline or polygon, the ends of a
// line, a text's anchor.
func points(t testing.TB, n Node) [][2]float64 {
	t.Helper()
	switch n.XMLName.Local {
	case "rect":
		x, y, w, h := n.num(t, "x"), n.num(t, "y"), n.num(t, "width"), n.num(t, "height")
		return [][2]float64{{x, y}, {x + w, y + h}}
	case "circle":
		x, y, r := n.num(t, "cx"), n.num(t, "cy"), n.num(t, "r")
		return [][2]float64{{x - r, y - r}, {x + r, y + r}}
	case "line":
		return [][2]float64{{n.num(t, "x1"), n.num(t, "y1")}, {n.num(t, "x2"), n.num(t, "y2")}}
	case "polyline", "polygon":
		var pts [][2]float64
		for _, p := range strings.Fields(n.Attr("points")) {
			xs, ys, ok := strings.Cut(p, ",")
			x, err1 := strconv.ParseFloat(xs, 64)
			y, err2 := strconv.ParseFloat(ys, 64)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("bad point %q in %s", p, n.XMLName.Local)
			}
			pts = append(pts, [2]float64{x, y})
		}
		if len(pts) == 0 {
			t.Fatalf("%s without points", n.XMLName.Local)
		}
		return pts
	case "text":
		return [][2]float64{{n.num(t, "x"), n.num(t, "y")}}
	}
	return nil
}

func isShape(n Node) bool {
	switch n.XMLName.Local {
	case "rect", "circle", "line", "polyline", "polygon", "path", "ellipse":
		return true
	}
	return false
}

// CheckInside checks that every shape of panel p lies inside its frame but
// the legend's, which, text included, must lie right of it.
func CheckInside(t testing.TB, p Node) {
	t.Helper()
	fr := Frame(t, p)
	var check func(n Node, legend bool)
	check = func(n Node, legend bool) {
		if n.XMLName.Local == "clipPath" {
			return
		}
		legend = legend || n.Attr("class") == "legend"
		if legend && (isShape(n) || n.XMLName.Local == "text") {
			for _, pt := range points(t, n) {
				if pt[0] <= fr.X1 {
					t.Errorf("legend's <%s> at x %.1f overlaps the plot (frame ends at %.1f)", n.XMLName.Local, pt[0], fr.X1)
				}
			}
		} else if isShape(n) && n.Attr("class") != "frame" {
			pts := points(t, n)
			if pts == nil {
				t.Errorf("<%s> in a panel: cannot place it", n.XMLName.Local)
			}
			for _, pt := range pts {
				if !fr.has(pt[0], pt[1]) {
					t.Errorf("<%s class=%q> reaches (%.1f, %.1f), outside its frame %+v", n.XMLName.Local, n.Attr("class"), pt[0], pt[1], fr)
				}
			}
		}
		for _, c := range n.Children {
			check(c, legend)
		}
	}
	check(p, false)
}

// tickValue reads a y tick label: "2,500", "12.5k", "1.5M", "0.25".
func tickValue(t testing.TB, s string) float64 {
	t.Helper()
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		s, mult = strings.TrimSuffix(s, "k"), 1e3
	case strings.HasSuffix(s, "M"):
		s, mult = strings.TrimSuffix(s, "M"), 1e6
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	if err != nil {
		t.Fatalf("y tick %q: %v", s, err)
	}
	return v * mult
}

// YTicks checks a panel's y ticks (4 to 6, from 0 up in even steps of 1, 2,
// 2.5 or 5 × 10^k, each higher on the page) and returns their values.
func YTicks(t testing.TB, p Node) []float64 {
	t.Helper()
	labels := p.All("ytick")
	if len(labels) < 4 || len(labels) > 6 {
		t.Fatalf("panel has %d y ticks, want 4 to 6", len(labels))
	}
	var vals []float64
	for i, l := range labels {
		vals = append(vals, tickValue(t, l.Text))
		if i == 0 && vals[0] != 0 {
			t.Errorf("first y tick %q, want 0", l.Text)
		}
		if i > 0 {
			if vals[i] <= vals[i-1] || l.num(t, "y") >= labels[i-1].num(t, "y") {
				t.Errorf("y ticks %q then %q: not increasing up the axis", labels[i-1].Text, l.Text)
			}
			if step := vals[1] - vals[0]; math.Abs(vals[i]-vals[i-1]-step) > step*1e-9 {
				t.Errorf("y ticks %v: uneven", vals)
			}
		}
	}
	step := vals[1]
	for step >= 10 {
		step /= 10
	}
	for step < 1 {
		step *= 10
	}
	if m := math.Round(step*1e6) / 1e6; m != 1 && m != 2 && m != 2.5 && m != 5 {
		t.Errorf("y ticks %v: step is not 1, 2, 2.5 or 5 × 10^k", vals)
	}
	return vals
}

// XTicks returns a panel's time labels, checking they run left to right.
func XTicks(t testing.TB, p Node) []string {
	t.Helper()
	var out []string
	labels := p.All("xtick")
	for i, l := range labels {
		if i > 0 && l.num(t, "x") <= labels[i-1].num(t, "x") {
			t.Errorf("time ticks %q then %q: not left to right", labels[i-1].Text, l.Text)
		}
		out = append(out, l.Text)
	}
	return out
}

// Legend returns the names a panel's legend lists, in order.
func Legend(p Node) []string {
	var out []string
	for _, g := range p.All("legend") {
		for _, c := range g.Children {
			if c.XMLName.Local == "text" {
				out = append(out, c.Text)
			}
		}
	}
	return out
}

// Series returns the names of the series a panel draws, each once, in order.
func Series(p Node) []string {
	var out []string
	var walk func(n Node)
	walk = func(n Node) {
		if name := n.Attr("data-series"); name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(p)
	return out
}
