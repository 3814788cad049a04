// Package progress is a job's progress as sluice shows it everywhere: the
// dashboard's Overview, Flows, flow and Plan pages, the demo's page and
// terminal view, and `sluice status`. Each of them reads a job's figures
// through Of and writes them with the functions here, so that one job at
// one moment shows the same done, remaining, rate and time left on every
// surface.
//
// The figures are the job's own: Done counts the items the job processed
// (saved or parked) and Remaining the items it still holds eligible, both
// as the store counts them (health.Flow). Items that had their output
// before the job was given them are not the job's and count in neither.
// The rate is measured: the items processed per hour of the app's clock
// over the health monitor's rate window (an hour by default). The time
// left is Remaining at that rate, a projection of what was measured; the
// planner's ETA (package plan) is a forecast from a simulation of the
// governor, and is shown as one, beside it.
package progress

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/num"
)

// maxLeft bounds the time left: a rate of a few items a year is as good as
// none (health's bound on an ETA).
const maxLeft = 10 * 365 * 24 * time.Hour

// Figures are a job's progress at a moment of the app's clock.
type Figures struct {
	// Done is the items the job processed, Remaining those still
	// eligible, Total their sum (at most the largest int64).
	Done, Remaining, Total int64
	// Ratio is Done of Total, 0 without items.
	Ratio float64
	// RatePerHour is the items processed per hour of the app's clock,
	// measured over the monitor's rate window; 0: none measured.
	RatePerHour float64
	// Left is how long Remaining takes at RatePerHour; 0 when nothing
	// remains, no rate was measured, or it is further than ten years.
	Left time.Duration
	// ETA is Now plus Left on the app's clock; zero when Left is.
	ETA time.Time
	// Now is the moment of the app's clock the figures are at.
	Now time.Time
}

// Of is the one reading of a job's progress: f's counts and measured rate
// at now, a time of the app's clock.
func Of(f health.Flow, now time.Time) Figures {
	g := Figures{Done: max(f.Done, 0), Remaining: max(f.Remaining, 0), Now: now.UTC()}
	g.Total = g.Done + g.Remaining
	if g.Total < g.Done {
		g.Total = math.MaxInt64
	}
	if g.Total > 0 {
		g.Ratio = float64(g.Done) / float64(g.Total)
	}
	if r := f.RatePerHour; r > 0 && !math.IsInf(r, 0) {
		g.RatePerHour = r
		if hours := float64(g.Remaining) / r; g.Remaining > 0 && hours <= maxLeft.Hours() {
			g.Left = time.Duration(hours * float64(time.Hour)) // as the health monitor's ETA counts it
			g.ETA = g.Now.Add(g.Left)
		}
	}
	return g
}

// Percent writes a ratio (0.75) as a percentage ("75%"), with a decimal
// under 10 % ("3.4%"); "—" for a ratio that is not a number.
func Percent(ratio float64) string {
	p := ratio * 100
	switch {
	case math.IsNaN(p) || math.IsInf(p, 0):
		return "—"
	case p != 0 && math.Abs(p) < 10:
		return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(math.Round(p), 'f', -1, 64) + "%"
}

// Rate writes a rate per hour with one decimal ("4.1"), "—" for none.
func Rate(perHour float64) string {
	if !(perHour > 0) || math.IsInf(perHour, 0) {
		return "—"
	}
	return strconv.FormatFloat(math.Round(perHour*10)/10, 'f', 1, 64)
}

// Span writes a duration for people: "850 ms", "4.2 s", "3m 20s",
// "2h 5m", "3d 4h".
func Span(d time.Duration) string {
	switch {
	case d < 0:
		// The least Duration has no opposite (-d is d again): it is
		// written as the one above it.
		return "-" + Span(-max(d, -math.MaxInt64))
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64) + " s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// LeftText is the time left as the surfaces write it: "7d 15h at
// 4.1/h"; "—" without one.
func (g Figures) LeftText() string {
	if g.Left <= 0 {
		return "—"
	}
	return Span(g.Left) + " at " + Rate(g.RatePerHour) + "/h"
}

// Counts writes done of total with the percentage: "1,431 / 2,018 (71%)".
func (g Figures) Counts() string {
	return num.Group(g.Done) + " / " + num.Group(g.Total) + " (" + Percent(g.Ratio) + ")"
}

// barWidth is how many characters Bar's bar has.
const barWidth = 20

// Bar draws the figures for a terminal: "[##########..........] 1,431 /
// 2,018 (71%)"; "-" for a job with no items.
func (g Figures) Bar() string {
	if g.Total <= 0 {
		return "-"
	}
	n := int(math.Min(g.Ratio, 1) * barWidth)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", barWidth-n) + "] " + g.Counts()
}
