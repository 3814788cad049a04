package governor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/govkey"
)

var t0 = time.Date(2026, 10, 18, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mustNew(t *testing.T, cfg Config) *Governor {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// in is g's inside, reached as sluice's own packages reach it.
func in(g *Governor) inside { return g.Inside(govkey.Key{}) }

// mustNewLeased is mustNew for a governor that admits calls only on leases.
func mustNewLeased(t *testing.T, cfg Config) *Governor {
	t.Helper()
	g := mustNew(t, cfg)
	in(g).Leased()
	return g
}

// budget bounds a test's wait for an event: as long as a whole test may
// take, so that no load on the machine reaches it before the event comes.
const budget = 2 * time.Minute

// waitUntil polls cond until it holds, failing the test if it does not
// within budget; what says what is awaited.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(budget); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", budget, what)
		}
		time.Sleep(time.Millisecond) // poll interval: until cond holds (the loop's deadline bounds it)
	}
}

// waitingIn is how many calls of flow wait in g's line at now.
func waitingIn(g *Governor, now time.Time, flow string) int {
	for _, f := range g.Stats(now).Flows {
		if f.Name == flow {
			return f.Waiting
		}
	}
	return 0
}

func mustReserve(t *testing.T, g *Governor, now time.Time, flow string, c Cost) *Reservation {
	t.Helper()
	r, err := g.Reserve(now, flow, c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative limit", Config{Limits: Limits{TPM: -1}}, "limit tpm is negative"},
		{"unnamed flow", Config{Flows: []FlowConfig{{}}}, "has no name"},
		{"flow twice", Config{Flows: []FlowConfig{{Name: "a"}, {Name: "a"}}}, `flow "a" listed twice`},
		{"negative weight", Config{Flows: []FlowConfig{{Name: "a", Weight: -2}}}, "weight must be positive"},
		{"priority factor", Config{PriorityFactor: 0.5}, "PriorityFactor must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	t.Parallel()
	ls, err := parseLimits("rpm=30, tpm=8000,tpd=200_000,OTPM=1000")
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{RPM: 30, TPM: 8000, TPD: 200000, OTPM: 1000}
	if ls != want {
		t.Fatalf("ParseLimits = %v, want %v", ls, want)
	}
	if got := ls.String(); got != "rpm=30,tpm=8000,tpd=200000,otpm=1000" {
		t.Fatalf("String() = %q", got)
	}
	for in, want := range map[string]string{
		"rpx=3":         `unknown limit "rpx"`,
		"tpm":           "want name=value",
		"tpm=0":         "not a positive whole number",
		"tpm=1,tpm=2":   "given twice",
		"otpm=1.5":      "not a positive whole number",
		"rpm=30,,tpm=1": "want name=value",
	} {
		if _, err := parseLimits(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseLimits(%q) error = %v, want %q", in, err, want)
		}
	}
}

func TestTooLargeNamesLimitAndNumbers(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Key: "groq", Limits: Limits{TPM: 8000, OTPM: 1000}})
	_, err := g.Reserve(t0, "title", Cost{Requests: 1, Input: 550, Output: 1252})
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("Reserve error = %v, want *TooLargeError", err)
	}
	if tl.Limit != OTPM || tl.Need != 1252 || tl.Max != 1000 || tl.MaxOutput != 1000 {
		t.Fatalf("TooLargeError = %+v", tl)
	}
	want := "needs 1,252 output tokens, OTPM limit is 1,000; lower max_tokens: max_tokens ≤ 1,000 fits"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q does not contain %q", err, want)
	}
	if err := g.Check(Cost{Requests: 1, Input: 7500, Output: 600}); err == nil || !strings.Contains(err.Error(), "TPM limit is 8,000") {
		t.Fatalf("Check TPM = %v", err)
	}
	if err := g.Check(Cost{Requests: 1, Input: 100, Output: 900}); err != nil {
		t.Fatalf("Check fitting cost = %v", err)
	}
}

