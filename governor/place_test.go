package governor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/clock"
)

// doneCtx is a context already done: Await gives up at once.
func doneCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// A call whose wait ends with a keep leaves the line but keeps its place:
// back in line, it is admitted before the calls of its flow that were
// behind it, and the estimates of the calls behind it still count it.
func TestKeptPlace(t *testing.T) {
	t.Parallel()
	now := t0
	g := mustNew(t, Config{Limits: Limits{RPM: 1}, Now: func() time.Time { return now }})
	one := Cost{Requests: 1}
	first := mustReserve(t, g, now, "a", one)
	g.Advance(now)
	if !first.Admitted() {
		t.Fatal("the first call was not admitted on an empty key")
	}
	r := make([]*Reservation, 10)
	for i := range r {
		r[i] = mustReserve(t, g, now, "a", one)
	}
	// r[k] is admitted at minute k+1: one request a minute.
	for k, want := range []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute} {
		idx := []int{0, 4, 9}[k]
		if got := g.EstimateWait(now, r[idx]); got != want {
			t.Errorf("estimate of call %d: %v, want %v", idx, got, want)
		}
	}
	// Every one of them gives up, front first, keeping its place.
	var errs []*WaitError
	for i := range r {
		err := g.Await(doneCtx(), r[i], time.Minute)
		we, ok := errors.AsType[*WaitError](err)
		if !ok {
			t.Fatalf("Await of call %d: %v, want a *WaitError", i, err)
		}
		errs = append(errs, we)
	}
	// The last one's estimate still counts the nine parked ahead of it.
	if got := errs[9].EstimatedWait; got != 10*time.Minute {
		t.Errorf("estimate of the last call after those ahead left keeping their places: %v, want 10m", got)
	}
	if got, want := errs[9].KeptUntil, now.Add(11*time.Minute); !got.Equal(want) {
		t.Errorf("kept until %v, want the estimate plus the keep: %v", got, want)
	}
	if st := g.Stats(now); st.Flows[0].Waiting != 0 || st.Flows[0].Parked != 10 {
		t.Fatalf("stats: %d waiting, %d parked; want 0 and 10", st.Flows[0].Waiting, st.Flows[0].Parked)
	}
	if got := g.EstimateFor(now, "a", one); got != 11*time.Minute {
		t.Errorf("estimate of a new call behind ten kept places: %v, want 11m", got)
	}
	// A new call of the flow, then the fifth and the first come back.
	late := mustReserve(t, g, now, "a", one)
	for _, i := range []int{4, 0} {
		if !r[i].Rejoin(now) {
			t.Fatalf("call %d could not take its place back", i)
		}
	}
	now = at(time.Minute)
	g.Advance(now)
	if !r[0].Admitted() || r[4].Admitted() || late.Admitted() {
		t.Fatalf("at 1m: first back admitted %v, fifth %v, the new call %v; want only the first", r[0].Admitted(), r[4].Admitted(), late.Admitted())
	}
	now = at(2 * time.Minute)
	g.Advance(now)
	if !r[4].Admitted() || late.Admitted() {
		t.Fatalf("at 2m: the fifth admitted %v, the new call %v; want the fifth ahead of the new call", r[4].Admitted(), late.Admitted())
	}
	// A place given up (Cancel) or lapsed cannot be taken back.
	r[1].Cancel(now)
	if r[1].Rejoin(now) {
		t.Fatal("a cancelled place was taken back")
	}
	now = errs[9].KeptUntil.Add(time.Second)
	if r[9].Rejoin(now) {
		t.Fatal("a lapsed place was taken back")
	}
	if st := g.Stats(now); st.Flows[0].Parked != 0 {
		t.Fatalf("%d places still kept after every one lapsed", st.Flows[0].Parked)
	}
}

// A place that lapses moves the calls of its flow behind it up, as a call
// that leaves the line does: the flow's share is not lost to other flows.
func TestLapsedPlaceMovesTheLineUp(t *testing.T) {
	t.Parallel()
	now := t0
	g := mustNew(t, Config{Limits: Limits{RPM: 1}, Now: func() time.Time { return now }})
	one := Cost{Requests: 1}
	mustReserve(t, g, now, "x", one)
	g.Advance(now)
	a1 := mustReserve(t, g, now, "a", one)
	a2 := mustReserve(t, g, now, "a", one)
	b1 := mustReserve(t, g, now, "b", one)
	if err := g.Await(doneCtx(), a1, time.Second); err == nil {
		t.Fatal("Await with a done context admitted")
	}
	// While a1's place is kept, a2 stands behind it: b1 goes first.
	// Once it lapses, a2 moves up to where a1 was, level with b1, and
	// goes first as the older call.
	now = at(3 * time.Minute)
	g.Advance(now)
	if !a2.Admitted() || b1.Admitted() {
		t.Fatalf("after a1's place lapsed: a2 admitted %v, b1 %v; want a2 in a1's place", a2.Admitted(), b1.Admitted())
	}
}

