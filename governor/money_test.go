package governor

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// price is $1 per million input tokens, $0.25 per million cached, $2 per
// million output: a token of input costs 1,000 billionths, of output 2,000.
var price = Price{Input: 1, CachedInput: 0.25, Output: 2}

func TestPriceOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    Cost
		p    Price
		want int64
	}{
		{Cost{Input: 1000, Output: 2000}, price, 5_000_000},
		{Cost{Input: 1000, Cached: 400, Output: 0}, price, 600_000 + 100_000},
		{Cost{Input: 1000, Cached: 400}, Price{Input: 1, Output: 2}, 1_000_000}, // no cached price: as input
		{Cost{Input: 1}, Price{Input: 0.0001}, 1},                               // rounded up, never down to free
		{Cost{Input: MaxCost, Output: MaxCost}, Price{Input: MaxPrice, Output: MaxPrice}, MaxCost},
	} {
		if got := tc.p.Of(tc.c); got != tc.want {
			t.Errorf("%+v.Of(%+v) = %d, want %d", tc.p, tc.c, got, tc.want)
		}
	}
	for n, want := range map[int64]string{5 * Nano: "5.00", 12_300_000: "0.0123", 1: "0.000000001", 0: "0.00", 1_500_000_000: "1.50"} {
		if got := FormatMoney(n); got != want {
			t.Errorf("FormatMoney(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBudgetNeedsAPriceAndABoundedOne(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Key: "k", Limits: Limits{MPD: 5 * Nano}}); err == nil || !strings.Contains(err.Error(), "a budget (mpd=5.00) needs a Price") {
		t.Fatalf("budget without price: %v", err)
	}
	if _, err := New(Config{Key: "k", Price: Price{Input: -1}}); err == nil || !strings.Contains(err.Error(), "price input -1: want money per million tokens between 0 and") {
		t.Fatalf("negative price: %v", err)
	}
}

// A call is admitted on its worst-case price and settled with what it
// really cost: the money a short answer did not use comes back.
func TestBudgetAdmitsOnWorstCaseAndSettlesWithUsage(t *testing.T) {
	t.Parallel()
	// $0.01 a day; each call's worst case is $0.005 (1,000 in, 2,000 max out).
	g := mustNew(t, Config{Key: "k", Price: price, Limits: Limits{MPD: Nano / 100}, DayBurst: -1})
	c := Cost{Requests: 1, Input: 1000, Output: 2000}
	a := mustReserve(t, g, t0, "a", c)
	b := mustReserve(t, g, t0, "a", c)
	x := mustReserve(t, g, t0, "a", c)
	g.Advance(t0)
	if !a.Admitted() || !b.Admitted() || x.Admitted() {
		t.Fatalf("admitted %v %v %v, want the first two: two worst cases fill $0.01", a.Admitted(), b.Admitted(), x.Admitted())
	}
	if got := a.Cost().Money; got != 5_000_000 {
		t.Fatalf("charged %d, want the worst case 5,000,000 (0.005)", got)
	}
	if bl := g.Blocker(at(time.Second), x); bl.Kind != "limit" || bl.Limit != MPD {
		t.Fatalf("third call waits on %+v, want the limit mpd", bl)
	}
	// 500 tokens out of 2,000: $0.002 — 0.002 + 0.005 + 0.005 is still over.
	a.Settle(at(time.Second), Cost{Input: 1000, Output: 500})
	if got := a.Cost().Money; got != 2_000_000 {
		t.Fatalf("settled at %d, want 2,000,000 (1,000 in, 500 out)", got)
	}
	g.Advance(at(time.Second))
	if x.Admitted() {
		t.Fatal("admitted with 0.012 of 0.01 charged")
	}
	// 400 of the 1,000 input from the cache, nothing out: $0.0007.
	b.Settle(at(2*time.Second), Cost{Input: 1000, Cached: 400})
	g.Advance(at(2 * time.Second))
	if !x.Admitted() {
		t.Fatal("not admitted with 0.002 + 0.0007 charged and 0.005 asked of 0.01")
	}
	// The tokens' windows keep max_tokens (SettleOutput is false); the
	// money is what was spent.
	if got := b.Cost(); got.Output != 2000 || got.Money != 700_000 {
		t.Fatalf("second call's charge %+v, want output 2,000 kept and money 700,000", got)
	}
	st := g.Stats(at(2 * time.Second))
	if used := st.Limits[MPD].Used; used != 2_000_000+700_000+5_000_000 {
		t.Fatalf("stats used %d of mpd, want 7,700,000", used)
	}
}

func TestBudgetRefusesACallThatCanNeverFit(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Key: "paid", Price: price, Limits: Limits{MPD: Nano / 1000}}) // $0.001 a day
	_, err := g.Reserve(t0, "a", Cost{Requests: 1, Input: 200, Output: 1000})            // 0.0002 + 0.002
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != MPD || tl.Need != 2_200_000 || tl.Max != 1_000_000 {
		t.Fatalf("error %v (%+v), want a TooLargeError on mpd, 2,200,000 of 1,000,000", err, tl)
	}
	// (0.001 − 0.0002) / 0.000002 a token = 400 tokens of output fit.
	want := "request can never fit: costs up to 0.0022, the budget of money per day is 0.001; lower max_tokens: max_tokens ≤ 400 fits"
	if err.Error() != want {
		t.Fatalf("message\n%q\nwant\n%q", err, want)
	}
	if err := g.Check(Cost{Requests: 1, Input: 200, Output: 400}); err != nil {
		t.Fatalf("the call the hint names does not fit: %v", err)
	}
	if _, err := g.Reserve(t0, "a", Cost{Requests: 1, Input: 2000}); !errors.As(err, &tl) || tl.MaxOutput != 0 ||
		!strings.Contains(err.Error(), "shorten the prompt: it alone does not fit") {
		t.Fatalf("a prompt over the budget alone: %v", err)
	}
}