func TestLargestBatch(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPM: 8000, OTPM: 1000, TPD: 200000}})
	tests := []struct {
		name       string
		base, item Cost
		max, want  int
	}{
		{"summary", Cost{Requests: 1, Input: 100, Output: 0}, Cost{Requests: 0, Input: 300, Output: 260}, 30, 3},
		{"analysis", Cost{Requests: 1, Input: 150, Output: 0}, Cost{Requests: 0, Input: 600, Output: 360}, 5, 2},
		{"title", Cost{Requests: 1, Input: 150, Output: 0}, Cost{Requests: 0, Input: 40, Output: 60}, 10, 10},
		{"base too big", Cost{Requests: 1, Input: 9000, Output: 0}, Cost{Requests: 0, Input: 1, Output: 1}, 10, 0},
	}
	for _, tt := range tests {
		if got := g.LargestBatch(tt.base, tt.item, tt.max); got != tt.want {
			t.Errorf("%s: LargestBatch = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestAdmissionIsAllOrNothing(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 3, TPM: 1000}})
	c := Cost{Requests: 1, Input: 200, Output: 100}
	var rs []*Reservation
	for range 4 {
		rs = append(rs, mustReserve(t, g, t0, "a", c))
	}
	g.Advance(t0)
	for i, r := range rs {
		if want := i < 3; r.Admitted() != want {
			t.Fatalf("reservation %d admitted = %v, want %v (RPM 3)", i, r.Admitted(), want)
		}
	}
	// The fourth fits TPM (900 + 300 > 1000? no: 1200 > 1000) — it waits for both.
	next := g.Advance(at(time.Second))
	if !next.Equal(at(time.Minute)) {
		t.Fatalf("next = %v, want %v (when the first charges age out)", next, at(time.Minute))
	}
	g.Advance(at(time.Minute - time.Nanosecond))
	if rs[3].Admitted() {
		t.Fatal("admitted before the window freed room")
	}
	g.Advance(at(time.Minute))
	if !rs[3].Admitted() {
		t.Fatal("not admitted once the window freed room")
	}
}

func TestFixedWindowReturnsAtBoundary(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{FixedWindows: true, Limits: Limits{RPM: 1}})
	a := mustReserve(t, g, at(59*time.Second), "a", Cost{Requests: 1})
	b := mustReserve(t, g, at(59*time.Second), "a", Cost{Requests: 1})
	next := g.Advance(at(59 * time.Second))
	if !a.Admitted() || b.Admitted() {
		t.Fatal("want only the first admitted in the first window")
	}
	if !next.Equal(at(time.Minute)) {
		t.Fatalf("next = %v, want the minute boundary %v", next, at(time.Minute))
	}
	g.Advance(at(time.Minute))
	if !b.Admitted() {
		t.Fatal("fixed window did not return its allowance at the boundary")
	}
}

func TestFairShareInTokens(t *testing.T) {
	t.Parallel()
	// Two backlogged flows with very different request sizes and weights 2:1
	// share the TPM limit 2:1 in tokens, not in requests.
	g := mustNew(t, Config{Limits: Limits{TPM: 10000}, Flows: []FlowConfig{{Name: "heavy", Weight: 2}, {Name: "light", Weight: 1}}})
	heavy := Cost{Requests: 1, Input: 1500, Output: 500}
	light := Cost{Requests: 1, Input: 150, Output: 50}
	tokens := map[string]int64{}
	backlog(t, g, 200*time.Minute, map[string]Cost{"heavy": heavy, "light": light}, func(r *Reservation) {
		tokens[r.Flow()] += r.Cost().Tokens()
	})
	ratio := float64(tokens["heavy"]) / float64(tokens["light"])
	if ratio < 1.9 || ratio > 2.1 {
		t.Fatalf("token ratio heavy:light = %.3f (%d:%d), want 2 ± 5%%", ratio, tokens["heavy"], tokens["light"])
	}
}

// backlog keeps every flow backlogged (several reservations waiting) for d,
// advancing the governor each second, and calls admitted for each admission.
func backlog(t *testing.T, g *Governor, d time.Duration, flows map[string]Cost, admitted func(*Reservation)) {
	t.Helper()
	pending := map[string][]*Reservation{}
	for now := t0; now.Before(t0.Add(d)); now = now.Add(time.Second) {
		for more := true; more; {
			for name, c := range flows {
				for len(pending[name]) < 64 {
					pending[name] = append(pending[name], mustReserve(t, g, now, name, c))
				}
			}
			g.Advance(now)
			more = false
			for name, q := range pending {
				for len(q) > 0 && q[0].Admitted() {
					admitted(q[0])
					q = q[1:]
					more = true
				}
				pending[name] = q
			}
		}
	}
}

func TestPriorityIsAShareNotAnAbsolute(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 50}, Flows: []FlowConfig{{Name: "urgent", Priority: 1}, {Name: "bulk"}}})
	count := map[string]int{}
	backlog(t, g, 120*time.Minute, map[string]Cost{"urgent": {Requests: 1}, "bulk": {Requests: 1}}, func(r *Reservation) {
		count[r.Flow()]++
	})
	// Priority factor 4: urgent 4/5, bulk 1/5 of the requests, never zero.
	share := float64(count["bulk"]) / float64(count["bulk"]+count["urgent"])
	if share < 0.18 || share > 0.22 {
		t.Fatalf("bulk got %.3f of admissions (%v), want 0.2 ± 0.02", share, count)
	}
}

