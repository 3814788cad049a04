package bench

import (
	"sort"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
)

// devpickPolicy models DevPick's scheduler from seed 000, before its fixes
// (naive) and after them (fixed). Every 30 minutes one scheduled job runs the
// flows' backfill jobs one after another. Each job first looks at one shared
// "rate_limited_until" time and, if it has not passed, does nothing
// (aborted=rate_limit_backoff). A job takes up to perRun eligible items and
// sends them perRequest at a time, gap apart. Any 429 sets the shared time
// from its retry-after and aborts the job; any other error aborts the job.
// No request sets max_tokens, so the provider reserves its default.
type devpickPolicy struct {
	jobs  []devpickJob
	until time.Time // the shared rate_limited_until
}

type devpickJob struct {
	f          *forecast.FlowState
	perRun     int
	perRequest int
	gap        time.Duration
}

// devpickShape is one job's numbers as the seed gives them.
type devpickShape struct {
	perRun, perRequest int
	gap                time.Duration
}

var (
	// Before the fixes: analysis 15 items 5 per request 10 s apart; summary
	// 30 items 5 per request 10 s apart; title 10 items in one request.
	naiveShapes = map[string]devpickShape{
		"analysis": {15, 5, 10 * time.Second},
		"summary":  {30, 5, 10 * time.Second},
		"title":    {10, 10, 10 * time.Second},
	}
	// After them: analysis requests 60 s apart; summary 2 per run; title 5 per run.
	fixedShapes = map[string]devpickShape{
		"analysis": {15, 5, 60 * time.Second},
		"summary":  {2, 2, 10 * time.Second},
		"title":    {5, 5, 10 * time.Second},
	}
)

const devpickEvery = 30 * time.Minute

func newDevpick(_ *forecast.Scenario, fixed bool) (forecast.Policy, error) {
	return &devpickStarter{p: &devpickPolicy{}, fixed: fixed}, nil
}

func (p *devpickPolicy) init(w *forecast.World, fixed bool) {
	shapes := naiveShapes
	if fixed {
		shapes = fixedShapes
	}
	for _, f := range w.Flows() {
		s, ok := shapes[f.Flow().Name]
		if !ok {
			// A flow the seed does not name: three requests of up to five items a run.
			n := min(max(f.Flow().BatchMax, 1), 5)
			s = devpickShape{3 * n, n, 10 * time.Second}
		}
		p.jobs = append(p.jobs, devpickJob{f: f, perRun: s.perRun, perRequest: s.perRequest, gap: s.gap})
	}
	if fixed {
		// The fix runs the lighter backfill before the heavier one; flows with
		// arrivals (the analysis of new articles) keep running first.
		sort.SliceStable(p.jobs, func(i, j int) bool {
			a, b := p.jobs[i].f.Flow(), p.jobs[j].f.Flow()
			if (a.ArrivalsPerDay > 0) != (b.ArrivalsPerDay > 0) {
				return a.ArrivalsPerDay > 0
			}
			if a.ArrivalsPerDay > 0 {
				return false
			}
			return a.ItemInputTokens+a.ItemOutputTokens < b.ItemInputTokens+b.ItemOutputTokens
		})
	}
}

type devpickStarter struct {
	p     *devpickPolicy
	fixed bool
}

func (s *devpickStarter) Start(w *forecast.World) {
	s.p.init(w, s.fixed)
	var tick func()
	tick = func() {
		s.p.runJob(w, 0)
		w.At(w.Now().Add(devpickEvery), tick)
	}
	w.At(w.Now().Add(time.Minute), tick)
}

func (s *devpickStarter) Wake(*forecast.World) {}

// runJob runs job i of the scheduled job, then the ones after it.
func (p *devpickPolicy) runJob(w *forecast.World, i int) {
	if i >= len(p.jobs) {
		return
	}
	next := func() { p.runJob(w, i+1) }
	if w.Now().Before(p.until) {
		next() // aborted=rate_limit_backoff
		return
	}
	j := p.jobs[i]
	selected := min(j.perRun, j.f.Queued())
	p.sendBatch(w, j, selected, next)
}

// sendBatch sends the job's next request of up to perRequest of the left
// selected items, waits for its answer, then the gap, then goes on.
func (p *devpickPolicy) sendBatch(w *forecast.World, j devpickJob, left int, next func()) {
	n := min(j.perRequest, left, j.f.Queued())
	if n == 0 {
		next()
		return
	}
	sentAt := w.Now()
	w.Send(j.f, w.Take(j.f, n), 0, func(o forecast.Outcome) {
		if o.Response.Status != 200 || o.Response.Fault != forecast.NoFault {
			w.PutBack(j.f, o.Items)
		}
		switch {
		case o.Response.Status == 429:
			p.until = w.Now().Add(o.Response.RetryAfter)
			w.At(w.Now(), next) // aborted=rate_limited
		case o.Response.Status != 200 || o.Response.Rejected || o.Response.Fault != forecast.NoFault:
			w.At(w.Now(), next) // the job raised
		default:
			w.At(sentAt.Add(j.gap), func() { p.sendBatch(w, j, left-n, next) })
		}
	})
}
