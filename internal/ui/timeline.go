package ui

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
)

// historyView is a run's history as the run page shows it: a table of
// every attempt, and the same on a timeline.
type historyView struct {
	*engine.RunHistory
	Timeline timelineView
}

// The timeline's geometry, in the SVG's units: labels on the left, the
// axis across the top, a lane per attempt.
const (
	tlWidth  = 1000
	tlPlotX0 = 220 // where time starts; the lanes' labels are left of it
	tlPlotX1 = 990
	tlAxisH  = 28 // the axis's ticks and their labels
	tlLaneH  = 22
	tlBarH   = 14
)

// timelineView is a run's history drawn against time since the run was
// created: a lane per attempt (and one for the wait in the queue), each
// with the wait before it and the attempt's bar.
type timelineView struct {
	Width, Height, PlotX0, PlotX1 int
	Ticks                         []tickView
	Lanes                         []laneView
}

type tickView struct {
	X     float64
	Y2    int    // where its line ends: the timeline's foot
	Label string // the time since the run was created, with its unit
}

// laneView is one lane: its label, and its bars at Y (their top).
type laneView struct {
	Y, TextY  int
	Label     string
	Step      string
	Attempt   int
	Bar, Wait *barView
}

type barView struct {
	X, W   float64
	Y      int // its top; TextY is its label's baseline
	TextY  int
	Class  string // the bar's: state-completed, state-failed; the wait's: wait-quota, wait-retry…
	Label  string // written on or beside the bar
	Title  string // the tooltip
	TextX  float64
	Status string
}

// tickSteps are the axis's possible spacings, smallest first.
var tickSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour,
}

// maxTicks bounds the axis's ticks.
const maxTicks = 8

// tickStep is the smallest spacing of tickSteps that marks span with at
// most maxTicks ticks (the largest for a longer span).
func tickStep(span time.Duration) time.Duration {
	for _, s := range tickSteps {
		if span/s < maxTicks {
			return s
		}
	}
	return span / (maxTicks - 1)
}

// newHistoryView lays out h's timeline from the run's creation to its end
// (to now while it runs).
func newHistoryView(h *engine.RunHistory, now time.Time) historyView {
	v := historyView{RunHistory: h}
	t0, t1 := h.CreatedAt, h.EndedAt
	if t1.IsZero() {
		t1 = now
	}
	stretch := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if t.Before(t0) {
			t0 = t
		}
		if t.After(t1) {
			t1 = t
		}
	}
	for _, a := range h.Attempts {
		stretch(a.StartedAt)
		stretch(a.EndedAt)
		if a.Wait != nil {
			stretch(a.Wait.StartedAt)
		}
	}
	span := max(t1.Sub(t0), time.Millisecond)
	x := func(t time.Time) float64 {
		return clamp(tlPlotX0+float64(t.Sub(t0))/float64(span)*(tlPlotX1-tlPlotX0), tlPlotX0, tlPlotX1)
	}
	bar := func(from, to time.Time) *barView {
		if to.IsZero() || to.Before(from) {
			to = t1 // under way
		}
		b := &barView{X: x(from)}
		b.W = max(x(to)-b.X, 2)
		b.TextX = b.X + 3
		return b
	}
	wait := func(w *engine.Wait) *barView {
		b := bar(w.StartedAt, w.EndedAt)
		b.Class = "wait-" + w.Cause
		b.Label = w.Label() + " · " + fmtDur(w.EndedAt.Sub(w.StartedAt))
		b.Title = b.Label
		return b
	}
	tl := timelineView{Width: tlWidth, PlotX0: tlPlotX0, PlotX1: tlPlotX1}
	step := tickStep(span)
	for d := time.Duration(0); d <= span; d += step {
		tl.Ticks = append(tl.Ticks, tickView{X: x(t0.Add(d)), Label: fmtDur(d)})
	}
	y := tlAxisH
	lane := func(l laneView) {
		l.Y, l.TextY = y, y+tlBarH-3
		for _, b := range []*barView{l.Bar, l.Wait} {
			if b != nil {
				b.Y, b.TextY = l.Y, l.TextY
			}
		}
		tl.Lanes = append(tl.Lanes, l)
		y += tlLaneH
	}
	if h.Queued != nil {
		lane(laneView{Label: "queued", Wait: wait(h.Queued)})
	}
	for _, a := range h.Attempts {
		l := laneView{Label: fmt.Sprintf("%d. %s #%d", a.StepIndex, a.Step, a.Attempt), Step: a.Step, Attempt: a.Attempt}
		if a.Kind == "sleep" {
			l.Label = fmt.Sprintf("%d. sleep", a.StepIndex)
		}
		if a.Wait != nil {
			l.Wait = wait(a.Wait)
		}
		if !a.StartedAt.IsZero() {
			l.Bar = bar(a.StartedAt, a.EndedAt)
			l.Bar.Class, l.Bar.Status = "state-"+a.Status, a.Status
			l.Bar.Title = fmt.Sprintf("%s attempt %d: %s, %s", a.Step, a.Attempt, a.Status, fmtDur(msDur(a.DurationMS)))
		}
		lane(l)
	}
	tl.Height = y + 4
	for i := range tl.Ticks {
		tl.Ticks[i].Y2 = tl.Height
	}
	v.Timeline = tl
	return v
}

// msDur is ms milliseconds.
func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