// A large call that waits for a full window is not starved by the small
// calls of other flows that keep arriving: the window frees a few of their
// charges at a time, and they would take each bit of room as it frees,
// forever, if the first call in fair order did not keep its start
// (backfilling admits them only where they do not push it later).
func TestLargeRequestIsNotStarvedBySmallOnes(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}})
	small := Cost{Requests: 1, Input: 50}
	smalls := []string{"s1", "s2", "s3"}
	// Each small flow always has a call waiting: once one is admitted, it
	// sends the next. Three a second want 150 tokens a second of a key that
	// frees 1000 a minute.
	waiting := map[string]*Reservation{}
	var smallAdmitted int
	step := func(now time.Time) {
		for _, name := range smalls {
			if r := waiting[name]; r == nil || r.Admitted() {
				if r != nil {
					smallAdmitted++
				}
				waiting[name] = mustReserve(t, g, now, name, small)
			}
		}
		g.Advance(now)
	}
	// Half a minute of small calls: the window is full of their charges,
	// made over its first seconds.
	now := t0
	for ; now.Before(at(30 * time.Second)); now = now.Add(time.Second) {
		step(now)
	}
	reserved := now
	big := mustReserve(t, g, reserved, "big", Cost{Requests: 1, Input: 900})
	g.Advance(reserved)
	if used := g.Stats(reserved).Limits[TPM].Used; big.Admitted() || used < 1000-small.Tokens() {
		t.Fatalf("when the large call came the window held %d tokens and it was admitted %v: want a full window it waits for", used, big.Admitted())
	}
	before := smallAdmitted
	for ; !big.Admitted() && now.Before(reserved.Add(10*time.Minute)); now = now.Add(time.Second) {
		step(now)
	}
	// The window's charges age out within a minute of the large call's
	// reservation; it may wait that long, no longer.
	if !big.Admitted() {
		t.Fatalf("large call not admitted in the %v after it was reserved, while %d small calls were; want it within a minute",
			now.Sub(reserved), smallAdmitted-before)
	}
	if wait := big.AdmittedAt().Sub(reserved); wait > time.Minute {
		t.Fatalf("large call admitted %v after it was reserved, while %d small calls were; want it within a minute", wait, smallAdmitted-before)
	}
	// And the small flows go on once it is in.
	before = smallAdmitted
	for end := now.Add(2 * time.Minute); now.Before(end); now = now.Add(time.Second) {
		step(now)
	}
	if smallAdmitted == before {
		t.Fatal("no small call admitted in the two minutes after the large one")
	}
}

func TestDayLimitIsPaced(t *testing.T) {
	t.Parallel()
	const limit = 240000
	g := mustNew(t, Config{Limits: Limits{TPD: limit}, DayBurst: time.Hour})
	c := Cost{Requests: 1, Input: 100}
	var byHour [48]int64
	now := t0
	var r *Reservation
	for now.Before(at(48 * time.Hour)) {
		if r == nil || r.Admitted() {
			if r != nil {
				byHour[r.AdmittedAt().Sub(t0)/time.Hour] += r.Cost().Tokens()
				r.Settle(now, Cost{Input: c.Input})
			}
			r = mustReserve(t, g, now, "backfill", c)
		}
		g.Advance(now)
		now = now.Add(5 * time.Second)
	}
	// A fresh governor answers at once: the hour's burst comes in hand as
	// the provider accepts the first calls. The first day pays it back, at 24/25 of the even pace
	// (0.995 × 240,000 / 24 = 9,950 an hour), so the burst and the day's
	// paced spend fill the day's paced budget and no more: the rolling day
	// window never fills, and the second day runs at the even pace with no
	// stall at the boundary, when the burst ages out.
	pace := 0.995 * limit / 24
	want := func(h int) float64 {
		switch {
		case h == 0:
			return pace * 2 * 24 / 25 // the burst and the first hour
		case h < 24:
			return pace * 24 / 25
		}
		return pace
	}
	var day int64
	for h := range 47 {
		if got := float64(byHour[h]); math.Abs(got-want(h)) > 0.01*want(h)+float64(c.Input) { // ± a call
			t.Errorf("hour %d spent %.0f tokens, want ≈ %.0f", h, got, want(h))
		}
		if h < 24 {
			day += byHour[h]
		}
	}
	if day > 0.995*limit+c.Input {
		t.Errorf("the first day spent %d tokens, more than its paced budget %.0f (and one call)", day, 0.995*limit)
	}
}