// A month's budget counts 30 days back, and a restart restores them; the
// day's budget counts only the last day.
func TestMonthBudgetCountsThirtyDaysAndIsRestored(t *testing.T) {
	t.Parallel()
	cfg := Config{Key: "k", Price: price, Limits: Limits{MPD: Nano, MPM: 2 * Nano}, DayBurst: -1} // $1 a day, $2 a month
	var journal []Charge
	cfg.Journal = func(c Charge) { journal = append(journal, c) }
	g := mustNew(t, cfg)
	if g.Kept() != Month {
		t.Fatalf("Kept = %v, want a month under a month's budget", g.Kept())
	}
	big := Cost{Requests: 1, Input: 400_000, Output: 0} // $0.40
	day := 24 * time.Hour
	for d := range 5 {
		now := at(time.Duration(d) * day)
		for range 2 {
			r := mustReserve(t, g, now, "a", big)
			g.Advance(now)
			if want := d < 2; want && !r.Admitted() {
				t.Fatalf("day %d: not admitted", d)
			}
			if used := g.Stats(now).Limits[MPM].Used; used > 2*Nano {
				t.Fatalf("day %d: the month's use %d is over its budget", d, used)
			}
			if !r.Admitted() {
				r.Cancel(now) // it leaves the line
			}
		}
	}
	// Days 0 and 1 spent $0.80 each, day 2 $0.40 (the month then holds
	// $2.00), days 3 and 4 nothing.
	now := at(4 * day)
	st := g.Stats(now)
	if st.Limits[MPM].Used != 2*Nano || st.Limits[MPD].Used != 0 {
		t.Fatalf("at day 4: month used %d, day used %d; want 2,000,000,000 and 0", st.Limits[MPM].Used, st.Limits[MPD].Used)
	}
	// After a restart the month's charges are back.
	h := mustNew(t, cfg)
	h.Restore(now, journal)
	r := mustReserve(t, h, now, "a", big)
	h.Advance(now)
	if r.Admitted() {
		t.Fatal("admitted after a restart with the month's budget spent")
	}
	// The first charges age out 30 days after they were made.
	h.Advance(at(Month))
	if !r.Admitted() {
		t.Fatal("not admitted once the first day's charges are a month old")
	}
}