// On a clock that runs fast, Wait sleeps for the wall time the simulated
// wait takes, not the simulated time: the default After asks the wall
// clock for what it sleeps divided by Speed. Not parallel: it watches the
// wall-clock timer every governor sleeps on.
func TestWaitOnAFastClock(t *testing.T) {
	const speed = 600
	var mu sync.Mutex
	var asked []time.Duration
	wallAfter = func(d time.Duration) <-chan time.Time {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, d)
		return time.After(d)
	}
	t.Cleanup(func() { wallAfter = time.After })
	c := clock.New(speed)
	g := mustNew(t, Config{Limits: Limits{RPM: 1}, Now: c.Now, Speed: c.Speed()})
	first, err := g.Wait(context.Background(), "a", Cost{Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	second, err := g.Wait(context.Background(), "a", Cost{Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	if gap := second.AdmittedAt().Sub(first.AdmittedAt()); gap < time.Minute {
		t.Fatalf("admitted %v apart on the fast clock, want a minute at least", gap)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 {
		t.Fatal("the second call of a one-a-minute key did not sleep")
	}
	for _, d := range asked {
		if d > time.Minute/speed {
			t.Fatalf("Wait slept %v of wall time (%v in all), want at most the minute divided by the speed, %v", d, asked, time.Minute/speed)
		}
	}
}

// fakeClock is a clock a test moves by hand: its After is a timer that
// fires when Advance moves the clock past it, never on the wall clock.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	asked  chan time.Duration // each d After is asked for
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, asked: make(chan time.Duration, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
	} else {
		c.timers = append(c.timers, t)
	}
	select {
	case c.asked <- d:
	default:
	}
	return t.c
}

// Advance moves the clock on by d and fires the timers it passes.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			keep = append(keep, t)
			continue
		}
		t.c <- c.now
	}
	c.timers = keep
}

// With Config.After on a fake clock, Wait sleeps on that clock: the second
// call of a one-a-minute key is admitted once the clock is moved on by a
// minute, and nothing waits for the wall clock.
func TestWaitOnAFakeClock(t *testing.T) {
	t.Parallel()
	fc := newFakeClock(t0)
	g := mustNew(t, Config{Limits: Limits{RPM: 1}, Now: fc.Now, After: fc.After})
	one := Cost{Requests: 1}
	first, err := g.Wait(context.Background(), "a", one)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   *Reservation
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := g.Wait(context.Background(), "a", one)
		done <- result{r, err}
	}()
	// Bounds the test should Wait ignore the fake clock; never reached otherwise.
	guard := time.After(budget)
	// The second call sleeps until the first one's minute is over.
	select {
	case d := <-fc.asked:
		if d != time.Minute {
			t.Fatalf("Wait slept for %v on the governor's clock, want a minute", d)
		}
	case <-guard:
		t.Fatal("Wait did not sleep on Config.After")
	}
	select {
	case res := <-done:
		t.Fatalf("the second call returned (%v) before the clock moved", res.err)
	default:
	}
	fc.Advance(time.Minute)
	var second result
	select {
	case second = <-done:
	case <-guard:
		t.Fatal("the fake clock moved on by a minute, and the second call was not admitted")
	}
	if second.err != nil {
		t.Fatal(second.err)
	}
	if got, want := second.r.AdmittedAt(), first.AdmittedAt().Add(time.Minute); !got.Equal(want) {
		t.Fatalf("second call admitted at %v, want %v: a minute after the first on the fake clock", got, want)
	}
}