func TestDayPacingBurstAfterIdle(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPD: 240000}, DayBurst: time.Hour})
	first := mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 1000})
	g.Advance(t0)
	if !first.Admitted() {
		t.Fatal("first call not admitted")
	}
	// Idle for three hours: at most one hour of budget (10,000) may go at once.
	now := at(3 * time.Hour)
	var rs []*Reservation
	for range 15 {
		rs = append(rs, mustReserve(t, g, now, "a", Cost{Requests: 1, Input: 1000}))
	}
	g.Advance(now)
	n := 0
	for _, r := range rs {
		if r.Admitted() {
			n++
		}
	}
	if n < 10 || n > 11 {
		t.Fatalf("after idling, %d calls of 1,000 went at once, want one hour's worth (10 or 11)", n)
	}
}

func TestShrinkGivesBack(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}})
	r := mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 400, Output: 400})
	g.Advance(t0)
	if r.Shrink(t0, Cost{Requests: 1, Input: 500, Output: 100}) {
		t.Fatal("Shrink raised the input")
	}
	if !r.Shrink(t0, Cost{Requests: 1, Input: 200, Output: 200}) {
		t.Fatal("Shrink refused a smaller charge")
	}
	other := mustReserve(t, g, t0, "b", Cost{Requests: 1, Input: 600})
	g.Advance(t0)
	if !other.Admitted() {
		t.Fatal("room given back by Shrink was not usable")
	}
}

func TestRejectionPausesOnlyTheNamedLimit(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 100, TPM: 10000, OTPM: 1000}})
	in(g).Rejected(t0, TPM, 30*time.Second)
	tokens := mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 100, Output: 10})
	if next := g.Advance(t0); tokens.Admitted() || !next.Equal(at(30*time.Second)) {
		t.Fatalf("admitted=%v next=%v: want TPM held until %v", tokens.Admitted(), next, at(30*time.Second))
	}
	g.Advance(at(30 * time.Second))
	if !tokens.Admitted() {
		t.Fatal("not admitted after the retry-after passed")
	}
	// A call that charges no tokens is not held by a TPM rejection.
	in(g).Rejected(at(31*time.Second), TPM, time.Minute)
	req := mustReserve(t, g, at(31*time.Second), "b", Cost{Requests: 1})
	g.Advance(at(31 * time.Second))
	if !req.Admitted() {
		t.Fatal("a TPM rejection held a call that uses no tokens")
	}
}

func TestUnclassifiedRejectionPausesBrieflyAndGrows(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 100}})
	in(g).RejectedUnclassified(t0)
	r := mustReserve(t, g, t0, "a", Cost{Requests: 1})
	if next := g.Advance(t0); !next.Equal(at(time.Second)) {
		t.Fatalf("first pause ends %v, want 1s", next.Sub(t0))
	}
	in(g).RejectedUnclassified(t0)
	if next := g.Advance(t0); !next.Equal(at(2 * time.Second)) {
		t.Fatalf("second pause ends %v, want 2s", next.Sub(t0))
	}
	g.Advance(at(2 * time.Second))
	if !r.Admitted() {
		t.Fatal("not admitted after the pause")
	}
	// A failure the provider may have counted (a 5xx, a timeout) keeps the
	// charge but is no success: the next refusal pauses longer still.
	r.Fault(at(3*time.Second), Cost{})
	in(g).RejectedUnclassified(at(3 * time.Second))
	r2 := mustReserve(t, g, at(3*time.Second), "a", Cost{Requests: 1})
	if next := g.Advance(at(3 * time.Second)); !next.Equal(at(7 * time.Second)) {
		t.Fatalf("pause after a fault ends %v, want 4s: a fault is no success", next.Sub(at(3*time.Second)))
	}
	g.Advance(at(7 * time.Second))
	if !r2.Admitted() {
		t.Fatal("not admitted after the third pause")
	}
	r2.Settle(at(8*time.Second), Cost{})
	in(g).RejectedUnclassified(at(8 * time.Second))
	mustReserve(t, g, at(8*time.Second), "a", Cost{Requests: 1})
	if next := g.Advance(at(8 * time.Second)); !next.Equal(at(9 * time.Second)) {
		t.Fatalf("pause after a success ends %v, want it back to 1s", next.Sub(at(8*time.Second)))
	}
}

