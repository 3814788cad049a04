package governor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
)

// TestPropertyExactProvider drives the governor against the provider model
// (internal/sim) with the same limits, window and accounting, over random
// limit sets and flows, and checks two properties:
//
//  1. With an exact view of the provider, the governor never admits a call
//     the provider rejects.
//  2. Every backlogged flow is admitted again within a bound derived from its
//     share: the sizes of one call of every flow, divided by the flow's share
//     of the weights, plus one period of the longest limit and the latency.
func TestPropertyExactProvider(t *testing.T) {
	t.Parallel()
	for seed := range uint64(80) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runProperty(t, seed)
		})
	}
}

type propFlow struct {
	name     string
	weight   float64
	priority int
	costs    []governor.Cost
	queued   []*governor.Reservation
	lastAdm  time.Time
	maxGap   time.Duration
	maxSize  float64
	admitted int
	served   float64 // total size admitted
}

func runProperty(t *testing.T, seed uint64) {
	// Seeds from 40 on are those of 0 to 39 drawn as the limits were once
	// drawn, for the budgets too (none is set): other scenarios of the same
	// kinds. Seed 72 is RPM 44 and OTPM 46,041 with two flows, one of two
	// thirds of the share: a minute's requests come back at once.
	drawn := governor.OTPM + 1 // a provider's limits; budgets are sluice's
	if seed >= 40 {
		seed -= 40
		drawn = governor.NumLimits
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	var limits governor.Limits
	for l := range drawn {
		if rng.IntN(2) == 0 {
			continue
		}
		switch l {
		case governor.RPM:
			limits[l] = int64(5 + rng.IntN(200))
		case governor.RPD:
			limits[l] = int64(2000 + rng.IntN(20000))
		case governor.TPM, governor.ITPM, governor.OTPM:
			limits[l] = int64(4000 + rng.IntN(60000))
		case governor.TPD:
			limits[l] = int64(500000 + rng.IntN(5000000))
		}
	}
	if limits == (governor.Limits{}) {
		limits[governor.TPM] = 10000
	}
	fixed := rng.IntN(3) == 0
	settle := rng.IntN(3) == 0
	latency := time.Duration(rng.IntN(3000)) * time.Millisecond
	prov, err := forecast.NewModel(forecast.ModelConfig{FixedWindows: fixed, SettleOutput: settle, Limits: limits, Latency: latency, Seed: int64(seed)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := governor.Config{Limits: limits, FixedWindows: fixed, SettleOutput: settle}
	var flows []*propFlow
	for i := range 1 + rng.IntN(5) {
		f := &propFlow{name: fmt.Sprintf("f%d", i), weight: float64(1 + rng.IntN(4)), priority: rng.IntN(2)}
		for range 8 {
			c := governor.Cost{Requests: 1, Input: int64(10 + rng.IntN(3000)), Output: int64(10 + rng.IntN(1500))}
			f.costs = append(f.costs, c)
		}
		flows = append(flows, f)
		cfg.Flows = append(cfg.Flows, governor.FlowConfig{Name: f.name, Weight: f.weight, Priority: f.priority})
	}
	g, err := governor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Keep only costs that can ever fit; the rest are refused up front.
	for _, f := range flows {
		var ok []governor.Cost
		for _, c := range f.costs {
			if err := g.Check(c); err == nil {
				ok = append(ok, c)
				f.maxSize = math.Max(f.maxSize, size(limits, c))
			}
		}
		f.costs = ok
	}
	depth := queueDepth(limits, flows)

	type completion struct {
		at   time.Time
		r    *governor.Reservation
		resp forecast.Response
		out  int64
	}
	var inflight []completion
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	now := start
	end := start.Add(6 * time.Hour)
	if limits[governor.RPD] > 0 || limits[governor.TPD] > 0 {
		end = start.Add(50 * time.Hour)
	}
	for _, f := range flows {
		f.lastAdm = start
	}
	for now.Before(end) {
		var next time.Time
		// Every flow keeps calls waiting: refill as soon as any is admitted,
		// at the same instant, until nothing more is admitted now.
		for more := true; more; {
			more = false
			for _, f := range flows {
				for len(f.costs) > 0 && len(f.queued) < depth {
					r, err := g.Reserve(now, f.name, f.costs[rng.IntN(len(f.costs))])
					if err != nil {
						t.Fatal(err)
					}
					f.queued = append(f.queued, r)
				}
			}
			next = g.Advance(now)
			for _, f := range flows {
				for len(f.queued) > 0 && f.queued[0].Admitted() {
					more = true
					r := f.queued[0]
					f.queued = f.queued[1:]
					c := r.Cost()
					out := int64(float64(c.Output) * (0.3 + 0.7*rng.Float64()))
					resp := prov.Submit(now, forecast.Request{Flow: f.name, Input: c.Input, MaxTokens: c.Output, Output: out})
					if resp.Status != 200 {
						t.Fatalf("limits %v %v/%v: the governor admitted %+v for %s at %v but the provider answered %d naming %s",
							limits, govtext.WindowWord(fixed), govtext.AccountingWord(settle), c, f.name, now.Sub(start), resp.Status, resp.Limit)
					}
					f.maxGap = max(f.maxGap, now.Sub(f.lastAdm))
					f.lastAdm = now
					f.admitted++
					f.served += size(limits, c)
					inflight = append(inflight, completion{at: now.Add(resp.Latency), r: r, resp: resp, out: resp.Output})
				}
			}
		}
		sort.Slice(inflight, func(i, j int) bool { return inflight[i].at.Before(inflight[j].at) })
		for len(inflight) > 0 && !inflight[0].at.After(now) {
			c := inflight[0]
			inflight = inflight[1:]
			prov.Finish(now, c.resp)
			c.r.Settle(now, governor.Cost{Input: c.r.Cost().Input, Output: c.out})
		}
		step := end
		if !next.IsZero() {
			step = next
		}
		if len(inflight) > 0 && inflight[0].at.Before(step) {
			step = inflight[0].at
		}
		if !step.After(now) {
			step = now.Add(time.Millisecond)
		}
		now = step
	}

	var shares, sizes float64
	for _, f := range flows {
		shares += f.weight * math.Pow(4, float64(f.priority))
		sizes += f.maxSize
	}
	var longest time.Duration
	for l := range governor.NumLimits {
		if limits[l] > 0 {
			longest = max(longest, l.Period())
		}
	}
	for _, f := range flows {
		if len(f.costs) == 0 {
			continue
		}
		share := f.weight * math.Pow(4, float64(f.priority)) / shares
		bound := time.Duration((sizes/share)*float64(time.Second)) + longest + 2*latency + time.Second
		if f.maxGap > bound {
			t.Errorf("limits %v %v/%v: flow %s (share %.2f) waited %v between admissions, bound %v",
				limits, govtext.WindowWord(fixed), govtext.AccountingWord(settle), f.name, share, f.maxGap, bound)
		}
		if f.admitted == 0 {
			t.Errorf("flow %s never admitted", f.name)
		}
	}
	// 3. Every flow is always backlogged here, so each is served in
	// proportion to its share (weighted fair queuing on the dominant share).
	var per []float64
	var live []*propFlow
	for _, f := range flows {
		if len(f.costs) > 0 {
			per = append(per, f.served/(f.weight*math.Pow(4, float64(f.priority))))
			live = append(live, f)
		}
	}
	var mean float64
	for _, p := range per {
		mean += p / float64(len(per))
	}
	for i, p := range per {
		if math.Abs(p-mean)/mean > 0.15 {
			f := live[i]
			t.Errorf("limits %v %v/%v: flow %s (weight %v, priority %d, %d calls, max size %.1f s) got %.0f s of capacity per unit of share, the mean is %.0f (want within 15%%)",
				limits, govtext.WindowWord(fixed), govtext.AccountingWord(settle), f.name, f.weight, f.priority, f.admitted, f.maxSize, p, mean)
		}
	}
}

// size is a call's dominant share in seconds of a limit's capacity, as the
// governor measures it.
func size(limits governor.Limits, c governor.Cost) float64 {
	var s float64
	for l := range governor.NumLimits {
		if limits[l] > 0 {
			s = math.Max(s, float64(c.On(l))*l.Period().Seconds()/float64(limits[l]))
		}
	}
	return s
}

// queueDepth is how many calls each flow keeps waiting: more than the
// most calls that fit an empty window of every limit, so that a window's
// whole allowance coming back at once (a fixed window's boundary, or a
// rolling window's charges of one instant ageing out together) does not
// empty a flow's line, and every flow is backlogged throughout. With
// fewer, a flow whose share of such a burst is larger than its line takes
// only its line, the others take the rest, and the next burst comes back
// the same: on RPM 44 with 24 calls waiting, a flow of two thirds of the
// share got 24 calls a minute and the other 20.
func queueDepth(limits governor.Limits, flows []*propFlow) int {
	depth := math.MaxInt
	for l := range governor.NumLimits {
		if limits[l] == 0 {
			continue
		}
		least := int64(math.MaxInt64)
		for _, f := range flows {
			for _, c := range f.costs {
				least = min(least, c.On(l))
			}
		}
		if least > 0 && least < math.MaxInt64 {
			depth = min(depth, int(limits[l]/least))
		}
	}
	if depth == math.MaxInt {
		return 24
	}
	return max(24, depth+1)
}
