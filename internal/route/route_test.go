package route

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func gov(t *testing.T, key string, l governor.Limits, p governor.Price) *governor.Governor {
	t.Helper()
	g, err := governor.New(governor.Config{Key: key, Limits: l, Price: p, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func limits(tpm int64) governor.Limits {
	var l governor.Limits
	l[governor.TPM] = tpm
	return l
}

func same(c governor.Cost) func(int) governor.Cost { return func(int) governor.Cost { return c } }

// fill admits calls of c on g at now until one must wait.
func fill(t *testing.T, g *governor.Governor, now time.Time, c governor.Cost) {
	t.Helper()
	for range 1000 {
		r, err := g.Reserve(now, "other", c)
		if err != nil {
			t.Fatal(err)
		}
		g.Advance(now)
		if !r.Admitted() {
			r.Cancel(now)
			return
		}
	}
	t.Fatal("never full")
}

func TestCheapestFirstThenTheNextThatAdmits(t *testing.T) {
	paid := gov(t, "paid", limits(100_000), governor.Price{Input: 1, Output: 2})
	free1 := gov(t, "free1", limits(2_000), governor.Price{})
	free2 := gov(t, "free2", limits(2_000), governor.Price{})
	r, err := New(Config{Name: "r", Targets: []Target{{"paid", paid}, {"free1", free1}, {"free2", free2}}, MaxWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := governor.Cost{Requests: 1, Input: 500, Output: 400}
	ch, err := r.Pick(t0, "f", same(c))
	if err != nil || ch.Index != 1 || ch.Wait != 0 || ch.Money != 0 {
		t.Fatalf("first pick %+v, %v: want free1 at once, free", ch, err)
	}
	fill(t, free1, t0, c)
	if ch, _ = r.Pick(t0, "f", same(c)); ch.Index != 2 {
		t.Fatalf("free1 full: picked %d, want free2", ch.Index)
	}
	fill(t, free2, t0, c)
	ch, _ = r.Pick(t0, "f", same(c))
	if ch.Index != 0 || ch.Money != paid.Price().Of(c) || ch.Money == 0 {
		t.Fatalf("both free ones full: picked %+v, want paid at its price", ch)
	}
	// Once a minute has passed the free ones admit again.
	if ch, _ = r.Pick(t0.Add(time.Minute+5*time.Second), "f", same(c)); ch.Index != 1 {
		t.Fatalf("a minute later: picked %d, want free1 again", ch.Index)
	}
}

func TestWaitWithinMaxWaitKeepsTheCheaperTarget(t *testing.T) {
	free := gov(t, "free", limits(2_000), governor.Price{})
	paid := gov(t, "paid", limits(100_000), governor.Price{Input: 1, Output: 1})
	c := governor.Cost{Requests: 1, Input: 500, Output: 400}
	fill(t, free, t0, c)
	long, _ := New(Config{Name: "long", Targets: []Target{{"free", free}, {"paid", paid}}, MaxWait: 2 * time.Minute})
	if ch, _ := long.Pick(t0, "f", same(c)); ch.Index != 0 || ch.Wait <= 0 {
		t.Fatalf("max wait 2m: picked %+v, want the free one, waiting", ch)
	}
	short, _ := New(Config{Name: "short", Targets: []Target{{"free", free}, {"paid", paid}}, MaxWait: -1})
	if ch, _ := short.Pick(t0, "f", same(c)); ch.Index != 1 {
		t.Fatalf("no wait allowed: picked %+v, want paid", ch)
	}
}

func TestOrderedKeepsTheListedOrder(t *testing.T) {
	paid := gov(t, "paid", limits(100_000), governor.Price{Input: 1, Output: 1})
	free := gov(t, "free", limits(100_000), governor.Price{})
	r, _ := New(Config{Name: "r", Targets: []Target{{"paid", paid}, {"free", free}}, Rule: Ordered})
	if ch, _ := r.Pick(t0, "f", same(governor.Cost{Requests: 1, Input: 10, Output: 10})); ch.Index != 0 {
		t.Fatalf("ordered: picked %d, want the first listed", ch.Index)
	}
}

func TestFailingTargetIsOutThenProbed(t *testing.T) {
	a := gov(t, "a", limits(100_000), governor.Price{})
	b := gov(t, "b", limits(100_000), governor.Price{})
	r, _ := New(Config{Name: "r", Targets: []Target{{"a", a}, {"b", b}}, Failures: 3, Cooldown: time.Minute, MaxCooldown: 4 * time.Minute})
	c := same(governor.Cost{Requests: 1, Input: 10, Output: 10})
	now := t0
	for k := range 3 {
		ch, _ := r.Pick(now, "f", c)
		if ch.Index != 0 {
			t.Fatalf("failure %d: picked %d before a was out", k, ch.Index)
		}
		r.Done(now, 0, Failed)
	}
	if ch, _ := r.Pick(now, "f", c); ch.Index != 1 {
		t.Fatalf("a failed 3 times: picked %d, want b", ch.Index)
	}
	if s := r.Stats(now); !s[0].Out || !s[0].Until.Equal(now.Add(time.Minute)) || s[0].Outs != 1 || s[0].Failed != 3 {
		t.Fatalf("stats %+v", s[0])
	}
	now = now.Add(time.Minute)
	ch, _ := r.Pick(now, "f", c)
	if ch.Index != 0 || !ch.Probe {
		t.Fatalf("after its cooldown: picked %+v, want a probe of a", ch)
	}
	if ch, _ := r.Pick(now, "f", c); ch.Index != 1 {
		t.Fatalf("while a's probe is out: picked %d, want b", ch.Index)
	}
	r.Done(now, 0, Failed) // the probe fails: out twice as long
	if s := r.Stats(now); !s[0].Until.Equal(now.Add(2 * time.Minute)) {
		t.Fatalf("after a failed probe: until %v, want %v", s[0].Until, now.Add(2*time.Minute))
	}
	now = now.Add(2 * time.Minute)
	ch, _ = r.Pick(now, "f", c)
	if ch.Index != 0 || !ch.Probe {
		t.Fatalf("after the second cooldown: %+v", ch)
	}
	r.Done(now, 0, OK)
	for range 3 {
		if ch, _ := r.Pick(now, "f", c); ch.Index != 0 || ch.Probe {
			t.Fatalf("a is back: picked %+v", ch)
		}
	}
	if s := r.Stats(now); s[0].Out {
		t.Fatalf("a still out: %+v", s[0])
	}
}

func TestRefusalsAndAnswersDoNotTakeATargetOut(t *testing.T) {
	a := gov(t, "a", limits(100_000), governor.Price{})
	b := gov(t, "b", limits(100_000), governor.Price{})
	r, _ := New(Config{Name: "r", Targets: []Target{{"a", a}, {"b", b}}, Failures: 1})
	c := same(governor.Cost{Requests: 1, Input: 10, Output: 10})
	for _, o := range []Outcome{Refused, Abandoned, OK} {
		r.Done(t0, 0, o)
		if ch, _ := r.Pick(t0, "f", c); ch.Index != 0 {
			t.Fatalf("after outcome %d: picked %d, want a", o, ch.Index)
		}
	}
	r.Done(t0, 0, Exhausted)
	if ch, _ := r.Pick(t0.Add(DefaultCooldown), "f", c); ch.Index != 1 {
		t.Fatalf("a's quota gone: picked %d within MaxCooldown, want b", ch.Index)
	}
}

func TestEveryTargetOut(t *testing.T) {
	a := gov(t, "a", limits(100_000), governor.Price{})
	r, _ := New(Config{Name: "r", Targets: []Target{{"a", a}}, Failures: 1, Cooldown: time.Minute})
	c := same(governor.Cost{Requests: 1, Input: 10, Output: 10})
	r.Done(t0, 0, Failed)
	_, err := r.Pick(t0.Add(10*time.Second), "f", c)
	var oe *OutError
	if !errors.As(err, &oe) || oe.Wait != 50*time.Second || !strings.Contains(err.Error(), "route r") {
		t.Fatalf("every target out: %v", err)
	}
	// Its cooldown over, one call tries it; while that call is out the
	// others wait, for a time ahead, never one already past.
	now := t0.Add(2 * time.Minute)
	if ch, err := r.Pick(now, "f", c); err != nil || !ch.Probe {
		t.Fatalf("after the cooldown: %+v %v, want a trial call", ch, err)
	}
	_, err = r.Pick(now.Add(time.Second), "f", c)
	if !errors.As(err, &oe) || oe.Wait <= 0 {
		t.Fatalf("while the trial call is out: %v, want a wait ahead", err)
	}
}

func TestTooLargeForSomeOrAll(t *testing.T) {
	small := gov(t, "small", limits(1_000), governor.Price{})
	big := gov(t, "big", limits(100_000), governor.Price{})
	r, _ := New(Config{Name: "r", Targets: []Target{{"small", small}, {"big", big}}})
	if ch, err := r.Pick(t0, "f", same(governor.Cost{Requests: 1, Input: 900, Output: 900})); err != nil || ch.Index != 1 {
		t.Fatalf("too large for small only: %+v %v", ch, err)
	}
	_, err := r.Pick(t0, "f", same(governor.Cost{Requests: 1, Input: 90_000, Output: 90_000}))
	var tl *TooLargeError
	if !errors.As(err, &tl) || len(tl.Errs) != 2 || !strings.Contains(err.Error(), "small:") || !strings.Contains(err.Error(), "big:") {
		t.Fatalf("too large for both: %v", err)
	}
	var gtl *governor.TooLargeError
	if !errors.As(err, &gtl) || gtl.Limit != governor.TPM {
		t.Fatalf("a governor refusal inside: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	g := gov(t, "a", limits(1000), governor.Price{})
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "x"}, "no targets"},
		{Config{Name: "x", Targets: []Target{{"a", g}, {"a", g}}}, "listed twice"},
		{Config{Name: "x", Targets: []Target{{"a", nil}}}, "no governor"},
		{Config{Name: "x", Targets: []Target{{"a", g}}, MaxWait: 48 * time.Hour}, "max wait"},
		{Config{Name: "x", Targets: []Target{{"a", g}}, Failures: -1}, "failures"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := ParseRule("fastest"); err == nil || !strings.Contains(err.Error(), "fastest") {
		t.Errorf("ParseRule: %v", err)
	}
}