func TestObserveLearnsOthersUse(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}})
	var s Snapshot
	s[TPM] = Observed{Known: true, Limit: 1000, Remaining: 300, Reset: 20 * time.Second}
	g.Observe(t0, s)
	r := mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 500})
	if next := g.Advance(t0); r.Admitted() || !next.Equal(at(20*time.Second)) {
		t.Fatalf("admitted=%v next=%v, want held until the provider's reset", r.Admitted(), next)
	}
	// A different allowance from the provider replaces the configured one.
	s[TPM] = Observed{Known: true, Limit: 400, Remaining: 400, Reset: time.Second}
	g.Observe(at(21*time.Second), s)
	if got := g.Limits()[TPM]; got != 400 {
		t.Fatalf("TPM after observe = %d, want 400", got)
	}
	var tl *TooLargeError
	if _, err := g.Reserve(at(21*time.Second), "a", Cost{Requests: 1, Input: 500}); !errors.As(err, &tl) {
		t.Fatalf("Reserve over the learned limit = %v, want TooLargeError", err)
	}
}

func TestObserveOutOfOrderIsNotOthersUse(t *testing.T) {
	t.Parallel()
	// Two calls are admitted, the second reaches the provider first: the
	// first call's headers count both. That is not someone else's use.
	g := mustNew(t, Config{Limits: Limits{TPM: 10000}})
	first := mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 2000})
	second := mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 3000})
	g.Advance(t0)
	var s Snapshot
	s[TPM] = Observed{Known: true, Limit: 10000, Remaining: 5000, Reset: 30 * time.Second}
	first.Observe(at(time.Second), s)
	second.Observe(at(time.Second), s)
	if used := g.Stats(at(time.Second)).Limits[TPM].Used; used != 5000 {
		t.Fatalf("TPM used = %d after out-of-order headers, want 5000 (no phantom)", used)
	}
	// A real gap — another client used 2,000 — is held until the reset.
	s[TPM] = Observed{Known: true, Limit: 10000, Remaining: 3000, Reset: 30 * time.Second}
	second.Observe(at(2*time.Second), s)
	if used := g.Stats(at(2 * time.Second)).Limits[TPM].Used; used != 7000 {
		t.Fatalf("TPM used = %d, want 7000 (2,000 of someone else's)", used)
	}
	if used := g.Stats(at(31 * time.Second)).Limits[TPM].Used; used != 5000 {
		t.Fatalf("TPM used = %d after the reset, want 5000", used)
	}
}

func TestSentRestampsTheCharge(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 1}})
	r := mustReserve(t, g, t0, "a", Cost{Requests: 1})
	g.Advance(t0)
	// The call leaves 5 s after its admission: it counts until 65 s, not 60 s.
	r.Sent(at(5 * time.Second))
	next := mustReserve(t, g, at(5*time.Second), "a", Cost{Requests: 1})
	if when := g.Advance(at(5 * time.Second)); !when.Equal(at(65 * time.Second)) {
		t.Fatalf("next admission at %v, want 65s (a minute after the call left)", when.Sub(t0))
	}
	g.Advance(at(64 * time.Second))
	if next.Admitted() {
		t.Fatal("admitted while the re-stamped charge still counts")
	}
	r.Settle(at(6*time.Second), Cost{})
	g.Advance(at(65 * time.Second))
	if !next.Admitted() {
		t.Fatal("not admitted a minute after the call left")
	}
	r.Sent(at(70 * time.Second)) // settled: nothing changes
	if used := g.Stats(at(70 * time.Second)).Limits[RPM].Used; used != 1 {
		t.Fatalf("RPM used = %d, want 1", used)
	}
}

func TestSettleAndCancel(t *testing.T) {
	t.Parallel()
	for _, settle := range []bool{false, true} {
		t.Run(fmt.Sprintf("settle=%v", settle), func(t *testing.T) {
			t.Parallel()
			g := mustNew(t, Config{Limits: Limits{TPM: 1000}, SettleOutput: settle})
			r := mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 300, Output: 600})
			g.Advance(t0)
			r.Settle(at(time.Second), Cost{Input: 280, Output: 100})
			want := Cost{Requests: 1, Input: 280, Output: 600}
			if settle {
				want = Cost{Requests: 1, Input: 280, Output: 100}
			}
			if got := r.Cost(); got != want {
				t.Fatalf("settled cost = %+v, want %+v", got, want)
			}
			if used := g.Stats(at(time.Second)).Limits[TPM].Used; used != want.Tokens() {
				t.Fatalf("TPM used = %d, want %d", used, want.Tokens())
			}
			c := mustReserve(t, g, at(time.Second), "a", Cost{Requests: 1, Input: 100})
			g.Advance(at(time.Second))
			c.Cancel(at(2 * time.Second))
			if used := g.Stats(at(2 * time.Second)).Limits[TPM].Used; used != want.Tokens() {
				t.Fatalf("TPM used after cancel = %d, want the cancelled charge given back (%d)", used, want.Tokens())
			}
		})
	}
}

