package ui_test

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/ui"
)

// overviewUI is a dashboard of two keys: groq with rpm, tpm and tpd in
// force (itpm, otpm and rpd not), summaries waiting on tpm and titles
// held back by the day pacer of tpd; and openai with rpm alone. The
// history has a sample a minute for the last day of each flow.
func overviewUI(t *testing.T, asked *[]string) http.Handler {
	var mu sync.Mutex
	groq := keyStats("groq", map[governor.Limit][2]int64{governor.RPM: {30, 12}, governor.TPM: {8000, 6000}, governor.TPD: {1_000_000, 250_000}},
		governor.FlowStats{Name: "summaries", Weight: 3, Share: 3, Waiting: 2, Admitted: 700, Tokens: governor.Cost{Input: 5000, Output: 1200},
			WaitingOn:  governor.Blocker{Kind: "limit", Limit: governor.TPM, Until: now.Add(20 * time.Second)},
			Rejections: [governor.NumLimits]int64{governor.TPM: 4}, Refusals: [governor.NumLimits]int64{governor.TPM: 1}},
		governor.FlowStats{Name: "titles", Weight: 1, Share: 1, Waiting: 1, Admitted: 90,
			WaitingOn:  governor.Blocker{Kind: "pacing", Limit: governor.TPD, Until: now.Add(3 * time.Minute)},
			Rejections: [governor.NumLimits]int64{governor.TPM: 2, governor.OTPM: 5}})
	openai := keyStats("openai", map[governor.Limit][2]int64{governor.RPM: {500, 500}},
		governor.FlowStats{Name: "chat", Weight: 1, Share: 1, Waiting: 3, WaitingOn: governor.Blocker{Kind: "pause", Until: now.Add(time.Second)}})
	return newUI(t, ui.Config{
		Keys: func(_ context.Context, at time.Time) []governor.Stats {
			if !at.Equal(now) {
				t.Errorf("Keys at %s, want the clock's %s", at, now)
			}
			return []governor.Stats{openai, groq} // the page sorts them
		},
		Health: &fakeHealth{FlowsFunc: func() []health.Flow {
			return []health.Flow{{Name: "summaries", State: health.WaitingForQuota}, {Name: "titles", State: health.Progressing}}
		}},
		History: &fakeHistory{SamplesFunc: func(_ context.Context, since, until time.Time, flow string) ([]store.Sample, error) {
			mu.Lock()
			*asked = append(*asked, flow)
			mu.Unlock()
			if !since.Equal(now.Add(-24*time.Hour)) || until.Before(now) {
				t.Errorf("Samples of %s over [%s, %s), want the last 24 h", flow, since, until)
			}
			var out []store.Sample
			for at := since.Add(time.Minute); at.Before(until); at = at.Add(time.Minute) {
				s := store.Sample{At: at, Flow: flow, Source: "app", Admitted: 2, Tokens: 400}
				if flow == "summaries" && at.Equal(now.Add(-2*time.Hour)) {
					s.Rejections = map[string]int64{"tpm": 3}
				}
				out = append(out, s)
			}
			return out, nil
		}},
	}, nil)
}