// Each flow gets its share of the money, not of the requests: a flow whose
// calls cost four times as much makes a quarter as many.
func TestBudgetIsSharedFairlyInMoney(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Key: "k", Price: price, Limits: Limits{MPD: 24 * Nano / 100}, DayBurst: -1}) // $0.24 a day
	cheap := Cost{Requests: 1, Input: 1000}                                                             // $0.001
	dear := Cost{Requests: 1, Input: 4000}                                                              // $0.004
	spent := map[string]int64{}
	var waiting []*Reservation
	// More of each than the day's budget buys.
	for range 100 {
		waiting = append(waiting, mustReserve(t, g, t0, "dear", dear))
		for range 4 {
			waiting = append(waiting, mustReserve(t, g, t0, "cheap", cheap))
		}
	}
	// Over a day, in steps of a minute.
	for now := t0; now.Before(at(24 * time.Hour)); now = now.Add(time.Minute) {
		g.Advance(now)
		for i := 0; i < len(waiting); i++ {
			if r := waiting[i]; r.Admitted() {
				spent[r.Flow()] += r.Cost().Money
				waiting = append(waiting[:i], waiting[i+1:]...)
				i--
			}
		}
	}
	if spent["cheap"] == 0 || spent["dear"] == 0 {
		t.Fatalf("spent %v: a flow got nothing", spent)
	}
	if r := float64(spent["cheap"]) / float64(spent["dear"]); r < 0.9 || r > 1.1 {
		t.Fatalf("spent %v: ratio %.2f, want each flow about the same money", spent, r)
	}
}

// A day's budget is paced like a day limit: spent evenly over the day, not
// in the morning.
func TestDayBudgetIsPaced(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Key: "k", Price: price, Limits: Limits{MPD: 24 * Nano}}) // $24 a day, an hour of burst
	call := Cost{Requests: 1, Input: 50_000}                                        // $0.05
	var waiting []*Reservation
	for range 1000 { // $50 of demand
		waiting = append(waiting, mustReserve(t, g, t0, "a", call))
	}
	var spent int64
	spentBy := map[time.Duration]int64{}
	for now := t0; now.Before(at(24 * time.Hour)); now = now.Add(time.Minute) {
		g.Advance(now)
		for len(waiting) > 0 && waiting[0].Admitted() {
			waiting[0].Settle(now, call)
			spent += waiting[0].Cost().Money
			waiting = waiting[1:]
		}
		spentBy[now.Sub(t0)] = spent
	}
	// The first hour: its even share ($1) and at most the burst ($1) more.
	if first := spentBy[time.Hour]; first > 2*Nano+Nano/20 {
		t.Fatalf("spent %s in the first hour of a $24 day, want at most about 2.00", FormatMoney(first))
	}
	// Half the day: about half the budget.
	if half := spentBy[12*time.Hour]; half < 11*Nano || half > 14*Nano {
		t.Fatalf("spent %s in 12 hours, want about 12.00", FormatMoney(half))
	}
	if spent < 23*Nano || spent > 24*Nano {
		t.Fatalf("spent %s in the day, want nearly all of 24.00 and never more", FormatMoney(spent))
	}
}