func TestCancelWaitingKeepsOrder(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 1}})
	first := mustReserve(t, g, t0, "a", Cost{Requests: 1})
	g.Advance(t0)
	a2 := mustReserve(t, g, t0, "a", Cost{Requests: 1})
	b := mustReserve(t, g, t0, "b", Cost{Requests: 1})
	a3 := mustReserve(t, g, t0, "a", Cost{Requests: 1})
	a2.Cancel(t0)
	if !first.Admitted() || a2.Admitted() {
		t.Fatal("bad start")
	}
	g.Advance(at(time.Minute))
	g.Advance(at(2 * time.Minute))
	if !b.Admitted() || !a3.Admitted() {
		t.Fatalf("after cancel: b=%v a3=%v, want both admitted in two windows", b.Admitted(), a3.Admitted())
	}
	if a2.Admitted() {
		t.Fatal("cancelled reservation was admitted")
	}
	if s := g.Stats(at(2 * time.Minute)); s.Flows[0].Waiting != 0 || s.Flows[1].Waiting != 0 {
		t.Fatalf("waiting after all admitted: %+v", s.Flows)
	}
}

type memJournal struct {
	mu sync.Mutex
	cs map[uint64]Charge
}

func (j *memJournal) Record(c Charge) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cs[c.ID] = c
}

func TestRestoreRemembersTheDay(t *testing.T) {
	t.Parallel()
	j := &memJournal{cs: map[uint64]Charge{}}
	g := mustNew(t, Config{Limits: Limits{TPD: 10000}, Journal: j.Record, DayBurst: -1})
	for i := range 8 {
		r := mustReserve(t, g, at(time.Duration(i)*time.Hour), "a", Cost{Requests: 1, Input: 1000})
		g.Advance(at(time.Duration(i) * time.Hour))
		r.Settle(at(time.Duration(i)*time.Hour+time.Second), Cost{Input: 1000})
	}
	var saved []Charge
	for _, c := range j.cs {
		saved = append(saved, c)
	}
	// "Restart" at 10:00: 8,000 of 10,000 tokens of the day are spent.
	g2 := mustNew(t, Config{Limits: Limits{TPD: 10000}, DayBurst: -1})
	g2.Restore(at(10*time.Hour), saved)
	r := mustReserve(t, g2, at(10*time.Hour), "a", Cost{Requests: 1, Input: 3000})
	next := g2.Advance(at(10 * time.Hour))
	if r.Admitted() {
		t.Fatal("restored governor admitted past the day's remaining budget")
	}
	// 3,000 tokens fit once the first charge (00:00) ages out at 24:00.
	if want := at(24 * time.Hour); !next.Equal(want) {
		t.Fatalf("next = %v, want %v", next, want)
	}
	small := mustReserve(t, g2, at(10*time.Hour), "b", Cost{Requests: 1, Input: 2000})
	g2.Advance(at(10 * time.Hour))
	if small.Admitted() {
		t.Fatal("a later reservation passed the waiting one")
	}
}

func TestRestoreKeepsPacing(t *testing.T) {
	t.Parallel()
	burst := func(g *Governor, now time.Time) int {
		n := 0
		for range 50 {
			r := mustReserve(t, g, now, "a", Cost{Requests: 1, Input: 250, Output: 250})
			g.Advance(now)
			if r.Admitted() {
				n++
				r.Settle(now, Cost{Input: 250, Output: 250})
			}
		}
		return n
	}
	// A restart after a day at the even pace paces on as if it had been
	// running: no burst in hand, one call now and the next at its slot.
	const limit = 20000000
	var day []Charge
	step := 24 * time.Hour * 500 / (0.995 * limit)
	for at, id := t0.Add(-24*time.Hour+time.Second), uint64(1); at.Before(t0); at, id = at.Add(step), id+1 {
		day = append(day, Charge{ID: id, Flow: "a", At: at, Cost: Cost{Requests: 1, Input: 250, Output: 250}})
	}
	g := mustNew(t, Config{Limits: Limits{TPD: limit}})
	g.Restore(t0, day)
	if n := burst(g, t0); n > 1 {
		t.Errorf("%d calls admitted at once after a restore of a paced day, want at most 1 (the day is paced as before)", n)
	}
	// A restart with no usage recorded is a fresh start: an idle key
	// answers at once, each call sent when the last was answered.
	fresh := mustNew(t, Config{Limits: Limits{TPD: limit}})
	fresh.Restore(t0, nil)
	if n := burst(fresh, t0); n != 50 {
		t.Errorf("%d of 50 calls admitted at once after a restore with nothing recorded, want 50 (an hour's burst in hand)", n)
	}
}