// The estimate counts the calls ahead whole: a 990-token call admitted on
// a TPM of 1,000, another waiting, and a 40-token call behind it can be
// admitted only once both 990-token charges have aged out — two minutes
// and two lags, not the 62 s a drain of the backlog at the limit's rate
// told (a client that obeyed that retry-after came back a minute early).
func TestEstimateCountsCallsAheadWhole(t *testing.T) {
	t.Parallel()
	const lag = time.Second
	now := t0
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}, Lag: lag, Now: func() time.Time { return now }})
	big := Cost{Requests: 1, Input: 890, Output: 100}
	first := mustReserve(t, g, now, "a", big)
	g.Advance(now)
	if !first.Admitted() {
		t.Fatal("the first call was not admitted on an empty key")
	}
	second := mustReserve(t, g, now, "b", big)
	small := mustReserve(t, g, now, "c", Cost{Requests: 1, Input: 30, Output: 10})
	g.Advance(now)
	// Asked for its estimate again once the second big call went.
	var again []time.Duration
	firstTold := estimateThenRun(t, g, small, &now, func() {
		if second.Admitted() && len(again) == 0 && !small.Admitted() {
			again = append(again, now.Sub(t0)+g.EstimateWait(now, small))
		}
	})
	told := append([]time.Duration{firstTold}, again...)
	admitted := small.AdmittedAt().Sub(t0)
	if want := 2 * (time.Minute + lag); admitted != want {
		t.Fatalf("the small call was admitted at %v, want %v: after both big calls aged out", admitted, want)
	}
	for i, d := range told {
		if d < admitted || d > admitted+time.Second {
			t.Errorf("estimate %d puts the admission at %v, the call was admitted at %v: want it no earlier, and within a second", i, d, admitted)
		}
	}
}

// TestEstimateSpendsTheDayBurst: a day limit paced with a burst lets the
// calls ahead spend what the burst holds at once, so a call waiting on a
// full minute is told the minute's wait, not the calls ahead at the day's
// even pace (200,000 tokens a day: 0.43 s a token, 40 minutes for the
// ~5,600 tokens ahead here, which a run then slept while the key idled).
func TestEstimateSpendsTheDayBurst(t *testing.T) {
	t.Parallel()
	now := t0
	g := mustNew(t, Config{Limits: Limits{OTPM: 4000, TPD: 200000}, DayBurst: 24 * time.Hour,
		Now: func() time.Time { return now }})
	// Calls answered at once, as the provider accepts them: each puts the
	// pacer's start credit in hand (see startPacers).
	settled := map[*Reservation]bool{}
	settle := func(rs ...*Reservation) {
		for _, r := range rs {
			if r.Admitted() && !settled[r] {
				r.Settle(now, r.Cost())
				settled[r] = true
			}
		}
	}
	for range 3 {
		r := mustReserve(t, g, now, "analysis", Cost{Requests: 1, Input: 100, Output: 100})
		g.Advance(now)
		settle(r)
	}
	first := mustReserve(t, g, now, "analysis", Cost{Requests: 1, Input: 2000, Output: 3600})
	g.Advance(now)
	if !first.Admitted() {
		t.Fatal("the first call was not admitted on an empty key")
	}
	settle(first)
	var all []*Reservation
	for range 4 {
		all = append(all, mustReserve(t, g, now, "analysis", Cost{Requests: 1, Input: 550, Output: 720}))
	}
	for range 3 {
		all = append(all, mustReserve(t, g, now, "summary", Cost{Requests: 1, Input: 180, Output: 260}))
	}
	last := all[len(all)-1]
	g.Advance(now)
	told := estimateThenRun(t, g, last, &now, func() { settle(all...) })
	admitted := last.AdmittedAt().Sub(t0)
	if admitted > 3*time.Minute {
		t.Fatalf("the last call was admitted at %v: the minute limit alone should let it go within three minutes", admitted)
	}
	if told > admitted+time.Second {
		t.Errorf("estimated wait %v, the call was admitted after %v: want within a second of it", told, admitted)
	}
}

// estimateThenRun has waiting r's caller give up at once, keeping its place
// (as a gateway's caller with a short max wait does), and returns the wait
// it was told; r then takes its place back, and the key runs on its virtual
// clock *now until r is admitted, calling step after each wake.
func estimateThenRun(t *testing.T, g *Governor, r *Reservation, now *time.Time, step func()) time.Duration {
	t.Helper()
	we, ok := errors.AsType[*WaitError](g.Await(doneCtx(), r, time.Minute))
	if !ok {
		t.Fatal("Await of a waiting call with a done context: want a *WaitError")
	}
	if !r.Rejoin(*now) {
		t.Fatal("the call could not take its place back")
	}
	for !r.Admitted() {
		next := g.Advance(*now)
		if next.IsZero() {
			t.Fatal("nothing left to wake for, and the call is not admitted")
		}
		*now = next
		g.Advance(*now)
		step()
	}
	return we.EstimatedWait
}
