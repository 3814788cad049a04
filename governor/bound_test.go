package governor

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// A reservation with a huge output once wrapped the tpm sum negative, after
// which the limit admitted anything: it must be refused, and the limit hold.
func TestHugeCostDoesNotSwitchTheLimitOff(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 600, TPM: 1000}})
	now := at(0)
	huge := Cost{Requests: 1, Input: 10, Output: math.MaxInt64}
	if err := g.Check(huge); !errors.Is(err, errInvalidCost) {
		t.Fatalf("Check(huge) = %v, want errInvalidCost", err)
	}
	if r, err := g.Reserve(now, "evil", huge); !errors.Is(err, errInvalidCost) || r != nil {
		t.Fatalf("Reserve(huge) = %v, %v, want errInvalidCost", r, err)
	}
	g.Advance(now)
	var rs []*Reservation
	for range 100 {
		rs = append(rs, mustReserve(t, g, now, "victim", Cost{Requests: 1, Input: 300, Output: 300}))
	}
	g.Advance(now)
	admitted := 0
	for _, r := range rs {
		if r.Admitted() {
			admitted++
		}
	}
	if admitted != 1 {
		t.Fatalf("%d calls of 600 tokens admitted at once under tpm=1000, want 1", admitted)
	}
	if st := g.Stats(now).Limits[TPM]; st.Used != 600 {
		t.Fatalf("tpm used %d, want 600", st.Used)
	}
}

func TestInvalidCostErrorNamesThePart(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Key: "groq/qwen3", Limits: Limits{TPM: 1000}})
	tests := []struct {
		name string
		cost Cost
		want string
	}{
		{"output over the bound", Cost{Requests: 1, Output: math.MaxInt64},
			"governor groq/qwen3: invalid cost: Output 9223372036854775807 is over the bound of 1099511627776 (governor.MaxCost)"},
		{"output wrapped negative", Cost{Requests: 1, Output: math.MinInt64},
			"governor groq/qwen3: invalid cost: Output -9223372036854775808 is negative"},
		{"negative input", Cost{Requests: 1, Input: -1}, "invalid cost: Input -1 is negative"},
		{"requests over the bound", Cost{Requests: MaxCost + 1}, "invalid cost: Requests 1099511627777 is over the bound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for name, err := range map[string]error{
				"Check":   g.Check(tt.cost),
				"Reserve": func() error { _, err := g.Reserve(at(0), "f", tt.cost); return err }(),
				"Wait":    func() error { _, err := g.Wait(context.Background(), "f", tt.cost); return err }(),
			} {
				if !errors.Is(err, errInvalidCost) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: error = %v, want errInvalidCost saying %q", name, err, tt.want)
				}
				if err != nil && strings.ContainsAny(err.Error(), "{}") {
					t.Errorf("%s: error shows internals: %v", name, err)
				}
			}
		})
	}
	// The bound itself is a valid cost; it is too large for this key.
	var tl *TooLargeError
	if err := g.Check(Cost{Requests: 1, Output: MaxCost}); !errors.As(err, &tl) {
		t.Errorf("Check(MaxCost) = %v, want *TooLargeError", err)
	}
}