func TestWaitRealClock(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 1}})
	ctx := context.Background()
	start := time.Now()
	r, err := g.Wait(ctx, "a", Cost{Requests: 1})
	if err != nil || !r.Admitted() {
		t.Fatalf("first Wait = %v, %v", r, err)
	}
	ctx2, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = g.Wait(ctx2, "a", Cost{Requests: 1})
	var we *WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Wait error = %v, want *WaitError wrapping DeadlineExceeded", err)
	}
	// What is left of the minute since the first call, however long the
	// machine took to get here.
	if least := time.Minute - time.Since(start); we.EstimatedWait < least || we.EstimatedWait > time.Minute {
		t.Fatalf("EstimatedWait = %v, want what is left of the minute (RPM 1): from %v to %v", we.EstimatedWait, least, time.Minute)
	}
	if s := g.Stats(time.Now()); s.Flows[0].Waiting != 0 {
		t.Fatal("timed-out wait left its reservation in line")
	}
}

func TestWaitWakesOnCancelOfOther(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	g := mustNew(t, Config{Limits: Limits{RPM: 1}, Now: clock})
	first, err := g.Wait(context.Background(), "a", Cost{Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Wait(context.Background(), "b", Cost{Requests: 1})
		done <- err
	}()
	// Giving back the first call's charge frees the minute: the waiter is
	// woken, not left to its timer (a minute on a clock that does not move).
	waitUntil(t, "the second call waits", func() bool { return waitingIn(g, clock(), "b") == 1 })
	first.Cancel(clock())
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(budget):
		t.Fatal("waiter not woken by the cancel")
	}
}

// A Governor not made by New cannot be used: every exported method panics
// with a message that says to use New, instead of failing on a nil map or
// clock (or, as Await did, leaving the lock held).
func TestZeroGovernorPanicsSayingUseNew(t *testing.T) {
	t.Parallel()
	one := Cost{Requests: 1}
	ctx := context.Background()
	methods := map[string]func(g *Governor){
		"Limits":               func(g *Governor) { g.Limits() },
		"Check":                func(g *Governor) { _ = g.Check(one) },
		"LargestBatch":         func(g *Governor) { g.LargestBatch(one, one, 2) },
		"BatchSize":            func(g *Governor) { g.BatchSize(t0, "a", one, one, 2, time.Minute) },
		"Reserve":              func(g *Governor) { _, _ = g.Reserve(t0, "a", one) },
		"Wait":                 func(g *Governor) { _, _ = g.Wait(ctx, "a", one) },
		"Await":                func(g *Governor) { _ = g.Await(ctx, nil, 0) },
		"Advance":              func(g *Governor) { g.Advance(t0) },
		"Blocker":              func(g *Governor) { g.Blocker(t0, nil) },
		"EstimateWait":         func(g *Governor) { g.EstimateWait(t0, nil) },
		"EstimateFor":          func(g *Governor) { g.EstimateFor(t0, "a", one) },
		"Outlook":              func(g *Governor) { in(g).Outlook(t0, "a", one) },
		"Observe":              func(g *Governor) { g.Observe(t0, Snapshot{}) },
		"NoteWait":             func(g *Governor) { in(g).NoteWait(t0, time.Second, time.Second) },
		"Usage":                func(g *Governor) { in(g).Usage(t0, nil, one) },
		"Rejected":             func(g *Governor) { in(g).Rejected(t0, TPM, time.Second) },
		"RejectedUnclassified": func(g *Governor) { in(g).RejectedUnclassified(t0) },
		"RejectedFlow":         func(g *Governor) { in(g).RejectedFlow("a", TPM) },
		"RefusedFlow":          func(g *Governor) { in(g).RefusedFlow("a", TPM) },
		"Restore":              func(g *Governor) { g.Restore(t0, nil) },
		"Kept":                 func(g *Governor) { g.Kept() },
		"Price":                func(g *Governor) { g.Price() },
		"Stats":                func(g *Governor) { g.Stats(t0) },
		"Inside":               func(g *Governor) { g.Inside(govkey.Key{}) },
		"Leased":               func(g *Governor) { in(g).Leased() },
		"Grant":                func(g *Governor) { in(g).Grant(t0, "", Cost{}, t0) },
		"GrantBudget":          func(g *Governor) { in(g).GrantBudget(t0, "", "", 0, t0) },
		"Demand":               func(g *Governor) { in(g).Demand(t0, 0) },
		"LeaseUses":            func(g *Governor) { in(g).LeaseUses(t0) },
		"CloseLeases":          func(g *Governor) { in(g).CloseLeases(t0) },
		"LeaseWanted":          func(g *Governor) { in(g).LeaseWanted() },
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[*Governor](), reflect.TypeFor[inside]()} {
		for i := range typ.NumMethod() {
			if _, ok := methods[typ.Method(i).Name]; !ok {
				t.Errorf("method %s of %s is not tested on a Governor not made by New", typ.Method(i).Name, typ)
			}
		}
	}
	for name, call := range methods {
		for _, g := range []*Governor{new(Governor), nil} {
			func() {
				defer func() {
					p := recover()
					if msg, _ := p.(string); !strings.Contains(msg, "governor.New") {
						t.Errorf("%s on a Governor not made by New (%p): panic %v, want one that says to use governor.New", name, g, p)
					}
				}()
				call(g)
			}()
		}
	}
}

