package governor

import (
	"fmt"
	"testing"
	"time"
)

// backloggedKey is a key with n flows, each with a call waiting, where one
// call's charge ages out of the minute window at every step and one call
// is admitted: a decision among n waiting flows. A quarter of the flows are
// of priority 1, a quarter of −1; weights go from 1 to 4; calls are of one
// request and 200 to 2,000 tokens. The flow whose call was admitted queues
// its next one, so every flow stays backlogged.
type backloggedKey struct {
	g        *Governor
	names    []string
	costs    []Cost
	byName   map[string]int
	admitted []int // flows whose calls were admitted since the last step
	now      time.Time
	step     time.Duration
}

// backloggedRPM is the key's requests per minute: one charge ages out of
// the window each step of a minute ÷ backloggedRPM.
const backloggedRPM = 1000

func newBackloggedKey(tb testing.TB, n int) *backloggedKey {
	k := &backloggedKey{byName: map[string]int{}, now: t0, step: time.Minute / backloggedRPM}
	cfg := Config{Limits: Limits{RPM: backloggedRPM, TPM: 1e12}, DayBurst: -1, Journal: func(c Charge) {
		if c.Cost != (Cost{}) {
			k.admitted = append(k.admitted, k.byName[c.Flow])
		}
	}}
	for i := range n {
		name := fmt.Sprintf("flow-%05d", i)
		k.names = append(k.names, name)
		k.byName[name] = i
		k.costs = append(k.costs, Cost{Requests: 1, Input: int64(100 + 300*(i%6)), Output: 100})
		cfg.Flows = append(cfg.Flows, FlowConfig{Name: name, Weight: float64(1 + i%4), Priority: []int{0, 1, 0, -1}[i%4]})
	}
	g, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	k.g = g
	// Fill the window, then put a call of every flow in line.
	for i := range backloggedRPM {
		k.reserve(tb, i%n)
		k.g.Advance(k.now)
		k.now = k.now.Add(k.step)
	}
	k.admitted = k.admitted[:0]
	for i := range n {
		k.reserve(tb, i)
	}
	return k
}

func (k *backloggedKey) reserve(tb testing.TB, i int) {
	if _, err := k.g.Reserve(k.now, k.names[i], k.costs[i]); err != nil {
		tb.Fatal(err)
	}
}

// decide moves the clock a step on, admits what fits, and puts the next
// call of each flow that had one admitted in line.
func (k *backloggedKey) decide(tb testing.TB) {
	k.now = k.now.Add(k.step)
	k.g.Advance(k.now)
	for _, i := range k.admitted {
		k.reserve(tb, i)
	}
	k.admitted = k.admitted[:0]
}

// BenchmarkDecisionFlows is a decision on a backlogged key of 10 to 10,000
// flows: the fair pick, the promotion and priority checks, one admission
// and the next call in line. Its cost must grow with the logarithm of the
// flows, not with them (docs/benchmarks.md).
func BenchmarkDecisionFlows(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			k := newBackloggedKey(b, n)
			// A day of decisions before the timer starts: promotion, credit
			// and the fair order in their steady state.
			for range 24 * 60 * backloggedRPM / 10 {
				k.decide(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				k.decide(b)
			}
		})
	}
}

// BenchmarkEstimateFlows is the wait estimate of a new call on the same
// keys: what the gateway asks for the headers of every answer.
func BenchmarkEstimateFlows(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			k := newBackloggedKey(b, n)
			for range 60 * backloggedRPM {
				k.decide(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k.g.EstimateFor(k.now, k.names[i%n], k.costs[i%n])
			}
		})
	}
}
