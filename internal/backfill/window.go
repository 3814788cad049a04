package backfill

import (
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// How a backfill sizes the calls it keeps in flight (window).
const (
	// startWindow is how many calls a backfill keeps in flight before it
	// has seen one answered.
	startWindow = 4
	// headroom is what the window keeps over what Little's law says the
	// admitted rate needs: enough that a call answered early finds the next
	// waiting in the governor's line, not a gap.
	headroom = 1.25
	// growth is how much the window may grow each latency while no call
	// waits in the governor's line: it doubles, as TCP's slow start does.
	growth = 2
	// admitsKept bounds the admissions the rate is measured from.
	admitsKept = 8192
	// minWait is the shortest wait in line that counts as one.
	minWait = 250 * time.Millisecond
	// latencyMemory is how many answers the average latency mostly
	// remembers.
	latencyMemory = 16
)

// The reasons InFlightState gives for what holds a backfill's calls in
// flight where they are.
const (
	// LimitedByQuota: its calls wait in the governor's line; the key's
	// quota, or the flow's share of it, is what limits it.
	LimitedByQuota = "quota"
	// LimitedByInFlight: the InFlight setting holds it under what the
	// governor would admit.
	LimitedByInFlight = "in_flight"
	// LimitedByItems: it has fewer shares with eligible items than calls
	// it would keep in flight.
	LimitedByItems = "items"
	// LimitedByLatency: it keeps MaxInFlight calls in flight and none
	// waits: the provider's latency is what limits it.
	LimitedByLatency = "latency"
	// LimitedByGrowing: it is still growing towards what the governor
	// admits.
	LimitedByGrowing = "growing"
)

// InFlightState is how many calls a backfill keeps in flight, as this
// process sees them.
type InFlightState struct {
	// InFlight counts its calls going now, waiting in the governor's line
	// included.
	InFlight int
	// Target is how many it would keep in flight: what the governor
	// admits times the latency it observes, with headroom, at most
	// MaxInFlight; the InFlight setting may hold it lower.
	Target int
	// LimitedBy says what keeps it from more (the LimitedBy constants).
	LimitedBy string
}

// window sizes how many calls a backfill keeps in flight by Little's law:
// calls in flight = admitted rate × latency. It grows while calls are
// admitted without waiting in the governor's line, and when they have
// waited for a whole latency it is set to the rate the governor admitted
// times the latency, with headroom. A backfill's calls tell it how they
// go (engine.CallObserver); it keeps no state across restarts, so a
// restarted process starts small again.
type window struct {
	now   func() time.Time
	bound int                                     // the InFlight setting; 0: none
	quota func(now time.Time) (perSecond float64) // what the key's limits admit; 0: unknown

	mu       sync.Mutex
	target   float64
	byQuota  bool          // target was last set by what the governor admits
	latency  time.Duration // average of answered calls'; 0 until one is
	answered int           // calls answered
	admits   admissions    // the latest admissions
	waiting  time.Time     // when the calls began to wait in line; zero: they do not
	lastWait time.Time     // when a call last waited in line
	updated  time.Time     // when target was last set
	grown    time.Time     // when target last grew with no limit known
	calls    map[*call]bool
	short    bool // the last run had fewer shares with items than it would keep calls going
}

// call is one call going, as the window follows it.
type call struct {
	w    *window
	sent time.Time // zero until the governor admitted it
}

func newWindow(bound int, now func() time.Time, quota func(time.Time) float64) *window {
	return &window{now: now, bound: bound, quota: quota, target: startWindow, calls: map[*call]bool{}}
}

// limit is how many calls to keep in flight now: the target, held to the
// InFlight setting.
func (w *window) limit() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Also between calls' events: until the first answer, the calls out
	// tell the latency by how long they have been out.
	w.update(w.now())
	n := int(math.Round(w.target))
	if w.bound > 0 {
		n = min(n, w.bound)
	}
	return max(n, 1)
}

// begin follows a call going, until its end.
func (w *window) begin() *call {
	c := &call{w: w}
	w.mu.Lock()
	w.calls[c] = true
	w.mu.Unlock()
	return c
}

func (c *call) end() {
	c.w.mu.Lock()
	delete(c.w.calls, c)
	c.w.mu.Unlock()
}

// shortOfItems records whether the run could start as many calls as the
// window allows.
func (w *window) shortOfItems(short bool) {
	w.mu.Lock()
	w.short = short
	w.mu.Unlock()
}

// waited is how long a wait in line must be to count: a slot of a paced
// limit is no line.
func (w *window) waited(d time.Duration) bool {
	return d > max(w.latency/8, minWait)
}

func (c *call) Admitted(waited time.Duration) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	c.sent = now
	w.admits.add(now)
	w.sawWait(now, w.waited(waited))
}

func (c *call) Queued(time.Duration) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sawWait(w.now(), true)
}

// Answered takes the call's latency into the average: the mean of the
// first few, then a moving average.
func (c *call) Answered(latency time.Duration) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c.sent = time.Time{}
	w.answered++
	w.latency += (latency - w.latency) / time.Duration(min(w.answered, latencyMemory))
	w.update(w.now())
}

// sawWait notes whether a call waited in line, and updates the target.
func (w *window) sawWait(now time.Time, waited bool) {
	switch {
	case !waited:
		w.waiting = time.Time{}
	case w.waiting.IsZero():
		w.waiting = now
	}
	if waited {
		w.lastWait = now
	}
	w.update(now)
}

