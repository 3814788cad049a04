package ui_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/ui"
)

// spendUI is a dashboard of a priced key, groq, with budgets of 5.00 a
// day (3.84 spent) and 100.00 a month (38.40 spent) besides rpm; its flow
// summary has its own budget of 2.00 a day (1.92 spent) and has cost 4.10
// since the process started, title has none. Each flow has a sample every
// 10 minutes of the last day: summary 0.01 each, title 0.005. A second
// key, free, has no price.
func spendUI(t *testing.T) *struct{ groq, free governor.Stats } {
	t.Helper()
	groq := keyStats("groq", map[governor.Limit][2]int64{
		governor.RPM: {30, 12}, governor.MPD: {5 * governor.Nano, 3_840_000_000}, governor.MPM: {100 * governor.Nano, 38_400_000_000}},
		governor.FlowStats{Name: "summary", Weight: 1, Share: 1, Admitted: 410, Tokens: governor.Cost{Input: 4000, Output: 100, Money: 4_100_000_000},
			Budget: governor.Limits{governor.MPD: 2 * governor.Nano}, Spent: governor.Limits{governor.MPD: 1_920_000_000}},
		governor.FlowStats{Name: "title", Weight: 1, Share: 1, Admitted: 30, Tokens: governor.Cost{Input: 300, Money: 720_000_000}})
	groq.Priced = true
	free := keyStats("free", map[governor.Limit][2]int64{governor.RPM: {60, 1}}, governor.FlowStats{Name: "chat", Weight: 1, Share: 1, Admitted: 3})
	return &struct{ groq, free governor.Stats }{groq, free}
}

func spendHistory() ui.History {
	return &fakeHistory{SamplesFunc: func(_ context.Context, since, until time.Time, flow string) ([]store.Sample, error) {
		var out []store.Sample
		for at := since.Add(10 * time.Minute); at.Before(until); at = at.Add(10 * time.Minute) {
			s := store.Sample{At: at, Flow: flow, Source: "app", Admitted: 1, Tokens: 100}
			switch flow {
			case "summary":
				s.Money, s.Priced = governor.Nano/100, true
			case "title":
				s.Money, s.Priced = governor.Nano/200, true
			}
			out = append(out, s)
		}
		return out, nil
	}}
}

