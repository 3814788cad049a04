package forecast

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/llm"
)

// t0 is a whole minute (and whole day) of the Unix clock, so fixed windows
// start there.
var t0 = time.Date(2026, 10, 18, 0, 0, 0, 0, time.UTC)

func newModel(t testing.TB, cfg ModelConfig) *Model {
	t.Helper()
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func limits(s string) governor.Limits {
	ls, err := govtext.Limits(s)
	if err != nil {
		panic(err)
	}
	return ls
}

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestNewModelValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  ModelConfig
		want string
	}{
		{"profile", ModelConfig{Profile: "mistral"}, "provider.profile"},
		{"latency", ModelConfig{Latency: -time.Second}, "provider.latency"},
		{"default max", ModelConfig{DefaultMaxTokens: -1}, "provider.default_max_tokens"},
		{"fault", ModelConfig{Faults: Faults{Timeout: 2}}, "provider.faults.timeout"},
		{"fault sum", ModelConfig{Faults: Faults{Timeout: 0.6, Reset: 0.6}}, "provider.faults"},
		{"limit", ModelConfig{Limits: governor.Limits{governor.TPM: -1}}, "provider.limits.tpm"},
		{"limit too large", ModelConfig{Limits: governor.Limits{governor.TPD: math.MaxInt64}}, "provider.limits.tpd: 9223372036854775807 is more than the bound of 1,000,000,000,000"},
		{"latency too long", ModelConfig{Latency: math.MaxInt64}, "provider.latency"},
		{"max output", ModelConfig{MaxOutputTokens: MaxOutputTokensCap + 1}, "max output tokens: 1048577 is not between 1 and 1048576"},
		{"max output negative", ModelConfig{MaxOutputTokens: -1}, "max output tokens"},
		{"default above max output", ModelConfig{DefaultMaxTokens: 4096, MaxOutputTokens: 2048}, "default max tokens: 4096 is more than the model's max output tokens, 2048"},
		{"default above bound", ModelConfig{DefaultMaxTokens: 1 << 40}, "default max tokens"},
		{"default min above default", ModelConfig{DefaultMaxTokens: 1000, DefaultMaxTokensMin: 1001}, "default max tokens min: 1001 is not between 0 and the default max tokens, 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewModel(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewModel error = %v, want one naming %s", err, tc.want)
			}
		})
	}
	m := newModel(t, ModelConfig{})
	if c := m.Config(); c.Profile != "openai" || c.DefaultMaxTokens != 1000 || c.Model != "sim-model" || c.MaxOutputTokens != 32768 {
		t.Errorf("defaults = %+v", c)
	}
}

