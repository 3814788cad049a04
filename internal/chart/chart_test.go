package chart

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/chart/charttest"
)

// parse renders c and reads the SVG back.
func parse(t *testing.T, c Chart) (charttest.Node, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, c); err != nil {
		t.Fatal(err)
	}
	return charttest.Parse(t, buf.Bytes()), buf.Bytes()
}

func hours(n int, f func(h float64) float64) (hs, vs []float64) {
	for i := range n {
		hs = append(hs, float64(i))
		vs = append(vs, f(float64(i)))
	}
	return hs, vs
}

func testChart() Chart {
	hs, up := hours(169, func(h float64) float64 { return 40 * h })
	_, wave := hours(169, func(h float64) float64 { return 80 + 60*math.Sin(h/5) })
	_, holes := hours(169, func(h float64) float64 {
		if int(h)%50 == 0 {
			return math.NaN()
		}
		return 2e6 // far above the panel's YMax
	})
	marks := []Mark{{Hour: 3.1, Label: "429"}, {Hour: 3.12, Label: "429", Count: 4}, {Hour: 3.13, Label: "413"}, {Hour: 100, Label: "429"}, {Hour: math.NaN(), Label: "429"}}
	return Chart{
		Title: "a <chart> & its panels",
		Hours: 168,
		Panels: []Panel{
			{Title: "progress", Unit: "items", Series: []Series{
				{Name: "<script>alert(1)</script>", Hours: hs, Values: up},
				{Name: "empty"},
				{Name: "lone", Hours: []float64{5}, Values: []float64{500}},
			}},
			{Title: "use", Unit: "% of limit", Series: []Series{{Name: "tpm", Hours: hs, Values: wave}, {Name: "tpd", Hours: hs, Values: wave, Dashed: true}},
				Lines: []Line{{Value: 100, Label: "limit"}}, Marks: marks,
				Bands: []Band{{From: 20, To: 30, Label: "stall"}, {From: 200, To: 150, Label: "stall"}, {From: -5, To: 2, Label: "warm-up"}, {From: 168, To: 168, Label: "end"}}},
			{Title: "clamped", Unit: "tokens/h", YMax: 1000, Series: []Series{{Name: "over", Hours: hs, Values: holes}},
				Lines: []Line{{Value: 5000, Label: "far above"}}},
		},
	}
}

func TestChartStructure(t *testing.T) {
	t.Parallel()
	c := testChart()
	root, raw := parse(t, c)
	panels := charttest.Panels(t, root)
	if len(panels) != len(c.Panels) {
		t.Fatalf("%d panels drawn, want %d", len(panels), len(c.Panels))
	}
	for i, p := range panels {
		if got, want := charttest.XTicks(t, p), []string{"day 1", "day 2", "day 3", "day 4", "day 5", "day 6", "day 7"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("panel %d time ticks %q, want %q", i, got, want)
		}
		var names []string
		for _, s := range c.Panels[i].Series {
			names = append(names, s.Name)
		}
		if got := charttest.Legend(p); len(got) < len(names) || strings.Join(got[:len(names)], "|") != strings.Join(names, "|") {
			t.Errorf("panel %d legend %q, want it to start with %q", i, got, names)
		}
	}
	// The first panel: a line per series with points, a dot for the lone
	// point, nothing for the empty series.
	if n := len(panels[0].All("series")); n != 1 {
		t.Errorf("first panel has %d polylines, want 1", n)
	}
	if n := len(panels[0].All("point")); n != 1 {
		t.Errorf("first panel has %d dots, want 1", n)
	}
	// Marks: hour 3's three marks share a pixel column and count 6; hour
	// 100's stands alone; the NaN is dropped. The legend names both labels.
	marks := panels[1].All("mark")
	if len(marks) != 2 {
		t.Fatalf("%d markers, want 2", len(marks))
	}
	if title := marks[0].Children[0].Text; !strings.Contains(title, "5 × 429") || !strings.Contains(title, "1 × 413") {
		t.Errorf("first marker's title %q, want the counts 5 × 429 and 1 × 413", title)
	}
	if legend := strings.Join(charttest.Legend(panels[1]), "|"); !strings.Contains(legend, "429|413") || !strings.Contains(legend, "stall|warm-up|end") {
		t.Errorf("use panel's legend %q, want the marks' and bands' labels", legend)
	}
	if n := len(panels[1].All("band")); n != 4 {
		t.Errorf("%d bands, want 4", n)
	}
	if n := len(panels[1].All("refline")); n != 1 {
		t.Errorf("%d reference lines, want 1", n)
	}
	if l := panels[1].All("refline-label"); len(l) != 1 || l[0].Text != "limit" {
		t.Errorf("reference line labels %v, want limit", l)
	}
	// The y-axis reaches the line at 100 though the data stays below 140.
	if v := charttest.YTicks(t, panels[1]); v[len(v)-1] < 140 {
		t.Errorf("use panel's axis tops at %v, want the data's 140 under it", v[len(v)-1])
	}
	// A NaN splits the clamped series: hours 1–49, 51–99, 101–149, 151–168.
	if n := len(panels[2].All("series")); n != 4 {
		t.Errorf("clamped panel has %d polylines, want 4 (split at NaN)", n)
	}
	if v := charttest.YTicks(t, panels[2]); v[len(v)-1] != 1000 {
		t.Errorf("clamped panel tops at %v, want its YMax 1000", v[len(v)-1])
	}
	// Labels are escaped.
	for _, s := range []string{"<script>", "<chart>"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("SVG holds %q unescaped", s)
		}
	}
	if !bytes.Contains(raw, []byte("&lt;script&gt;alert(1)&lt;/script&gt;")) {
		t.Error("the series name is not in the SVG, escaped")
	}
	// Same chart, same bytes.
	if _, again := parse(t, c); !bytes.Equal(raw, again) {
		t.Error("two renderings of one chart differ")
	}
}