// TestRefusalsCounted: a call refused up front counts under its flow and
// the limit it can never fit, whether Reserve refused it or the caller
// found so with Check and says so with RefusedFlow.
func TestRefusalsCounted(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g, err := New(Config{Limits: Limits{TPM: 8000, OTPM: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Reserve(now, "analysis", Cost{Requests: 1, Input: 100, Output: 1800}); err == nil {
		t.Fatal("a call of 1,800 output tokens under OTPM 1,000 was queued")
	}
	in(g).RefusedFlow("title", TPM)
	var got = map[string][NumLimits]int64{}
	for _, f := range g.Stats(now).Flows {
		got[f.Name] = f.Refusals
	}
	if got["analysis"][OTPM] != 1 || got["title"][TPM] != 1 || got["analysis"][TPM] != 0 {
		t.Errorf("refusals %v", got)
	}
}

// TestIdleKeyAnswersAtOnce: on a fresh key with the limits sluice serve
// starts with (Groq's free tier, DevPick's RPD), ten small calls in a row,
// each sent when the one before has answered, are each admitted at once:
// a day pacer starts with its burst in hand.
func TestIdleKeyAnswersAtOnce(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{RPM: 30, RPD: 1000, TPM: 8000, TPD: 200000, OTPM: 1000}})
	now := t0
	for i := range 10 {
		r := mustReserve(t, g, now, "title", Cost{Requests: 1, Input: 20, Output: 60})
		g.Advance(now)
		if !r.Admitted() {
			t.Fatalf("call %d waits on %v on an idle key; want it admitted at once", i+1, g.Blocker(now, r))
		}
		now = now.Add(800 * time.Millisecond) // the call's answer
		r.Settle(now, Cost{Input: 20, Output: 12})
	}
}

// TestStartCreditRampsWithAnswers: a fresh key's burst comes in hand as the
// provider accepts calls: of ten calls sent at once one goes, and each
// round of answers lets twice as many go as the round before (1, 2, 4 …) —
// so a limit nobody announced is met by a call or two, not by the burst.
func TestStartCreditRampsWithAnswers(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPD: 200000}})
	var rs []*Reservation
	for range 10 {
		rs = append(rs, mustReserve(t, g, t0, "a", Cost{Requests: 1, Input: 100}))
	}
	admitted := func(now time.Time) (n int) {
		g.Advance(now)
		for _, r := range rs {
			if r.Admitted() {
				n++
			}
		}
		return n
	}
	now := t0
	for i, want := range []int{1, 3, 7, 10} {
		if got := admitted(now); got != want {
			t.Fatalf("after %d rounds of answers %d calls admitted, want %d", i, got, want)
		}
		now = now.Add(time.Second)
		for _, r := range rs {
			if r.Admitted() {
				r.Settle(now, Cost{Input: 100}) // settling twice does nothing
			}
		}
	}
}