// update sets the target at most every quarter of a latency: to the
// admitted rate times the latency, with headroom, once calls have waited
// in line for a whole latency; while no call waits, higher: to what the
// key's limits admit times the latency, with headroom, when they are
// known (a window of a minute admits a burst of calls without a wait, so
// no wait does not say the rate can be kept), else up to twice what is
// in flight.
func (w *window) update(now time.Time) {
	latency := w.expected(now)
	if latency <= 0 || now.Sub(w.updated) < latency/4 {
		return
	}
	w.updated = now
	little := w.rate(now, latency) * latency.Seconds()
	// A wait long past says nothing of now: the calls since were few.
	waiting := !w.waiting.IsZero() && now.Sub(w.lastWait) < latency
	var quota float64
	if !waiting {
		quota = w.quota(now)
	}
	switch {
	case waiting && now.Sub(w.waiting) >= latency:
		w.target, w.byQuota = little*headroom, true
	case waiting:
	case quota > 0:
		// Never under the start: until the first answers, the latency is
		// only how long the calls have been out so far.
		w.target, w.byQuota = max(quota*latency.Seconds()*headroom, startWindow), true
	case now.Sub(w.grown) >= latency && little*growth > w.target:
		// Once a latency: the calls since the last growth have answered.
		w.target, w.byQuota, w.grown = little*growth, false, now
	}
	w.target = min(max(w.target, 1), MaxInFlight)
}

// expected is the latency the window works with: the average of the
// answered calls, but, until a few dozen were answered, at least how long
// the oldest call going has been out. The first answers are the quickest
// of the first calls; the slow ones are still out, and an average of the
// answers alone would keep too few calls going for the first minutes.
func (w *window) expected(now time.Time) time.Duration {
	d := w.latency
	if w.answered >= 4*latencyMemory {
		return d
	}
	for c := range w.calls {
		if !c.sent.IsZero() {
			d = max(d, now.Sub(c.sent))
		}
	}
	return d
}

// rate is how many calls a second were admitted over the last latency (at
// least a second), or since the first admission.
func (w *window) rate(now time.Time, latency time.Duration) float64 {
	span := max(latency, time.Second)
	from := now.Add(-span)
	n, kept := 0, w.admits.len()
	for i := kept - 1; i >= 0 && !w.admits.at(i).Before(from); i-- {
		n++
	}
	if kept > 0 && n == kept {
		// All within the span: measured since the first only.
		span = max(now.Sub(w.admits.at(0)), latency/4, time.Millisecond)
	}
	return float64(n) / span.Seconds()
}

// admissions are the times of the latest admitsKept admissions, in a ring:
// each kept as its offset from the first, eight bytes and no pointer, so
// that a window that has seen thousands of calls neither holds a slice of
// times the collector scans nor copies it as it moves on.
type admissions struct {
	base time.Time       // the first admission
	ring []time.Duration // offsets from base; ring[next:] then ring[:next] oldest first once full
	next int
}

func (a *admissions) add(t time.Time) {
	if a.ring == nil {
		a.base = t
	}
	if len(a.ring) < admitsKept {
		a.ring = append(a.ring, t.Sub(a.base))
		return
	}
	a.ring[a.next] = t.Sub(a.base)
	a.next = (a.next + 1) % admitsKept
}

func (a *admissions) len() int { return len(a.ring) }

// at is the i-th oldest admission kept.
func (a *admissions) at(i int) time.Time {
	return a.base.Add(a.ring[(a.next+i)%len(a.ring)])
}

// state is what InFlightState reports.
func (w *window) state() InFlightState {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	target := max(int(math.Round(w.target)), 1)
	st := InFlightState{InFlight: len(w.calls), Target: target}
	limit := target
	if w.bound > 0 {
		limit = min(limit, w.bound)
	}
	latency := max(w.latency, time.Second)
	switch {
	case !w.lastWait.IsZero() && now.Sub(w.lastWait) < 2*latency:
		st.LimitedBy = LimitedByQuota
	case w.bound > 0 && w.bound < target:
		st.LimitedBy = LimitedByInFlight
	case w.short:
		st.LimitedBy = LimitedByItems
	case limit >= MaxInFlight:
		st.LimitedBy = LimitedByLatency
	case w.byQuota:
		st.LimitedBy = LimitedByQuota
	default:
		st.LimitedBy = LimitedByGrowing
	}
	return st
}

// quotaRate is how many calls a second the limits of g admit flow, each
// limit's allowance spread over its period, at what the flow's calls have
// cost on average (a call of one request and no tokens before any was
// admitted: only request limits count then); 0 if no limit applies.
func quotaRate(g *governor.Governor, flow string, now time.Time) float64 {
	st := g.Stats(now)
	per := governor.Cost{Requests: 1}
	for _, f := range st.Flows {
		if f.Name == flow && f.Admitted > 0 {
			per.Input, per.Output = f.Tokens.Input/f.Admitted, f.Tokens.Output/f.Admitted
		}
	}
	rate := 0.0
	for _, l := range st.Limits {
		need := per.On(l.Limit)
		if l.Max <= 0 || need <= 0 {
			continue
		}
		r := float64(l.Max) / l.Limit.Period().Seconds() / float64(need)
		if rate == 0 || r < rate {
			rate = r
		}
	}
	return rate
}