func TestPriceAndBudgetText(t *testing.T) {
	t.Parallel()
	var p Price
	if err := p.UnmarshalText([]byte(" input=0.59, OUTPUT=0.79,cached_input=0.3")); err != nil || p != (Price{Input: 0.59, CachedInput: 0.3, Output: 0.79}) {
		t.Fatalf("price %+v, %v", p, err)
	}
	if s := p.String(); s != "input=0.59,cached_input=0.3,output=0.79" {
		t.Fatalf("price writes %q", s)
	}
	var b Budget
	if err := b.UnmarshalText([]byte("day=5,month=100.5")); err != nil || b != (Budget{Day: 5, Month: 100.5}) || b.String() != "day=5,month=100.5" {
		t.Fatalf("budget %+v %q, %v", b, b.String(), err)
	}
	if ls := b.Limits(Limits{TPM: 10}); ls[MPD] != 5*Nano || ls[MPM] != 100_500_000_000 || ls[TPM] != 10 || ls.String() != "tpm=10" {
		t.Fatalf("budget as limits %v (%q)", ls, ls.String())
	}
	for in, want := range map[string]string{
		"input=x":           `price input: "x" is not a number`,
		"input=1,input=2":   "price: input given twice",
		"inptu=1":           `price: unknown part "inptu" (want cached_input, input, output)`,
		"input=-1":          "price input -1: want money per million tokens between 0 and 1e+06",
		"input=NaN":         `price input: "NaN" is not a number`,
		"input":             `price "input": want name=amount, e.g. input=0.59,output=0.79`,
		"output=2000000":    "price output 2e+06: want money per million tokens between 0 and 1e+06",
		"cached_input=1e-3": "",
	} {
		var p Price
		err := p.UnmarshalText([]byte(in))
		if (want == "") != (err == nil) || err != nil && err.Error() != want {
			t.Errorf("price %q: error %v, want %q", in, err, want)
		}
	}
	for in, want := range map[string]string{
		"day=-1":         "budget day -1: want an amount of money between 0 and 1e+09 (0: no budget)",
		"week=5":         `budget: unknown part "week" (want day, month)`,
		"month=1e-12":    "budget month 1e-12: below a billionth, the smallest amount a budget counts",
		"day=2e9":        "budget day 2e+09: want an amount of money between 0 and 1e+09 (0: no budget)",
		"day=0,month=0 ": "",
	} {
		var b Budget
		err := b.UnmarshalText([]byte(in))
		if (want == "") != (err == nil) || err != nil && err.Error() != want {
			t.Errorf("budget %q: error %v, want %q", in, err, want)
		}
	}
	// In JSON (an app's recorded configuration) both go as their text.
	type cfg struct {
		Flows []FlowConfig
		Price Price
	}
	in := cfg{Flows: []FlowConfig{{Name: "a", Budget: Budget{Day: 0.5}}, {Name: "b"}}, Price: Price{Input: 0.59, Output: 0.79}}
	data, err := json.Marshal(in)
	if err != nil || !strings.Contains(string(data), `"Budget":"day=0.5"`) || !strings.Contains(string(data), `"Price":"input=0.59,output=0.79"`) {
		t.Fatalf("JSON %s, %v", data, err)
	}
	var out cfg
	if err := json.Unmarshal(data, &out); err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("JSON read back %+v, %v; want %+v", out, err, in)
	}
	var ls Limits
	if err := ls.UnmarshalText([]byte("tpm=100,mpd=5")); err == nil || !strings.Contains(err.Error(), "limit mpd is a budget of money: set it as a budget") {
		t.Fatalf("a budget among the limits: %v", err)
	}
}

