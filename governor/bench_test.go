package governor

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// benchFlows is the number of flows the decision benchmarks spread calls over.
const benchFlows = 1000

// allLimits is a limit set with all six limits, large enough that every
// call is admitted at once: the benchmark measures the decision, not waiting.
var allLimits = Limits{RPM: 1e9, RPD: 1e12, TPM: 1e12, TPD: 1e15, ITPM: 1e12, OTPM: 1e12}

func benchGovernor(b *testing.B) (*Governor, []string) {
	names := make([]string, benchFlows)
	cfg := Config{Limits: allLimits}
	for i := range names {
		names[i] = fmt.Sprintf("flow-%04d", i)
		cfg.Flows = append(cfg.Flows, FlowConfig{Name: names[i], Weight: float64(1 + i%3), Priority: i % 2})
	}
	g, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return g, names
}

// benchmarkGovernorDecision is one admission decision: reserve a call of a
// flow against all six limits and admit it.
//
// Calls come one a second, and a day of them runs before the timer starts:
// the windows are measured full, in their steady state, where they reuse
// their memory (growing them is a cost of the first day only).
func benchmarkGovernorDecision(b *testing.B) {
	g, names := benchGovernor(b)
	c := Cost{Requests: 1, Input: 800, Output: 300}
	now := t0
	decide := func(i int) {
		now = now.Add(benchStep)
		r, err := g.Reserve(now, names[i%benchFlows], c)
		if err != nil {
			b.Fatal(err)
		}
		g.Advance(now)
		if !r.Admitted() {
			b.Fatal("not admitted")
		}
	}
	for i := range warmup {
		decide(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		decide(i)
	}
}

const (
	benchStep = time.Second
	warmup    = int(24*time.Hour/benchStep) + 120
)

// benchmarkRateReserveN is x/time/rate's decision: ReserveN on one limiter
// per flow, with an explicit time.
func benchmarkRateReserveN(b *testing.B) {
	ls := make([]*rate.Limiter, benchFlows)
	for i := range ls {
		ls[i] = rate.NewLimiter(rate.Limit(1e9), 1e9)
	}
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(benchStep)
		r := ls[i%benchFlows].ReserveN(now, 1100)
		if !r.OK() {
			b.Fatal("not ok")
		}
	}
}

func BenchmarkDecision(b *testing.B) {
	b.Run("sluice-governor", benchmarkGovernorDecision)
	b.Run("x-time-rate", benchmarkRateReserveN)
}

// BenchmarkIdleFlow reports the heap a governor keeps per flow that was
// used once and is now idle (target ≤ 1 KiB).
func BenchmarkIdleFlow(b *testing.B) {
	var bytes float64
	for i := 0; i < b.N; i++ {
		bytes = idleFlowBytes()
	}
	b.ReportMetric(bytes, "B/idle-flow")
}

// idleFlowBytes measures the heap a governor holds per flow that has been
// used once and is now idle.
func idleFlowBytes() float64 {
	const n = 10000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g, _ := New(Config{Limits: Limits{TPM: 1e12}, DayBurst: -1})
	now := t0
	for _, name := range names {
		r, _ := g.Reserve(now, name, Cost{Requests: 1, Input: 10})
		g.Advance(now)
		r.Settle(now, Cost{Input: 10})
	}
	// Let the minute window forget every charge: what is left is the flows.
	g.Advance(now.Add(2 * time.Minute))
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(g)
	return float64(after.HeapAlloc-before.HeapAlloc) / n
}
