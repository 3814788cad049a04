package governor

import (
	"log/slog"
	"testing"
	"time"
)

// A call settled far above its admission charge — here at MaxCost, by a
// caller that settles by hand with what a provider reported — moves the
// day pacers of the key's tokens, of its budget and of its flow's budget
// on by at most a day and the lag past now: the next call waits no longer
// than a day limit may ever hold it. Before, the pacers' theoretical
// arrival times moved on by the whole charge (235 years for TPD here) and
// every flow waited for them.
func TestSettleAboveTheChargeMovesPacersAtMostAPeriod(t *testing.T) {
	t.Parallel()
	const lag = time.Second
	g := mustNew(t, Config{
		Key:    "k",
		Limits: Budget{Day: 5}.Limits(Limits{RPM: 600, TPM: 100_000, TPD: 10_000_000}),
		Price:  Price{Input: 1, Output: 1},
		Flows:  []FlowConfig{{Name: "a", Budget: Budget{Day: 4}}},
		Lag:    lag,
		Logger: slog.New(slog.DiscardHandler),
	})
	c := Cost{Requests: 1, Input: 13, Output: 10}
	r := mustReserve(t, g, t0, "a", c)
	g.Advance(t0)
	if !r.Admitted() {
		t.Fatal("the first call of an idle key was not admitted")
	}
	now := at(time.Second)
	r.Settle(now, Cost{Input: MaxCost, Output: 5})

	day := int64(24*time.Hour + lag)
	g.mu.Lock()
	for _, l := range [...]Limit{TPD, MPD} {
		if p := &g.pace[l]; !p.on || p.tat > now.UnixNano()+day {
			t.Errorf("%v pacer (on %v) is %v past now, want at most a day and the lag", l, p.on, time.Duration(p.tat-now.UnixNano()))
		}
	}
	if p := &g.flows["a"].budget.pace[0]; !p.on || p.tat > now.UnixNano()+day {
		t.Errorf("the flow's mpd pacer (on %v) is %v past now, want at most a day and the lag", p.on, time.Duration(p.tat-now.UnixNano()))
	}
	g.mu.Unlock()

	if w := g.EstimateFor(now, "a", c); w > 24*time.Hour+lag {
		t.Errorf("the next call is told to wait %v, want at most a day and the lag", w)
	}
	next := mustReserve(t, g, now, "a", c)
	if b := g.Blocker(now, next); b.Until.Sub(now) > 24*time.Hour+lag {
		t.Errorf("the next call waits on %s until %v from now, want at most a day and the lag", b, b.Until.Sub(now))
	}
}