func TestOverviewShowsEachLimitInForce(t *testing.T) {
	t.Parallel()
	var asked []string
	h := overviewUI(t, &asked)
	_, page := get(t, h, "/")
	for _, tc := range []struct {
		key, limit string
		used, max  string
		want       []string
	}{
		{"groq", "rpm", "12", "30", []string{"12 / 30 requests", "40%", "18 left", "requests per minute", "Nothing waits on it"}},
		{"groq", "tpm", "6000", "8000", []string{"6,000 / 8,000 tokens", "75%", "2,000 left", "window full", "2 calls of summaries wait until 2026-03-04 12:00:20Z"}},
		{"groq", "tpd", "250000", "1000000", []string{"250,000 / 1,000,000 tokens", "25%", "day pacing", "1 call of titles waits until 2026-03-04 12:03:00Z"}},
		{"openai", "rpm", "500", "500", []string{"500 / 500 requests", "100%", "0 left"}},
	} {
		g := page.one(t, "gauge "+tc.key+"/"+tc.limit, func(n node) bool {
			return n.Attrs["data-key"] == tc.key && n.Attrs["data-limit"] == tc.limit && classed("gauge")(n)
		})
		if g.Attrs["data-used"] != tc.used || g.Attrs["data-max"] != tc.max {
			t.Errorf("gauge %s/%s: data-used %q data-max %q, want %s and %s", tc.key, tc.limit, g.Attrs["data-used"], g.Attrs["data-max"], tc.used, tc.max)
		}
		hasText(t, "gauge "+tc.key+"/"+tc.limit, g, tc.want...)
		resets := now.Add((map[string]time.Duration{"rpm": time.Minute, "tpm": time.Minute, "tpd": 24 * time.Hour}[tc.limit]) / 2)
		hasText(t, "gauge "+tc.key+"/"+tc.limit, g, "resets "+resets.Format("2006-01-02 15:04:05Z"))
	}
	// Limits whose Max is 0 are not in force: no gauge.
	for _, l := range []string{"rpd", "itpm", "otpm"} {
		if n := page.all(with("data-limit", l)); len(n) != 0 {
			t.Errorf("%d gauges of %s, a limit not in force", len(n), l)
		}
	}
	if n := page.all(func(n node) bool { return n.Attrs["data-key"] == "openai" && classed("gauge")(n) }); len(n) != 1 {
		t.Errorf("openai shows %d gauges, want its one limit", len(n))
	}
	// The bar of a full limit is full, and says so.
	full := page.one(t, "openai's rpm bar", func(n node) bool { return n.Name == "svg" && classed("level-full")(n) })
	if w := full.all(classed("fill"))[0].Attrs["width"]; w != "100" {
		t.Errorf("a full limit's bar is %s wide, want 100", w)
	}
	// Waits on no one limit are named too.
	key := page.one(t, "key openai", func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] == "openai" })
	hasText(t, "openai's holds", key.one(t, "holds", classed("holds")), "3 calls of chat wait for a provider pause")
	// Keys in name order.
	var keys []string
	for _, s := range page.all(func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] != "" }) {
		keys = append(keys, s.Attrs["data-key"])
	}
	if strings.Join(keys, ",") != "groq,openai" {
		t.Errorf("keys in order %q, want groq, openai", keys)
	}
	// Each flow's samples were read on its own.
	if strings.Join(slices.Sorted(slices.Values(asked)), ",") != "chat,summaries,titles" {
		t.Errorf("samples read of %q, want each flow's once", asked)
	}
}