// TestOverviewShowsSpendAgainstBudgets: a priced key's overview shows its
// budgets per day and month as gauges in money, with when each resets;
// each flow's spend and its own budget; and a chart of the last day's
// spend with the budgets per day as lines. The key without a price looks
// as before: no spend, no money.
func TestOverviewShowsSpendAgainstBudgets(t *testing.T) {
	t.Parallel()
	keys := spendUI(t)
	h := newUI(t, ui.Config{
		Keys: func(context.Context, time.Time) []governor.Stats { return []governor.Stats{keys.groq, keys.free} },
		Health: &fakeHealth{FlowsFunc: func() []health.Flow {
			return []health.Flow{{Name: "summary", State: health.Progressing}}
		}},
		History: spendHistory(),
	}, nil)
	_, page := get(t, h, "/")
	groq := page.one(t, "key groq", func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] == "groq" && classed("key")(n) })
	spend := groq.one(t, "groq's spend", func(n node) bool { return n.Name == "section" && classed("spend")(n) })

	// The key's budgets, in money, with their resets: a day after now at
	// the latest for the day's, 15 days for the month's (keyStats puts
	// each reset half a period ahead).
	for _, tc := range []struct {
		limit, used, max string
		want             []string
	}{
		{"mpd", "3840000000", "5000000000", []string{"money per day", "3.84 / 5.00 money", "77%", "1.16 left", "resets " + now.Add(12*time.Hour).Format("2006-01-02 15:04:05Z")}},
		{"mpm", "38400000000", "100000000000", []string{"money per month", "38.40 / 100.00 money", "38%", "61.60 left", "resets " + now.Add(15*24*time.Hour).Format("2006-01-02 15:04:05Z")}},
	} {
		g := spend.one(t, "budget gauge "+tc.limit, func(n node) bool { return classed("gauge")(n) && n.Attrs["data-limit"] == tc.limit })
		if g.Attrs["data-used"] != tc.used || g.Attrs["data-max"] != tc.max || g.Attrs["data-key"] != "groq" {
			t.Errorf("budget gauge %s: data-used %q data-max %q, want %s and %s", tc.limit, g.Attrs["data-used"], g.Attrs["data-max"], tc.used, tc.max)
		}
		hasText(t, "budget gauge "+tc.limit, g, tc.want...)
	}
	// The budgets are not among the limits' gauges, which stay in units.
	var limits []string
	for _, g := range groq.all(classed("gauge")) {
		limits = append(limits, g.Attrs["data-limit"])
	}
	if !slices.Equal(limits, []string{"rpm", "mpd", "mpm"}) {
		t.Errorf("groq's gauges %q, want rpm among the limits, then the budgets", limits)
	}
	hasText(t, "groq's rpm", groq.one(t, "rpm gauge", with("data-limit", "rpm")), "12 / 30 requests")

	// Each flow's spend: since the start, over the last day of samples
	// (144 samples: 1.44 and 0.72), and against its own budget.
	for _, tc := range []struct{ flow, row string }{
		{"summary", "summary 4.10 1.44 1.92 / 2.00 money per day 96%"},
		{"title", "title 0.72 0.72 —"},
	} {
		row := spend.one(t, "spend of "+tc.flow, with("data-spend-flow", tc.flow))
		if got := strings.Join(strings.Fields(row.text()), " "); got != tc.row {
			t.Errorf("spend of %s: %q, want %q", tc.flow, got, tc.row)
		}
	}
	budget := spend.one(t, "summary's budget", classed("flow-budget"))
	if budget.Attrs["data-limit"] != "mpd" || budget.Attrs["data-used"] != "1920000000" || budget.Attrs["data-max"] != "2000000000" || !classed("level-high")(budget) {
		t.Errorf("summary's budget: %v, want mpd, 1.92 of 2.00, high", budget.Attrs)
	}

	// The chart: each flow's spend since 24 h ago and all of it, in
	// money, against the key's budget per day and summary's own.
	figure := spend.one(t, "spend chart", func(n node) bool { return n.Name == "figure" })
	svg := figure.one(t, "spend chart svg", func(n node) bool { return n.Name == "svg" && n.Attrs["width"] == "960" })
	var series []string
	for _, s := range svg.all(classed("series")) {
		series = append(series, s.Attrs["data-series"])
	}
	if strings.Join(series, ",") != "all flows,summary,title" {
		t.Errorf("spend chart series %q, want all flows, summary, title", series)
	}
	var lines []string
	for _, l := range svg.all(classed("refline-label")) {
		lines = append(lines, l.text())
	}
	if !slices.Equal(lines, []string{"key's budget per day 5.00", "summary's budget per day 2.00"}) {
		t.Errorf("spend chart lines %q", lines)
	}
	hasText(t, "spend chart", figure, "groq: spend, last 24 h", "Money spent since 24 h ago, cumulative", "money", "unit of the key's prices")
	// Its y-axis reaches the key's budget, 5.00.
	ticks := svg.all(classed("ytick"))
	if len(ticks) == 0 || ticks[len(ticks)-1].text() != "5" {
		t.Errorf("spend chart y ticks %v, want the top at 5", ticks)
	}
	// The page's charts (use, spend) share no clip path id.
	seen := map[string]bool{}
	for _, c := range page.all(func(n node) bool { return n.Name == "clipPath" }) {
		if seen[c.Attrs["id"]] {
			t.Errorf("clip path id %q twice on the page", c.Attrs["id"])
		}
		seen[c.Attrs["id"]] = true
	}
	if len(seen) != 3 {
		t.Errorf("%d charts, want groq's use and spend and free's use", len(seen))
	}
	// The use chart draws no budget: money is the spend chart's.
	use := groq.one(t, "use chart", func(n node) bool {
		return n.Name == "figure" && !classed("spend-chart")(n)
	})
	var used []string
	for _, s := range use.all(classed("series")) {
		used = append(used, s.Attrs["data-series"])
	}
	if strings.Join(used, ",") != "rpm" {
		t.Errorf("use chart series %q, want rpm alone", used)
	}

	// The key without a price: no spend, no money.
	free := page.one(t, "key free", func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] == "free" && classed("key")(n) })
	if n := free.all(classed("spend")); len(n) != 0 {
		t.Errorf("the unpriced key shows a spend")
	}
	if strings.Contains(free.text(), "money") || strings.Contains(free.text(), "Spend") {
		t.Errorf("the unpriced key speaks of money: %s", free.text())
	}
}

// A priced key without a budget shows what it spent in the last 24 hours
// instead of a gauge; one whose only limits are budgets does not say that
// no limit is in force.
func TestOverviewSpendWithoutBudgets(t *testing.T) {
	t.Parallel()
	noBudget := keyStats("groq", map[governor.Limit][2]int64{governor.RPM: {30, 1}},
		governor.FlowStats{Name: "summary", Tokens: governor.Cost{Money: 500_000_000}})
	noBudget.Priced = true
	noBudget.Limits[governor.MPD].Used = 250_000_000 // counted without a budget
	onlyBudgets := keyStats("thrifty", map[governor.Limit][2]int64{governor.MPD: {governor.Nano, 0}}, governor.FlowStats{Name: "chat"})
	onlyBudgets.Priced = true
	h := newUI(t, ui.Config{Keys: func(context.Context, time.Time) []governor.Stats { return []governor.Stats{noBudget, onlyBudgets} }}, nil)
	_, page := get(t, h, "/")
	groq := page.one(t, "key groq", func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] == "groq" && classed("key")(n) })
	hasText(t, "groq's spend", groq.one(t, "spend", classed("spend")), "Spent in the last 24 hours: 0.25 money (no budget per day)")
	if n := groq.all(classed("budget")); len(n) != 0 {
		t.Errorf("%d budget gauges on a key without a budget", len(n))
	}
	thrifty := page.one(t, "key thrifty", func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] == "thrifty" && classed("key")(n) })
	if strings.Contains(thrifty.text(), "No limit of this key is in force") {
		t.Error("a key with a budget says no limit is in force")
	}
	hasText(t, "thrifty's budget", thrifty.one(t, "mpd", with("data-limit", "mpd")), "0.00 / 1.00 money", "1.00 left")
}