func TestChartTimeTicks(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 10, 18, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		hours float64
		start time.Time
		want  string
	}{
		{168, time.Time{}, "day 1|day 2|day 3|day 4|day 5|day 6|day 7"},
		{72, start, "19 Oct|20 Oct|21 Oct"},
		{24, time.Time{}, "0 h|6 h|12 h|18 h"},
		{5, time.Time{}, "0 h|1 h|2 h|3 h|4 h"},
		{12, start, "09:30|15:30"},
		{24 * 365, time.Time{}, "day 1|day 31|day 61|day 91|day 121|day 151|day 181|day 211|day 241|day 271|day 301|day 331"},
	} {
		c := Chart{Hours: tc.hours, Start: tc.start, Panels: []Panel{{Title: "p"}}}
		root, _ := parse(t, c)
		p := charttest.Panels(t, root)[0]
		if got := strings.Join(charttest.XTicks(t, p), "|"); got != tc.want {
			t.Errorf("%v h from %v: ticks %q, want %q", tc.hours, tc.start, got, tc.want)
		}
		charttest.CheckInside(t, p)
	}
}

func TestChartNiceScale(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		top        float64
		step, ymax float64
		labels     string
	}{
		{0, 0.2, 1, "0|0.2|0.4|0.6|0.8|1"},
		{1, 0.2, 1, "0|0.2|0.4|0.6|0.8|1"},
		{0.7, 0.2, 0.8, "0|0.2|0.4|0.6|0.8"},
		{1.1, 0.25, 1.25, "0|0.25|0.5|0.75|1|1.25"},
		{11, 2.5, 12.5, "0|2.5|5|7.5|10|12.5"},
		{7, 2, 8, "0|2|4|6|8"},
		{130, 50, 150, "0|50|100|150"},
		{2500, 500, 2500, "0|500|1,000|1,500|2,000|2,500"},
		{9001, 2000, 10000, "0|2k|4k|6k|8k|10k"},
		{48_000, 10_000, 50_000, "0|10k|20k|30k|40k|50k"},
		{12e6, 2.5e6, 12.5e6, "0|2.5M|5M|7.5M|10M|12.5M"},
		{math.NaN(), 0.2, 1, "0|0.2|0.4|0.6|0.8|1"},
	} {
		step, ymax := niceScale(tc.top)
		var labels []string
		for _, v := range ticksUpTo(step, ymax) {
			labels = append(labels, tickLabel(v, step, ymax))
		}
		if math.Abs(step-tc.step) > 1e-9 || math.Abs(ymax-tc.ymax) > 1e-9 || strings.Join(labels, "|") != tc.labels {
			t.Errorf("niceScale(%v) = %v, %v: %q; want %v, %v: %q", tc.top, step, ymax, labels, tc.step, tc.ymax, tc.labels)
		}
	}
}

func TestChartSharedScale(t *testing.T) {
	t.Parallel()
	a := Panel{Series: []Series{{Name: "a", Hours: []float64{0, 1}, Values: []float64{0, 30}}}}
	b := Panel{Series: []Series{{Name: "b", Hours: []float64{0, 1}, Values: []float64{0, math.NaN()}}}, Lines: []Line{{Value: 70}}}
	c := Panel{YMax: 45}
	SharedScale([]*Panel{&a, &b, &c, nil})
	if a.YMax != 70 || b.YMax != 70 || c.YMax != 70 {
		t.Fatalf("YMax after SharedScale: %v %v %v, want 70 each", a.YMax, b.YMax, c.YMax)
	}
	root, _ := parse(t, Chart{Hours: 1, Panels: []Panel{a, b, c}})
	var tops []float64
	for _, p := range charttest.Panels(t, root) {
		v := charttest.YTicks(t, p)
		tops = append(tops, v[len(v)-1])
	}
	if tops[0] != 80 || tops[1] != 80 || tops[2] != 80 {
		t.Errorf("axes top at %v, want 80 each", tops)
	}
}
