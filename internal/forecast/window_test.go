package forecast

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
)

func TestRollingWindow(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{Limits: limits("tpm=100")})
	steps := []struct {
		at         time.Duration
		in, max    int64
		ok         bool
		retryAfter time.Duration
	}{
		{0, 10, 50, true, 0},                                              // used 60
		{30 * time.Second, 10, 30, true, 0},                               // used 100
		{31 * time.Second, 5, 5, false, 29 * time.Second},                 // the first charge leaves at 60s
		{59*time.Second + 999*time.Millisecond, 5, 5, false, time.Second}, // 1ms: rounded up to a whole second
		{60 * time.Second, 5, 5, true, 0},                                 // used 40 + 10 = 50
		{61 * time.Second, 30, 30, false, 29 * time.Second},               // needs 60, used 50; the 40 leaves at 90s
		{90 * time.Second, 30, 30, true, 0},
	}
	for i, s := range steps {
		r := m.Submit(at(s.at), Request{Input: s.in, MaxTokens: s.max})
		if ok := r.Status == 200; ok != s.ok {
			t.Fatalf("step %d at %s: status %d, want ok=%v", i, s.at, r.Status, s.ok)
		}
		if !s.ok && (r.Limit != governor.TPM || r.RetryAfter != s.retryAfter || r.TooLarge || r.Charged != (governor.Cost{})) {
			t.Errorf("step %d: limit %s retry %s toolarge %v charged %v, want tpm %s false zero", i, r.Limit, r.RetryAfter, r.TooLarge, r.Charged, s.retryAfter)
		}
	}
}

func TestFixedWindow(t *testing.T) {
	t.Parallel()
	// A fixed window forgives a burst across its boundary that a rolling one refuses.
	for _, tc := range []struct {
		fixed  bool
		second bool
		retry  time.Duration
	}{
		{true, true, 0},
		{false, false, 50 * time.Second},
	} {
		t.Run(govtext.WindowWord(tc.fixed), func(t *testing.T) {
			t.Parallel()
			m := newModel(t, ModelConfig{FixedWindows: tc.fixed, Limits: limits("tpm=100")})
			if r := m.Submit(at(50*time.Second), Request{Input: 50, MaxTokens: 50}); r.Status != 200 {
				t.Fatalf("first: %d", r.Status)
			}
			r := m.Submit(at(55*time.Second), Request{Input: 1, MaxTokens: 1})
			wantRetry := 5 * time.Second // fixed: the next boundary
			if !tc.fixed {
				wantRetry = 55 * time.Second
			}
			if r.Status != 429 || r.RetryAfter != wantRetry {
				t.Fatalf("inside the window: status %d retry %s, want 429 %s", r.Status, r.RetryAfter, wantRetry)
			}
			r = m.Submit(at(60*time.Second), Request{Input: 50, MaxTokens: 50})
			if got := r.Status == 200; got != tc.second {
				t.Fatalf("at the boundary: status %d, want ok=%v", r.Status, tc.second)
			}
			if !tc.second && r.RetryAfter != tc.retry {
				t.Errorf("retry after %s, want %s", r.RetryAfter, tc.retry)
			}
		})
	}
}

func TestFixedDayWindowIsEpochAligned(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{FixedWindows: true, Limits: limits("rpd=2")})
	start := t0.Add(23 * time.Hour)
	for i := range 2 {
		if r := m.Submit(start.Add(time.Duration(i)*time.Minute), Request{}); r.Status != 200 {
			t.Fatalf("request %d: %d", i, r.Status)
		}
	}
	r := m.Submit(start.Add(10*time.Minute), Request{})
	if r.Status != 429 || r.Limit != governor.RPD || r.RetryAfter != 50*time.Minute {
		t.Fatalf("third: status %d limit %s retry %s, want 429 rpd 50m", r.Status, r.Limit, r.RetryAfter)
	}
	if r := m.Submit(t0.Add(24*time.Hour), Request{}); r.Status != 200 {
		t.Fatalf("after midnight UTC: %d", r.Status)
	}
}

// reference is the obvious quadratic model of the windows, to check the
// deques against.
type reference struct {
	fixed   bool
	limits  governor.Limits
	charges []struct {
		at   time.Time
		cost governor.Cost
	}
}

func (ref *reference) used(now time.Time, l governor.Limit) int64 {
	p := int64(l.Period())
	t := now.UnixNano()
	from := t - p + 1 // rolling: charges younger than one period
	if ref.fixed {
		from = t - floorMod(t, p) // fixed: charges since the window began
	}
	var n int64
	for i := len(ref.charges) - 1; i >= 0 && ref.charges[i].at.UnixNano() >= from; i-- {
		n += ref.charges[i].cost.On(l)
	}
	return n
}

func (ref *reference) submit(now time.Time, c governor.Cost) (bool, governor.Limit) {
	for l := range governor.NumLimits {
		if ref.limits[l] > 0 && c.On(l) > ref.limits[l] {
			return false, l
		}
	}
	for l := range governor.NumLimits {
		if ref.limits[l] > 0 && ref.used(now, l)+c.On(l) > ref.limits[l] {
			return false, l
		}
	}
	ref.charges = append(ref.charges, struct {
		at   time.Time
		cost governor.Cost
	}{now, c})
	return true, 0
}

func TestWindowsMatchReference(t *testing.T) {
	t.Parallel()
	for _, fixed := range []bool{false, true} {
		t.Run(govtext.WindowWord(fixed), func(t *testing.T) {
			t.Parallel()
			ls := limits("rpm=20,rpd=1000,tpm=3000,tpd=400000,itpm=2000,otpm=1500")
			m := newModel(t, ModelConfig{FixedWindows: fixed, Limits: ls})
			ref := &reference{fixed: fixed, limits: ls}
			rng := rand.New(rand.NewPCG(1, 2))
			now := t0.Add(-7 * time.Hour)
			var admitted int
			for i := range 3000 {
				now = now.Add(time.Duration(rng.Int64N(int64(40 * time.Second))))
				req := Request{Input: rng.Int64N(400), MaxTokens: rng.Int64N(300)}
				c := governor.Cost{Requests: 1, Input: req.Input, Output: req.MaxTokens}
				if c.Output == 0 {
					c.Output = 1000
				}
				wantOK, wantLimit := ref.submit(now, c)
				r := m.Submit(now, req)
				if (r.Status == 200) != wantOK || (!wantOK && r.Limit != wantLimit) {
					t.Fatalf("request %d at %s: status %d limit %s, reference ok=%v limit %s", i, now, r.Status, r.Limit, wantOK, wantLimit)
				}
				if wantOK {
					admitted++
					continue
				}
				// The retry time is exact: one nanosecond earlier it still does not fit.
				if !r.TooLarge {
					exact := r.RetryAfter
					if got := ref.used(now.Add(exact), r.Limit) + c.On(r.Limit); got > ls[r.Limit] {
						t.Fatalf("request %d: after retry-after %s the %s charge %d still exceeds %d", i, exact, r.Limit, got, ls[r.Limit])
					}
					if exact > time.Second {
						if got := ref.used(now.Add(exact-time.Second), r.Limit) + c.On(r.Limit); got <= ls[r.Limit] {
							t.Fatalf("request %d: retry-after %s is a whole second too long for %s", i, exact, r.Limit)
						}
					}
				}
			}
			if admitted < 500 || admitted > 2900 {
				t.Errorf("admitted %d of 3000: the test does not exercise the limits", admitted)
			}
		})
	}
}