func TestEveryLimit(t *testing.T) {
	t.Parallel()
	// Each request: input 30, max 20. Each limit allows two of them and refuses the third.
	req := Request{Input: 30, MaxTokens: 20}
	for _, tc := range []struct {
		limits string
		want   governor.Limit
		retry  time.Duration
	}{
		{"rpm=2", governor.RPM, 60 * time.Second},
		{"rpd=2", governor.RPD, 24 * time.Hour},
		{"tpm=100", governor.TPM, 60 * time.Second},
		{"tpd=100", governor.TPD, 24 * time.Hour},
		{"itpm=60", governor.ITPM, 60 * time.Second},
		{"otpm=40", governor.OTPM, 60 * time.Second},
		// Several limits full at once: the first in the provider's order is named.
		{"otpm=40,itpm=60,tpd=100,rpm=2", governor.RPM, 60 * time.Second},
		{"otpm=40,tpd=100", governor.TPD, 24 * time.Hour},
	} {
		t.Run(tc.limits, func(t *testing.T) {
			t.Parallel()
			m := newModel(t, ModelConfig{Profile: "groq", Limits: limits(tc.limits)})
			for i := range 2 {
				if r := m.Submit(at(0), req); r.Status != 200 {
					t.Fatalf("request %d refused: %d on %s", i, r.Status, r.Limit)
				}
			}
			r := m.Submit(at(0), req)
			if !r.Rejected || r.TooLarge || r.Status != 429 || r.Limit != tc.want || r.RetryAfter != tc.retry {
				t.Fatalf("third = status %d rejected %v limit %s retry %s, want 429 %s %s", r.Status, r.Rejected, r.Limit, r.RetryAfter, tc.want, tc.retry)
			}
			st := m.Stats()
			if st.Rejected != 1 || st.RejectedByLimit[tc.want] != 1 || st.RejectedByStatus[429] != 1 || st.Succeeded != 2 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile llm.Profile
		limits  string
		req     Request
		limit   governor.Limit
		status  int
		retry   time.Duration
		body    string
	}{
		{"groq", "tpm=8000", Request{Input: 10387, MaxTokens: 1000}, governor.TPM, 413, 0,
			"on tokens per minute (TPM): Limit 8000, Requested 11387, please reduce your message size"},
		{"groq", "tpm=8000,otpm=1000", Request{Input: 200, MaxTokens: 1252}, governor.OTPM, 429, 900 * time.Second,
			"on output tokens per minute (OTPM): Limit 1000, Requested 1252. The request's expected output tokens exceed the enforced limit"},
		{"groq", "tpd=5000", Request{Input: 6000}, governor.TPD, 413, 0, "tokens per day (TPD): Limit 5000, Requested 7000"},
		{"groq", "itpm=500", Request{Input: 600}, governor.ITPM, 413, 0, "input tokens per minute (ITPM): Limit 500, Requested 600"},
		{"openai", "tpm=30000", Request{Input: 35000, MaxTokens: 1000}, governor.TPM, 429, 0,
			"Request too large for sim-model in organization org-sim on tokens per min (TPM): Limit 30000, Requested 36000. The input or output tokens must be reduced"},
		{"anthropic", "otpm=8000", Request{Input: 10, MaxTokens: 9000}, governor.OTPM, 413, 0,
			"needs 9,000 output tokens, more than your organization's rate limit of 8,000 output tokens per minute"},
	} {
		t.Run(string(tc.profile)+"/"+tc.limit.String(), func(t *testing.T) {
			t.Parallel()
			m := newModel(t, ModelConfig{Profile: tc.profile, Limits: limits(tc.limits), Wire: true})
			r := m.Submit(at(0), tc.req)
			if !r.Rejected || !r.TooLarge || r.Limit != tc.limit || r.Status != tc.status || r.RetryAfter != tc.retry || r.Charged != (governor.Cost{}) {
				t.Fatalf("response = status %d rejected %v toolarge %v limit %s retry %s charged %v", r.Status, r.Rejected, r.TooLarge, r.Limit, r.RetryAfter, r.Charged)
			}
			if !strings.Contains(string(r.Body), tc.body) {
				t.Errorf("body %s\ndoes not contain %q", r.Body, tc.body)
			}
			if got := r.Header.Get("Retry-After"); (tc.retry > 0) != (got != "") {
				t.Errorf("retry-after header %q with retry %s", got, tc.retry)
			}
			// It never fits, even with the limit untouched.
			if r := m.Submit(at(time.Hour), tc.req); !r.TooLarge {
				t.Error("too large request admitted later")
			}
			if st := m.Stats(); st.TooLarge != 2 || st.RejectedByStatus[tc.status] != 2 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestTooLargeBeatsFull(t *testing.T) {
	t.Parallel()
	// tpm is full but otpm can never fit: waiting for tpm would be wasted.
	m := newModel(t, ModelConfig{Profile: "groq", Limits: limits("tpm=1000,otpm=500")})
	m.Submit(at(0), Request{Input: 500, MaxTokens: 500})
	if r := m.Submit(at(time.Second), Request{MaxTokens: 600}); !r.TooLarge || r.Limit != governor.OTPM {
		t.Fatalf("limit %s toolarge %v, want otpm too large", r.Limit, r.TooLarge)
	}
}

func TestDefaultMaxTokens(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{DefaultMaxTokens: 1000, Limits: limits("otpm=1000")})
	r := m.Submit(at(0), Request{Input: 10, Output: 5000})
	if r.Charged != (governor.Cost{Requests: 1, Input: 10, Output: 1000}) || r.Output != 1000 {
		t.Fatalf("charged %v output %d, want the default max reserved and output capped at it", r.Charged, r.Output)
	}
	// DevPick's trap: one request without max_tokens fills the OTPM minute.
	if r := m.Submit(at(time.Second), Request{Input: 10, Output: 20}); r.Status != 429 || r.Limit != governor.OTPM {
		t.Fatalf("second: %d %s, want 429 otpm", r.Status, r.Limit)
	}
}

// A provider's guess of a request's output varies: with a minimum, the
// reservation of a request without max_tokens is drawn between it and the
// default, so some such requests fit OTPM and others are too large, as
// DevPick's did.
func TestDefaultMaxTokensVaries(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{DefaultMaxTokens: 2048, DefaultMaxTokensMin: 600, Limits: limits("otpm=1000")})
	seen := map[bool]int{}
	for i := range 400 {
		// A minute apart: each finds the OTPM minute empty.
		r := m.Submit(at(time.Duration(i)*time.Minute), Request{Input: 10, Output: 5000})
		if r.Status == 200 {
			if r.Charged.Output < 600 || r.Charged.Output > 1000 {
				t.Fatalf("admitted with %d output reserved, want 600 to 1000", r.Charged.Output)
			}
		} else if !r.TooLarge || r.Limit != governor.OTPM {
			t.Fatalf("refused %d %s (too large %v), want too large on otpm", r.Status, r.Limit, r.TooLarge)
		}
		seen[r.Status == 200]++
	}
	// 401 of the 1,449 values fit: about 28 %.
	if seen[true] < 70 || seen[true] > 160 {
		t.Fatalf("%d of 400 fit, want about 110", seen[true])
	}
	// A request that sets max_tokens is charged what it set.
	if r := m.Submit(at(time.Hour*24), Request{Input: 10, MaxTokens: 50, Output: 5000}); r.Charged.Output != 50 {
		t.Fatalf("charged %d output, want the 50 it set", r.Charged.Output)
	}
}

func TestSettleAndReserve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		settle   bool
		final    governor.Cost
		secondOK bool
	}{
		{false, governor.Cost{Requests: 1, Input: 10, Output: 80}, false},
		{true, governor.Cost{Requests: 1, Input: 10, Output: 20}, true},
	} {
		t.Run(govtext.AccountingWord(tc.settle), func(t *testing.T) {
			t.Parallel()
			m := newModel(t, ModelConfig{Profile: "anthropic", SettleOutput: tc.settle, Limits: limits("otpm=100,tpm=1000,tpd=100000")})
			r := m.Submit(at(0), Request{Input: 10, MaxTokens: 80, Output: 20})
			if r.Charged != (governor.Cost{Requests: 1, Input: 10, Output: 80}) {
				t.Fatalf("admission charge %v: settle charges max_tokens at the start too", r.Charged)
			}
			// While the response runs, both accountings hold the whole max.
			if r2 := m.Submit(at(time.Second), Request{MaxTokens: 30}); r2.Status != 429 {
				t.Fatalf("during the response: %d, want 429", r2.Status)
			}
			if got := m.Finish(at(2*time.Second), r); got != tc.final {
				t.Fatalf("Finish = %v, want %v", got, tc.final)
			}
			if again := m.Finish(at(3*time.Second), r); again != tc.final {
				t.Fatalf("second Finish = %v", again)
			}
			r3 := m.Submit(at(3*time.Second), Request{MaxTokens: 30})
			if got := r3.Status == 200; got != tc.secondOK {
				t.Fatalf("after Finish: %d, want ok=%v", r3.Status, tc.secondOK)
			}
			st := m.Stats()
			wantOut := tc.final.Output
			if tc.secondOK {
				wantOut += 30
			}
			if st.Charged.Output != wantOut || st.Charged.On(governor.TPD) != wantOut+st.Charged.Input {
				t.Errorf("charged %v, want output %d", st.Charged, wantOut)
			}
			// The settled charge still ages out one minute after admission.
			if r4 := m.Submit(at(60*time.Second), Request{MaxTokens: 70}); r4.Status != 200 {
				t.Errorf("a minute after admission: %d, want 200", r4.Status)
			}
		})
	}
}

func TestSettleAfterWindowTurned(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{SettleOutput: true, FixedWindows: true, Limits: limits("otpm=100")})
	r := m.Submit(at(59*time.Second), Request{MaxTokens: 100, Output: 10})
	if r2 := m.Submit(at(61*time.Second), Request{MaxTokens: 100}); r2.Status != 200 {
		t.Fatalf("new window: %d", r2.Status)
	}
	// Settling a charge of the previous window must not free room in this one.
	m.Finish(at(62*time.Second), r)
	if r3 := m.Submit(at(63*time.Second), Request{MaxTokens: 1}); r3.Status != 429 {
		t.Fatalf("after settling an old charge: %d, want 429", r3.Status)
	}
}

func TestRejectedFinishIsFree(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{SettleOutput: true, Limits: limits("rpm=1")})
	m.Submit(at(0), Request{})
	r := m.Submit(at(0), Request{})
	if got := m.Finish(at(0), r); got != (governor.Cost{}) {
		t.Fatalf("Finish of a rejection = %v", got)
	}
}