func TestOverviewChartsRejectionsAndFlows(t *testing.T) {
	t.Parallel()
	var asked []string
	h := overviewUI(t, &asked)
	_, page := get(t, h, "/")
	groq := page.one(t, "key groq", func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] == "groq" })

	// The chart: a line per limit in force, against the limit at 100 %.
	svg := groq.one(t, "chart", func(n node) bool { return n.Name == "svg" && n.Attrs["viewBox"] != "" && n.Attrs["width"] == "960" })
	var series []string
	for _, s := range svg.all(classed("series")) {
		series = append(series, s.Attrs["data-series"])
	}
	if strings.Join(series, ",") != "rpm,tpm,tpd" {
		t.Errorf("chart series %q, want rpm, tpm, tpd", series)
	}
	// The y-axis stops at 200 % of a limit, whatever a day limit's burst.
	ticks := svg.all(classed("ytick"))
	if len(ticks) == 0 || ticks[len(ticks)-1].text() != "200" {
		t.Errorf("y ticks %v, want the top at 200", ticks)
	}
	if n := svg.all(classed("refline")); len(n) != 1 {
		t.Errorf("%d reference lines, want the limit's", len(n))
	}
	marks := svg.all(classed("mark"))
	if len(marks) != 1 || !strings.Contains(marks[0].text(), "3 × rejected: tpm") {
		t.Errorf("chart marks %v, want one of 3 tpm rejections", marks)
	}
	hasText(t, "chart", groq.one(t, "chart figure", func(n node) bool { return n.Name == "figure" }), "groq: use per limit, last 24 h", "% of limit")
	// The two charts of the page do not share clip path ids.
	clips := page.all(func(n node) bool { return n.Name == "clipPath" })
	seen := map[string]bool{}
	for _, c := range clips {
		if seen[c.Attrs["id"]] {
			t.Errorf("clip path id %q twice on the page", c.Attrs["id"])
		}
		seen[c.Attrs["id"]] = true
	}
	if len(clips) != 2 {
		t.Errorf("%d clip paths, want a chart per key", len(clips))
	}

	// Rejections by limit, summed over the key's flows; otpm is not in
	// force but was named by the provider.
	for _, tc := range []struct {
		limit string
		want  []string
	}{
		{"tpm", []string{"tpm", "6", "1", "3"}},
		{"rpm", []string{"rpm", "0"}},
		{"otpm", []string{"otpm (not configured)", "5"}},
	} {
		row := groq.one(t, "rejections of "+tc.limit, with("data-rejections-limit", tc.limit))
		hasText(t, "rejections of "+tc.limit, row, tc.want...)
	}
	if got := groq.one(t, "tpm rejections", with("data-rejections-limit", "tpm")).text(); got != "tpm 6 1 3" {
		t.Errorf("tpm rejections row %q, want %q", got, "tpm 6 1 3")
	}

	// Each flow's share of the key, calls waiting and admitted rate (2 a
	// minute in the samples: 120 an hour), and its job's progress (the
	// health monitor's flows have no items here: no rate, no time left).
	for _, tc := range []struct{ flow, row string }{
		{"summaries", "summaries 3 0 75% 2 0 700 120 6,200 0 / 0 (0%) — — tpm until 2026-03-04 12:00:20Z in 20 s"},
		{"titles", "titles 1 0 25% 1 0 90 120 0 0 / 0 (0%) — — tpd pacing until 2026-03-04 12:03:00Z in 3m 0s"},
	} {
		row := groq.one(t, "flow row "+tc.flow, func(n node) bool { return n.Name == "tr" && n.Attrs["data-flow"] == tc.flow })
		if got := row.text(); got != tc.row {
			t.Errorf("flow row %s: %q, want %q", tc.flow, got, tc.row)
		}
	}
	// The flows by state.
	hasText(t, "states", page.one(t, "states", classed("states")), "waiting-for-quota 1", "progressing 1")
}

func TestOverviewWithoutSources(t *testing.T) {
	t.Parallel()
	h := newUI(t, ui.Config{}, nil)
	_, page := get(t, h, "/")
	hasText(t, "overview", page, "No provider key is configured")
	// A key without samples has no chart, and says why.
	h = newUI(t, ui.Config{
		Keys: func(context.Context, time.Time) []governor.Stats {
			return []governor.Stats{keyStats("groq", map[governor.Limit][2]int64{governor.RPM: {30, 1}}, governor.FlowStats{Name: "f"})}
		},
		History: &fakeHistory{SamplesFunc: func(context.Context, time.Time, time.Time, string) ([]store.Sample, error) { return nil, nil }},
	}, nil)
	_, page = get(t, h, "/")
	hasText(t, "overview", page, "No samples were recorded in the last 24 hours")
	if n := page.all(func(n node) bool { return n.Name == "figure" }); len(n) != 0 {
		t.Errorf("a chart without samples")
	}
}

