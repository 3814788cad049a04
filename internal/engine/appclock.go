package engine

import (
	"time"

	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/run"
)

// appClock reads the engine's clock (Config.Now) with the wall clock's, to
// show the times of DBOS's records, which it keeps by the wall clock, on
// the engine's, as every other time of the app is: Runs, RunDetail,
// RunHistory and Wait answer on it, and a search's bounds are taken on it.
// On a clock that is the wall clock nothing changes; on a compressed one a
// time and a duration are those of the clock as it runs now (see
// clock.Reading, and its caveat for a clock that was restarted).
func (e *Engine) appClock() clock.Reading { return clock.Read(e.cfg.Now, e.cfg.Speed) }

// onAppClock is s with its times on the app's clock c.
func onAppClock(c clock.Reading, s run.Summary) run.Summary {
	s.CreatedAt, s.StartedAt, s.EndedAt = c.ToApp(s.CreatedAt), c.ToApp(s.StartedAt), c.ToApp(s.EndedAt)
	return s
}

// stepsOnAppClock puts the times and durations of steps on the app's clock
// c, in place.
func stepsOnAppClock(c clock.Reading, steps []StepView) {
	for i := range steps {
		s := &steps[i]
		s.StartedAt, s.EndedAt = c.ToApp(s.StartedAt), c.ToApp(s.EndedAt)
		s.DurationMS, s.WaitedMS = msOnAppClock(c, s.DurationMS), msOnAppClock(c, s.WaitedMS)
	}
}

// attemptsOnAppClock puts the times and durations of attempts, and of the
// waits before them, on the app's clock c, in place.
func attemptsOnAppClock(c clock.Reading, attempts []Attempt) {
	for i := range attempts {
		a := &attempts[i]
		a.StartedAt, a.EndedAt = c.ToApp(a.StartedAt), c.ToApp(a.EndedAt)
		a.DurationMS = msOnAppClock(c, a.DurationMS)
		if w := a.Wait; w != nil {
			w.StartedAt, w.EndedAt = c.ToApp(w.StartedAt), c.ToApp(w.EndedAt)
			w.DurationMS = msOnAppClock(c, w.DurationMS)
		}
	}
}

// msOnAppClock is a duration of v milliseconds of the wall clock on the
// app's clock c, in milliseconds.
func msOnAppClock(c clock.Reading, v float64) float64 {
	return ms(c.Duration(time.Duration(v * float64(time.Millisecond))))
}