func TestDeterministicBySeed(t *testing.T) {
	t.Parallel()
	run := func(seed int64) []Response {
		m := newModel(t, ModelConfig{Seed: seed, Latency: 2 * time.Second, Limits: limits("tpm=5000"),
			Faults: Faults{Error5xx: 0.1, Timeout: 0.1, Reset: 0.1, BadJSON: 0.1}})
		var out []Response
		for i := range 300 {
			r := m.Submit(at(time.Duration(i)*time.Second), Request{Input: 100, MaxTokens: 100, Output: 50})
			r.flow = nil
			out = append(out, r)
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	same := func(x, y []Response) bool {
		for i := range x {
			if x[i].Status != y[i].Status || x[i].Fault != y[i].Fault || x[i].Latency != y[i].Latency || x[i].RetryAfter != y[i].RetryAfter {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("same seed, different responses")
	}
	if same(a, c) {
		t.Fatal("different seeds, identical responses")
	}
}

func TestLatencyRange(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{Latency: 2 * time.Second})
	lo, hi := time.Hour, time.Duration(0)
	for i := range 5000 {
		r := m.Submit(at(time.Duration(i)), Request{})
		lo, hi = min(lo, r.Latency), max(hi, r.Latency)
	}
	if lo < time.Second || hi > 3*time.Second || lo > 1100*time.Millisecond || hi < 2900*time.Millisecond {
		t.Fatalf("latency in [%s, %s], want spread over [1s, 3s]", lo, hi)
	}
	if r := newModel(t, ModelConfig{}).Submit(t0, Request{}); r.Latency != 0 {
		t.Fatalf("zero latency config gave %s", r.Latency)
	}
}

func TestFaultFractions(t *testing.T) {
	t.Parallel()
	f := Faults{Error5xx: 0.1, Timeout: 0.05, Reset: 0.02, BadJSON: 0.03}
	const n = 20000
	m := newModel(t, ModelConfig{Seed: 42, Faults: f, SettleOutput: true, Profile: "anthropic", Wire: true})
	var statuses = map[int]int{}
	for i := range n {
		r := m.Submit(at(time.Duration(i)*time.Millisecond), Request{Input: 10, MaxTokens: 100, Output: 40})
		statuses[r.Status]++
		if r.Charged.Requests != 1 {
			t.Fatalf("a faulted request must still be charged: %+v", r)
		}
		final := m.Finish(at(time.Duration(i)*time.Millisecond), r)
		switch r.Fault {
		case Fault5xx:
			if final.Output != 0 || r.Output != 0 || len(r.Body) == 0 {
				t.Fatalf("5xx: final %v output %d body %q", final, r.Output, r.Body)
			}
		case FaultTimeout, FaultReset:
			if r.Status != 0 || final.Output != 40 {
				t.Fatalf("%s: status %d final %v", r.Fault, r.Status, final)
			}
		case FaultBadJSON:
			if r.Status != 200 || r.Output != 0 || !strings.HasPrefix(string(r.Body), "{") {
				t.Fatalf("bad json: %+v", r)
			}
		case NoFault:
			if r.Output != 40 || r.Body != nil {
				t.Fatalf("ok: %+v", r)
			}
		}
	}
	st := m.Stats()
	for _, c := range []struct {
		f Fault
		p float64
	}{{Fault5xx, f.Error5xx}, {FaultTimeout, f.Timeout}, {FaultReset, f.Reset}, {FaultBadJSON, f.BadJSON}} {
		// Five standard deviations of a binomial count.
		sd := math.Sqrt(n * c.p * (1 - c.p))
		if got := float64(st.Faults[c.f]); math.Abs(got-n*c.p) > 5*sd {
			t.Errorf("%s: %v of %d, want about %v", c.f, got, n, n*c.p)
		}
	}
	if st.Succeeded+st.Faults[Fault5xx]+st.Faults[FaultTimeout]+st.Faults[FaultReset]+st.Faults[FaultBadJSON] != n {
		t.Errorf("counts do not add up: %+v", st)
	}
	if statuses[500] == 0 || statuses[529] == 0 || statuses[500]+statuses[529] != int(st.Faults[Fault5xx]) {
		t.Errorf("5xx statuses %v, want 500 and 529 (anthropic overload)", statuses)
	}
}

func TestTimeNeverGoesBack(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{Limits: limits("rpm=1")})
	m.Submit(at(time.Minute), Request{})
	// An earlier time counts as the latest seen: the minute is still full.
	if r := m.Submit(at(0), Request{}); r.Status != 429 || r.RetryAfter != time.Minute {
		t.Fatalf("status %d retry %s", r.Status, r.RetryAfter)
	}
}

func TestSubmitAllocations(t *testing.T) {
	m := newModel(t, ModelConfig{Profile: "groq", Latency: time.Second, Limits: limits("rpm=30,rpd=1000,tpm=8000,tpd=200000,otpm=1000"),
		Faults: Faults{Error5xx: 0.01}})
	now := t0
	allocs := testing.AllocsPerRun(10000, func() {
		now = now.Add(1500 * time.Millisecond)
		r := m.Submit(now, Request{Flow: "summary", Input: 200, MaxTokens: 60, Output: 40})
		m.Finish(now.Add(r.Latency), r)
	})
	if allocs > 0.1 {
		t.Fatalf("Submit+Finish allocate %.2f times per call, want (amortised) none", allocs)
	}
}

func BenchmarkSubmit(b *testing.B) {
	m := newModel(b, ModelConfig{Profile: "groq", SettleOutput: true, Limits: limits("rpm=30,rpd=1000,tpm=8000,tpd=200000,otpm=1000")})
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(500 * time.Millisecond)
		r := m.Submit(now, Request{Flow: "summary", Input: 200, MaxTokens: 60, Output: 40})
		m.Finish(now, r)
	}
}

// TestSubmitChoices: the model reserves N × max and settles to the output of
// all the choices; N of 0 is one choice.
func TestSubmitChoices(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{SettleOutput: true, Limits: limits("otpm=1000")})
	if r := m.Submit(t0, Request{Input: 10, MaxTokens: 100, N: 3, Output: 250}); r.Rejected || r.Charged.Output != 300 || r.Output != 250 {
		t.Fatalf("n=3: %+v", r)
	} else if final := m.Finish(t0, r); final.Output != 250 {
		t.Errorf("settled %+v, want 250", final)
	}
	if r := m.Submit(t0, Request{Input: 10, MaxTokens: 100, N: 0, Output: 500}); r.Charged.Output != 100 || r.Output != 100 {
		t.Errorf("n=0: %+v", r)
	}
	if r := m.Submit(t0, Request{Input: 10, MaxTokens: 100, N: 11}); !r.Rejected || !r.TooLarge {
		t.Errorf("11 × 100 over an otpm of 1000: %+v", r)
	}
	if r := m.Submit(t0, Request{MaxTokens: math.MaxInt64 / 2, N: 3}); !r.Rejected || !r.TooLarge || r.Charged.Output != 0 {
		t.Errorf("an overflowing reservation: %+v", r)
	}
	// Without max_tokens each choice reserves the default.
	if r := newModel(t, ModelConfig{Limits: limits("otpm=5000")}).Submit(t0, Request{Input: 5, N: 5, Output: 100}); r.Rejected || r.Charged.Output != 5*1000 {
		t.Errorf("n=5 without max: %+v", r)
	}
	if got := reserveOutput(math.MaxInt64/2, 3); got != math.MaxInt64 {
		t.Errorf("reserveOutput saturates at %d", got)
	}
}