// A flow sampled every 10 minutes at a steady 100 tokens and 2 calls a
// minute is drawn at that rate in every 5-minute bucket, not at twice it in
// every other bucket; a sample after the process was down covers the usual
// interval, not the gap.
func TestUseSpreadsSamplesOverTheirInterval(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
	const n = 36 // three hours of buckets
	var samples []store.Sample
	for m := 10; m <= 60; m += 10 {
		samples = append(samples, store.Sample{At: start.Add(time.Duration(m) * time.Minute), Flow: "summaries", Source: "app", Admitted: 20, Tokens: 1000})
	}
	// Down from 1 h to 2 h 30: the first sample after the start covers 10 minutes.
	samples = append(samples, store.Sample{At: start.Add(160 * time.Minute), Flow: "summaries", Source: "app", Admitted: 20, Tokens: 1000})
	// Another flow, sampled every 5 minutes, adds its own.
	for m := 5; m <= 30; m += 5 {
		samples = append(samples, store.Sample{At: start.Add(time.Duration(m) * time.Minute), Flow: "titles", Source: "app", Admitted: 1, Tokens: 50})
	}
	requests, tokens, seen := ui.UseOf(samples, start, n)
	for b := range n {
		wantTokens, wantCalls, wantSeen := 0.0, 0.0, false
		switch {
		case b < 6: // 0–30 min: both flows
			wantTokens, wantCalls, wantSeen = 550, 11, true
		case b < 12: // 30–60 min: summaries alone
			wantTokens, wantCalls, wantSeen = 500, 10, true
		case b == 30 || b == 31: // 2 h 30 – 2 h 40
			wantTokens, wantCalls, wantSeen = 500, 10, true
		}
		if math.Abs(tokens[b]-wantTokens) > 1e-9 || math.Abs(requests[b]-wantCalls) > 1e-9 || seen[b] != wantSeen {
			t.Errorf("bucket %d: %v tokens, %v calls, seen %v; want %v, %v, %v", b, tokens[b], requests[b], seen[b], wantTokens, wantCalls, wantSeen)
		}
	}
}

// On a process of a cluster, the overview lists each flow of a key on
// every process, with the sum where it runs on several; a key of no
// cluster has no such table.
func TestOverviewShowsTheClustersFlows(t *testing.T) {
	t.Parallel()
	h := newUI(t, ui.Config{
		Keys: func(context.Context, time.Time) []governor.Stats {
			return []governor.Stats{
				keyStats("groq", map[governor.Limit][2]int64{governor.RPM: {30, 1}}, governor.FlowStats{Name: "summary"}),
				keyStats("openai", map[governor.Limit][2]int64{governor.RPM: {30, 1}}, governor.FlowStats{Name: "chat"}),
			}
		},
		Cluster: func(_ context.Context, key string) ([]ui.ClusterFlow, error) {
			if key != "groq" {
				return nil, nil
			}
			return []ui.ClusterFlow{
				{Node: "n2", Flow: "summary", Waiting: 2, Admitted: 5, Tokens: 700},
				{Node: "n2", Flow: "title", Waiting: 1, Admitted: 0},
				{Node: "n1", Flow: "summary", Waiting: 1, Admitted: 4, Tokens: 300},
			}, nil
		},
	}, nil)
	_, page := get(t, h, "/")
	rows := page.all(func(n node) bool { return n.Name == "tr" && n.Attrs["data-cluster-flow"] != "" })
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join(strings.Fields(r.text()), " "))
	}
	want := []string{"summary n1 1 4 300", "summary n2 2 5 700", "summary all nodes 3 9 1,000", "title n2 1 0 0"}
	if !slices.Equal(got, want) {
		t.Errorf("the cluster's rows %q, want %q", got, want)
	}
	openai := page.one(t, "key openai", func(n node) bool { return n.Name == "section" && n.Attrs["data-key"] == "openai" })
	if len(openai.all(classed("cluster-flows"))) != 0 {
		t.Error("a key of no cluster shows a cluster's table")
	}
}