func TestSaturatingArithmetic(t *testing.T) {
	t.Parallel()
	const maxI, minI = math.MaxInt64, math.MinInt64
	tests := []struct {
		op      string
		a, b    int64
		f       func(a, b int64) int64
		want    int64
		comment string
	}{
		{"add", 1, 2, addSat, 3, "in range"},
		{"add", maxI, 1, addSat, maxI, "up"},
		{"add", maxI, maxI, addSat, maxI, "up, both large"},
		{"add", minI, -1, addSat, minI, "down"},
		{"add", maxI, minI, addSat, -1, "mixed signs never overflow"},
		{"add", -5, 0, addSat, -5, "zero"},
		{"sub", 5, 7, subSat, -2, "in range"},
		{"sub", minI, 1, subSat, minI, "down"},
		{"sub", 0, minI, subSat, maxI, "negating MinInt64"},
		{"sub", -1, minI, subSat, maxI, "just fits"},
		{"sub", maxI, -1, subSat, maxI, "up"},
		{"sub", -2, minI, subSat, maxI - 1, "in range near the bound"},
		{"mul", 3, -4, mulSat, -12, "in range"},
		{"mul", 1 << 62, 2, mulSat, maxI, "up"},
		{"mul", 1 << 62, -4, mulSat, minI, "down"},
		{"mul", -1, minI, mulSat, maxI, "-1 × MinInt64"},
		{"mul", minI, -1, mulSat, maxI, "MinInt64 × -1"},
		{"mul", minI, 1, mulSat, minI, "identity at the bound"},
		{"mul", 0, minI, mulSat, 0, "zero"},
		{"mul", MaxCost, 128, mulSat, MaxCost * 128, "max_tokens × n"},
	}
	for _, tt := range tests {
		if got := tt.f(tt.a, tt.b); got != tt.want {
			t.Errorf("%s(%d, %d) = %d, want %d (%s)", tt.op, tt.a, tt.b, got, tt.want, tt.comment)
		}
	}
	for _, tt := range []struct {
		f    float64
		want int64
	}{{1.5, 1}, {-1.5, -1}, {math.NaN(), 0}, {math.Inf(1), maxI}, {math.Inf(-1), minI}, {1e19, maxI}, {-1e19, minI}} {
		if got := nanos(tt.f); got != tt.want {
			t.Errorf("nanos(%v) = %d, want %d", tt.f, got, tt.want)
		}
	}
	c := Cost{Requests: 1, Input: maxI, Output: maxI}
	if c.On(TPM) != maxI || c.On(TPD) != maxI || c.Tokens() != maxI {
		t.Errorf("input + output wrapped: On(TPM) %d, Tokens %d", c.On(TPM), c.Tokens())
	}
	if got := (Cost{Input: minI, Output: -1}).Tokens(); got != minI {
		t.Errorf("Tokens wrapped up: %d", got)
	}
	if got := (Cost{Requests: 1, Input: 2, Output: 3}).times(1 << 62); got != (Cost{Requests: 1 << 62, Input: maxI, Output: maxI}) {
		t.Errorf("times = %+v", got)
	}
	if got := (Cost{Output: maxI}).add(Cost{Output: 1}).sub(Cost{Output: maxI}); got.Output != 0 {
		t.Errorf("saturated add then sub = %d, want 0 (held at the bound)", got.Output)
	}
}

// A saturated ledger sum is recounted when a charge leaves it, so what is
// left is counted exactly.
func TestLedgerRecountsASaturatedSum(t *testing.T) {
	t.Parallel()
	lg := newLedger(time.Minute, 0, 0, false)
	lg.add(0, Cost{Output: math.MaxInt64 - 5})
	lg.add(int64(30*time.Second), Cost{Output: 100})
	if lg.sum.Output != math.MaxInt64 {
		t.Fatalf("sum %d, want saturated", lg.sum.Output)
	}
	lg.expire(int64(61 * time.Second))
	if lg.sum.Output != 100 {
		t.Fatalf("after the first charge aged out the sum is %d, want 100", lg.sum.Output)
	}
}

func TestPriorityAndWeightBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fc   FlowConfig
		want string // "" when accepted
	}{
		{"lowest priority", FlowConfig{Name: "a", Priority: MinPriority}, ""},
		{"highest priority", FlowConfig{Name: "a", Priority: MaxPriority}, ""},
		{"priority 1000", FlowConfig{Name: "hog", Priority: 1000}, `flow "hog": priority must be between -3 and 3, got 1000`},
		{"priority -4", FlowConfig{Name: "low", Priority: -4}, `flow "low": priority must be between -3 and 3, got -4`},
		{"weight at the bounds", FlowConfig{Name: "a", Weight: MaxWeight}, ""},
		{"smallest weight", FlowConfig{Name: "a", Weight: MinWeight}, ""},
		{"weight too large", FlowConfig{Name: "w", Weight: 1e7}, `flow "w": weight must be positive, between 1e-06 and 1e+06, got 1e+07`},
		{"weight too small", FlowConfig{Name: "w", Weight: 1e-300}, `flow "w": weight must be positive`},
		{"weight NaN", FlowConfig{Name: "w", Weight: math.NaN()}, "got NaN"},
		{"weight +Inf", FlowConfig{Name: "w", Weight: math.Inf(1)}, "got +Inf"},
		{"weight negative", FlowConfig{Name: "w", Weight: -1}, "got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(Config{Flows: []FlowConfig{tt.fc}})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New() = %v, want it accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	for _, cfg := range []Config{{PriorityFactor: 17}, {PriorityFactor: math.Inf(1)}, {PriorityFactor: math.NaN()},
		{Lag: time.Hour}, {Lag: -1}, {DayBurst: 48 * time.Hour}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// At the widest priority gap the least urgent flow still gets calls in
// while the most urgent one is backlogged, and at the largest factor the
// shares stay finite.
func TestLowestPriorityStillMoves(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 50},
		Flows: []FlowConfig{{Name: "urgent", Priority: MaxPriority}, {Name: "bulk", Priority: MinPriority}}})
	count := map[string]int{}
	// 4^6 = 4096: in 12,000 calls the bulk flow gets about three.
	backlog(t, g, 240*time.Minute, map[string]Cost{"urgent": {Requests: 1}, "bulk": {Requests: 1}}, func(r *Reservation) {
		count[r.Flow()]++
	})
	if count["bulk"] < 2 || count["bulk"] > 4 {
		t.Fatalf("bulk got %d calls of %d, want about 3", count["bulk"], count["urgent"]+count["bulk"])
	}

	g = mustNew(t, Config{PriorityFactor: maxPriorityFactor, Flows: []FlowConfig{
		{Name: "top", Priority: MaxPriority, Weight: MaxWeight}, {Name: "bottom", Priority: MinPriority, Weight: MinWeight}}})
	top, bottom := g.flows["top"].share, g.flows["bottom"].share
	if math.IsInf(top, 0) || bottom <= 0 || math.IsInf(MaxCost*float64(24*time.Hour/time.Second)/bottom, 0) {
		t.Fatalf("shares %g and %g: a fair-queuing tag would be infinite", top, bottom)
	}
}

func TestLargestBatchRefusesInvalidCosts(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 10}}) // no token limit: only MaxCost bounds tokens
	tests := []struct {
		name       string
		base, item Cost
		n, want    int
	}{
		{"valid", Cost{Requests: 1}, Cost{Output: 100}, 50, 50},
		{"negative item", Cost{Requests: 1}, Cost{Output: -100}, 50, 0},
		{"negative base", Cost{Requests: 1, Input: math.MinInt64}, Cost{Output: 100}, 50, 0},
		{"base over MaxCost", Cost{Requests: 1, Input: MaxCost + 1}, Cost{Output: 1}, 50, 0},
		{"batch over MaxCost", Cost{Requests: 1}, Cost{Output: MaxCost / 4}, 50, 4},
		{"no items", Cost{Requests: 1}, Cost{Output: 1}, -3, 0},
	}
	for _, tt := range tests {
		if got := g.LargestBatch(tt.base, tt.item, tt.n); got != tt.want {
			t.Errorf("%s: LargestBatch = %d, want %d", tt.name, got, tt.want)
		}
		if got := g.BatchSize(at(0), "f", tt.base, tt.item, tt.n, time.Hour); got != tt.want {
			t.Errorf("%s: BatchSize = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// Usage comes from the provider: a negative output cannot lower a charge
// below nothing, and a huge input is held at MaxCost.
func TestSettleBoundsUsage(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}, SettleOutput: true})
	r := mustReserve(t, g, at(0), "f", Cost{Requests: 1, Input: 100, Output: 500})
	g.Advance(at(0))
	r.Settle(at(time.Second), Cost{Input: 50, Output: math.MinInt64})
	if got := r.Cost(); got != (Cost{Requests: 1, Input: 50, Output: 0}) {
		t.Fatalf("after a negative output the charge is %+v", got)
	}
	if used := g.Stats(at(time.Second)).Limits[TPM].Used; used != 50 {
		t.Fatalf("tpm used %d, want 50", used)
	}
	r2 := mustReserve(t, g, at(time.Second), "f", Cost{Requests: 1, Input: 100, Output: 100})
	g.Advance(at(time.Second))
	r2.Settle(at(2*time.Second), Cost{Input: math.MaxInt64, Output: 10})
	if got := r2.Cost(); got.Input != MaxCost {
		t.Fatalf("input settled to %d, want MaxCost", got.Input)
	}
	if used := g.Stats(at(2 * time.Second)).Limits[TPM].Used; used != 50+MaxCost+10 {
		t.Fatalf("tpm used %d after settling, want %d", used, 50+MaxCost+10)
	}
}