// A flow's own budget: its calls wait for it while the other flows go on,
// even on a key whose day limit is nearly full, and a call that can never
// fit it is refused naming the flow.
func TestFlowBudgetHoldsOnlyItsFlow(t *testing.T) {
	t.Parallel()
	cfg := Config{Key: "k", Price: price, DayBurst: -1,
		Limits: Limits{TPD: 100_000},
		Flows:  []FlowConfig{{Name: "capped", Weight: 4, Budget: Budget{Day: 0.01}}, {Name: "free"}}}
	var journal []Charge
	cfg.Journal = func(c Charge) { journal = append(journal, c) }
	g := mustNew(t, cfg)
	call := Cost{Requests: 1, Input: 4000} // $0.004, 4,000 of the day's tokens
	capped := []*Reservation{mustReserve(t, g, t0, "capped", call), mustReserve(t, g, t0, "capped", call), mustReserve(t, g, t0, "capped", call)}
	var free []*Reservation
	for range 20 {
		free = append(free, mustReserve(t, g, t0, "free", call))
	}
	g.Advance(t0)
	if !capped[0].Admitted() || !capped[1].Admitted() || capped[2].Admitted() {
		t.Fatalf("capped flow admitted %v %v %v, want two ($0.008 of $0.01)", capped[0].Admitted(), capped[1].Admitted(), capped[2].Admitted())
	}
	for i, r := range free {
		if !r.Admitted() {
			t.Fatalf("free call %d waits behind a flow that waits for its own budget", i)
		}
	}
	if bl := g.Blocker(t0, capped[2]); bl.Kind != "budget" || bl.Limit != MPD || bl.String() != "the flow's mpd" {
		t.Fatalf("the capped flow's third call waits on %+v (%s), want its budget mpd", bl, bl)
	}
	st := g.Stats(t0)
	for _, f := range st.Flows {
		if f.Name == "capped" && (f.Budget[MPD] != Nano/100 || f.Spent[MPD] != 8_000_000) {
			t.Fatalf("capped flow's stats: budget %d, spent %d", f.Budget[MPD], f.Spent[MPD])
		}
	}
	// A day later the first charges age out.
	g.Advance(at(24*time.Hour + time.Second))
	if !capped[2].Admitted() {
		t.Fatal("the capped flow's third call is not admitted once a day has passed")
	}
	// A call over the flow's whole budget: refused, naming the flow.
	_, err := g.Reserve(t0.Add(25*time.Hour), "capped", Cost{Requests: 1, Input: 12_000})
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Flow != "capped" || tl.Limit != MPD ||
		!strings.Contains(err.Error(), `the budget of money per day of flow "capped" is 0.01`) {
		t.Fatalf("a call over the flow's budget: %v", err)
	}
	// After a restart the flow's spend is back.
	h := mustNew(t, cfg)
	h.Restore(at(24*time.Hour+2*time.Second), journal)
	// $0.004 of the day was spent before it: one more call fits, not two.
	r1 := mustReserve(t, h, at(24*time.Hour+2*time.Second), "capped", call)
	r2 := mustReserve(t, h, at(24*time.Hour+2*time.Second), "capped", call)
	h.Advance(at(24*time.Hour + 2*time.Second))
	if !r1.Admitted() || r2.Admitted() {
		t.Fatalf("after a restart: admitted %v %v, want the first only", r1.Admitted(), r2.Admitted())
	}
	if _, err := New(Config{Flows: []FlowConfig{{Name: "x", Budget: Budget{Day: 1}}}}); err == nil || !strings.Contains(err.Error(), `flow "x": a budget needs the key's price`) {
		t.Fatalf("a flow budget without a price: %v", err)
	}
}

// A flow waiting for its own budget for hours does not hold back the
// others' calls on the key's day limit: without a budget of its own, the
// first call in fair order keeps the room it will need (backfilling admits
// no call that would push it later), but a call that waits for its flow's
// budget waits on nothing the others take.
func TestFlowBudgetDoesNotHoldTheKey(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Key: "k", Price: price, DayBurst: -1, Limits: Limits{TPD: 40_000},
		Flows: []FlowConfig{{Name: "capped", Weight: 8, Budget: Budget{Day: 0.003}}, {Name: "free"}}})
	first := mustReserve(t, g, t0, "capped", Cost{Requests: 1, Input: 1000}) // $0.001, 1,000 of the day's tokens
	g.Advance(t0)
	if !first.Admitted() {
		t.Fatal("the capped flow's first call is not admitted")
	}
	// An hour later the capped flow's next call ($0.003) waits a day for
	// its budget, ahead in fair order; the free flow's calls would fill the
	// key's day so that the capped call would not fit when its budget does.
	later := at(time.Hour)
	second := mustReserve(t, g, later, "capped", Cost{Requests: 1, Input: 3000})
	var free []*Reservation
	for range 39 {
		free = append(free, mustReserve(t, g, later, "free", Cost{Requests: 1, Input: 1000}))
	}
	g.Advance(later)
	if second.Admitted() {
		t.Fatal("the capped flow went past its budget")
	}
	for i, r := range free {
		if !r.Admitted() {
			t.Fatalf("free call %d of 39 waits while the key has room for it (%v)", i, g.Blocker(later, r))
		}
	}
}
