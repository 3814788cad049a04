package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/internal/progress"
)

// pageNames are the templates/NAME.html of the pages, each rendered
// inside templates/layout.html.
var pageNames = []string{"overview", "flows", "flow", "runs", "run", "version", "plan", "send", "login", "error", "functions", "page"}

// parsePages parses every page with the layout and the shared parts.
func parsePages(assetURL func(string) string) (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return nil, fmt.Errorf("ui: parse the layout: %w", err)
	}
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := base.Clone()
		if err == nil {
			t, err = t.ParseFS(templateFS, "templates/"+name+".html")
		}
		if err != nil {
			return nil, fmt.Errorf("ui: parse page %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// funcs are the templates' formatting functions. None returns
// template.HTML: everything they give is escaped where it is written.
var funcs = template.FuncMap{
	"int":     fmtInt,
	"float":   fmtFloat,
	"pct":     fmtPct,
	"ts":      fmtTime,
	"rel":     fmtRel,
	"dur":     fmtDur,
	"ms":      func(ms float64) string { return fmtDur(time.Duration(ms * float64(time.Millisecond))) },
	"path":    url.PathEscape,
	"query":   url.QueryEscape,
	"json":    fmtJSON,
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"add":     func(a, b int) int { return a + b },
	"short":   shorten,
	"at":      func(now, t time.Time) moment { return moment{Now: now, T: t} },
	"deref":   func(p *float64) float64 { return *p },
	"money":   func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"nano":    governor.FormatMoney,
	"amount":  fmtAmount,
	"barw":    barWidth,
	"rate":    progress.Rate,
	"gaugeAt": func(now time.Time, key string, g gaugeView) gaugeAt { return gaugeAt{Now: now, Key: key, G: g} },

	"timelineHeight": timelineHeight,
}

// moment is a time to show with how far it is from the page's now (the
// "when" template).
type moment struct{ Now, T time.Time }

// gaugeAt is a gauge of key to show at the page's now (the "gauge"
// template).
type gaugeAt struct {
	Now time.Time
	Key string
	G   gaugeView
}

// fmtAmount writes an amount of a gauge: money (billionths) as money,
// with governor.FormatMoney, else an integer with thousands separators.
func fmtAmount(money bool, n int64) string {
	if money {
		return governor.FormatMoney(n)
	}
	return num.Group(n)
}

// fmtInt writes an integer with thousands separators.
func fmtInt(v any) string {
	switch n := v.(type) {
	case int:
		return num.Group(int64(n))
	case int64:
		return num.Group(n)
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return "—"
		}
		return num.Group(int64(math.Round(n)))
	}
	return fmt.Sprint(v)
}

// fmtFloat writes f with at most one decimal, and thousands separators.
func fmtFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "—"
	}
	whole := math.Trunc(f)
	frac := math.Round(math.Abs(f-whole) * 10)
	if frac == 10 {
		whole, frac = whole+math.Copysign(1, f), 0
	}
	s := num.Group(int64(whole))
	if f < 0 && whole == 0 {
		s = "-0"
	}
	if frac == 0 {
		return s
	}
	return s + "." + strconv.Itoa(int(frac))
}

// fmtPct writes a ratio as a percentage, as every surface of a job's
// progress does (progress.Percent).
func fmtPct(ratio float64) string { return progress.Percent(ratio) }

// fmtTime writes t in UTC to the second, "—" for the zero time.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// fmtRel writes t relative to now: "in 3m 20s", "5s ago"; "" for the zero
// time.
func fmtRel(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + fmtDur(d)
	}
	return fmtDur(-d) + " ago"
}

// fmtDur writes d for people, as every surface of a job's progress does
// (progress.Span): "850 ms", "4.2 s", "3m 20s", "2h 5m", "3d 4h".
func fmtDur(d time.Duration) string { return progress.Span(d) }

// fmtJSON writes JSON indented for reading; anything else as it is.
func fmtJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// ratio is part over whole, 0 when whole is not positive.
func ratio(part, whole float64) float64 {
	if !(whole > 0) {
		return 0
	}
	return part / whole
}

// barWidth is a ratio as the width of a bar of 100: at most the whole bar.
func barWidth(r float64) float64 {
	if !(r > 0) {
		return 0
	}
	return math.Round(math.Min(r, 1)*1000) / 10
}

// level names how full a ratio is, for a bar's colour: ok, high (80 %),
// full (100 %).
func level(r float64) string {
	switch {
	case r >= 1:
		return "full"
	case r >= 0.8:
		return "high"
	}
	return "ok"
}

// shorten cuts s to n bytes on a rune boundary, with an ellipsis.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !isRuneStart(s[i]) {
		i--
	}
	return strings.TrimSpace(s[:i]) + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