// Numbers from the provider's headers and retry times cannot wrap time or
// room into admitting, nor hold a limit past its period plus lag.
func TestFeedbackSaturates(t *testing.T) {
	t.Parallel()
	const lag = 2 * time.Second
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}, Lag: lag, Logger: quiet})
	in(g).Rejected(at(0), TPM, time.Duration(math.MaxInt64))
	r := mustReserve(t, g, at(0), "f", Cost{Requests: 1, Input: 10})
	if next := g.Advance(at(0)); r.Admitted() || !next.Equal(at(time.Minute+lag)) {
		t.Fatalf("after a rejection asking to wait forever: admitted %v, next %v, want held until a minute plus lag", r.Admitted(), next.Sub(t0))
	}
	if g.Advance(at(time.Minute + lag)); !r.Admitted() {
		t.Fatal("still held after a minute plus lag")
	}
	g2 := mustNew(t, Config{Limits: Limits{TPM: math.MaxInt64}, Logger: quiet})
	var s Snapshot
	s[TPM] = Observed{Known: true, Limit: math.MaxInt64, Remaining: math.MinInt64, Reset: time.Duration(math.MaxInt64)}
	g2.Observe(at(0), s)
	g2.Observe(at(0), s)
	st := g2.Stats(at(0)).Limits[TPM]
	if st.Used < 0 || st.Capacity < 0 {
		t.Fatalf("stats wrapped: %+v", st)
	}
	r2 := mustReserve(t, g2, at(0), "f", Cost{Requests: 1, Input: 10})
	if next := g2.Advance(at(0)); r2.Admitted() || !next.Equal(at(time.Minute)) {
		t.Fatalf("while the provider said nothing is left until far in the future: admitted %v, next %v, want held a minute", r2.Admitted(), next.Sub(t0))
	}
	if w := g2.EstimateWait(at(0), r2); w <= 0 || w > time.Minute {
		t.Fatalf("EstimateWait = %v, want within the minute", w)
	}
	if g2.Advance(at(time.Minute)); !r2.Admitted() {
		t.Fatal("still held after the minute")
	}
}

func TestRestoreSkipsInvalidCharges(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPD: 10000}, DayBurst: -1})
	g.Restore(at(time.Hour), []Charge{
		{ID: 1, At: at(time.Minute), Cost: Cost{Requests: 1, Input: 100, Output: 100}},
		{ID: 2, At: at(2 * time.Minute), Cost: Cost{Requests: 1, Output: math.MinInt64}},
		{ID: 3, At: at(3 * time.Minute), Cost: Cost{Requests: 1, Output: math.MaxInt64}},
	})
	if used := g.Stats(at(time.Hour)).Limits[TPD].Used; used != 200 {
		t.Fatalf("tpd used %d after restore, want 200", used)
	}
}
