package report

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// seedHistory is DevPick's 17–19 October as sluice's records would hold
// it: the English titles stalled behind the summaries; the 18 October fix
// (titles first, smaller batches) does not move them, since every title
// request is too large for OTPM; the 19 October fix (max_tokens on every
// call) does. Samples are a minute apart.
func seedHistory() (since, until time.Time, samples []store.Sample, versions []store.ConfigVersion) {
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	since, until = at("2026-10-17T12:00:00Z"), at("2026-10-19T20:00:00Z")
	fix18, fix19 := at("2026-10-18T07:30:00Z"), at("2026-10-19T09:00:00Z")
	config := func(titleFirst bool, summaryBatch, titleBatch, maxTokens int) json.RawMessage {
		b, _ := json.Marshal(map[string]any{
			"limits": map[string]int{"rpm": 30, "tpm": 8000, "tpd": 200000, "otpm": 1000},
			"flows": []map[string]any{
				{"name": "summary", "batch_max": summaryBatch, "max_tokens": maxTokens, "first": !titleFirst},
				{"name": "title", "batch_max": titleBatch, "max_tokens": maxTokens, "first": titleFirst},
			},
		})
		return b
	}
	versions = []store.ConfigVersion{
		{At: at("2026-10-17T10:00:00Z"), Source: "app", Hash: "v17", Code: "a1", Config: config(false, 30, 10, 0)},
		{At: fix18, Source: "app", Hash: "v18", Code: "b2", Config: config(true, 2, 5, 0)},
		{At: fix19, Source: "app", Hash: "v19", Code: "c3", Config: config(true, 2, 5, 60)},
	}
	// Items per hour of each job in each stretch.
	rates := func(t time.Time) (summary, title int) {
		switch {
		case t.Before(fix18):
			return 10, 0
		case t.Before(fix19):
			return 4, 0
		default:
			return 4, 12
		}
	}
	perMinute := func(rate, m int) int64 { return int64(rate*(m+1)/60 - rate*m/60) }
	for t, m := since.Add(time.Minute), 0; t.Before(until); t, m = t.Add(time.Minute), m+1 {
		s, ti := rates(t.Add(-time.Minute)) // the interval the sample ends
		titleState, reason := "progressing", ""
		var rejections map[string]int64
		if ti == 0 {
			titleState, reason = "stalled", "1,412 items eligible, none processed for 2h"
			if !t.Before(fix18) && m%60 == 0 {
				rejections = map[string]int64{"otpm": 1}
			}
		}
		samples = append(samples,
			store.Sample{At: t, Flow: "summary", Source: "app", State: "progressing", Done: perMinute(s, m), Remaining: 6000},
			store.Sample{At: t, Flow: "title", Source: "app", State: titleState, Reason: reason, Done: perMinute(ti, m), Remaining: 1412, Rejections: rejections},
		)
	}
	return since, until, samples, versions
}

func TestAttributesRecovery(t *testing.T) {
	since, until, samples, versions := seedHistory()
	r, err := Make(since, until, samples, versions)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Versions) != 3 || r.Versions[0].Hash != "v17" || len(r.Versions[0].Diff) != 0 {
		t.Fatalf("versions %+v: want v17 in effect at the start, then two changes", r.Versions)
	}
	if len(r.Changes) != 2 || r.Changes[0].Hash != "v18" || r.Changes[1].Hash != "v19" {
		t.Fatalf("changes %+v", r.Changes)
	}
	c18, c19 := r.Changes[0], r.Changes[1]
	if !slices.Contains(c19.Diff, "flows.title.max_tokens: 0 → 60") || !slices.Contains(c18.Diff, "flows.summary.batch_max: 30 → 2") ||
		!slices.Contains(c18.Diff, "code: a1 → b2") {
		t.Errorf("diffs: 18 %q, 19 %q", c18.Diff, c19.Diff)
	}
	if d := c18.Jobs["title"]; d.Before != 0 || d.After != 0 || !d.StalledBefore || !d.StalledAfter {
		t.Errorf("title across the 18th: %+v: want 0 → 0, stalled on both sides", d)
	}
	if d := c18.Jobs["summary"]; d.Before != 10 || d.After != 4 || d.Difference != -6 {
		t.Errorf("summary across the 18th: %+v: want 10 → 4", d)
	}
	// 12 an hour, but for the last minute's sample: it ends at the
	// window's end, outside it.
	if d := c19.Jobs["title"]; d.Before != 0 || math.Abs(d.After-12) > 0.1 || d.Difference != d.After || d.StalledAfter {
		t.Errorf("title across the 19th: %+v: want 0 → about 12, not stalled after", d)
	}
	if !slices.Equal(c19.Helped, []string{"title"}) || len(c18.Helped) != 0 {
		t.Errorf("helped: 18 %q, 19 %q: want the titles' recovery on the 19th's change", c18.Helped, c19.Helped)
	}
	title := r.Jobs["title"]
	// Stalled from the window's start until the 19th's fix took.
	if len(title.Stalls) != 1 || !title.Stalls[0].From.Equal(since.Add(time.Minute)) || !title.Stalls[0].To.Equal(c19.At.Add(time.Minute)) ||
		!strings.Contains(title.Stalls[0].Reason, "none processed") {
		t.Errorf("title stalls %+v", title.Stalls)
	}
	if title.Rejections["otpm"] != 25 || title.State != "progressing" {
		t.Errorf("title rejections %v state %q: want otpm=25 (one an hour from 08:01 on the 18th to 08:01 on the 19th), progressing", title.Rejections, title.State)
	}
	if len(title.Hours) != 56 || title.Hours[55].Done != 12 || title.Hours[0].Done != 0 {
		t.Errorf("title hours: %d, last %+v", len(title.Hours), title.Hours[len(title.Hours)-1])
	}
	if _, err := Make(until, since, nil, nil); err == nil {
		t.Error("a window that ends before it starts: no error")
	}
}

// spendHistory is two days of a priced key's jobs, sampled every ten
// minutes: "summary" spends 0.01 a sample (1.44 a day) under its own
// budget of 2.00 a day and the key's of 5.00 a day and 100.00 a month;
// "title" is on a key without a price.
func spendHistory() (since, until time.Time, samples []store.Sample) {
	since = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	until = since.Add(48 * time.Hour)
	var flowDay, keyDay, keyMonth int64 = 0, 0, 30 * governor.Nano
	for at := since.Add(10 * time.Minute); at.Before(until); at = at.Add(10 * time.Minute) {
		const cost = governor.Nano / 100
		flowDay, keyDay, keyMonth = min(flowDay+cost, 144*cost), min(keyDay+2*cost, 288*cost), keyMonth+2*cost
		samples = append(samples,
			store.Sample{At: at, Flow: "summary", Source: "app", State: "progressing", Done: 1, Money: cost, Priced: true,
				Budgets: []store.SampleBudget{
					{Limit: "mpm", Key: true, Max: 100 * governor.Nano, Spent: keyMonth},
					{Limit: "mpd", Key: true, Max: 5 * governor.Nano, Spent: keyDay},
					{Limit: "mpd", Max: 2 * governor.Nano, Spent: flowDay},
				}},
			store.Sample{At: at, Flow: "title", Source: "app", State: "progressing", Done: 2})
	}
	return since, until, samples
}

func TestSpendAgainstBudgets(t *testing.T) {
	since, until, samples := spendHistory()
	r, err := Make(since, until, samples, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sp := r.Jobs["title"].Spend; sp != nil {
		t.Errorf("the unpriced job has a spend: %+v", sp)
	}
	sp := r.Jobs["summary"].Spend
	// 287 samples in the window (the one at its end is outside it).
	if sp == nil || sp.SpentNano != 2_870_000_000 || sp.PerDayNano != 1_435_000_000 {
		t.Fatalf("summary's spend %+v: want 2.87 in the window, 1.435 a day", sp)
	}
	last := until.Add(-10 * time.Minute)
	want := []BudgetUse{
		{Of: "flow", Limit: "mpd", Period: "day", BudgetNano: 2 * governor.Nano, SpentNano: 1_440_000_000, Ratio: 0.72, At: last},
		{Of: "key", Limit: "mpd", Period: "day", BudgetNano: 5 * governor.Nano, SpentNano: 2_880_000_000, Ratio: 0.576, At: last},
		{Of: "key", Limit: "mpm", Period: "month", BudgetNano: 100 * governor.Nano, SpentNano: 35_740_000_000, Ratio: 0.3574, At: last},
	}
	if !slices.Equal(sp.Budgets, want) {
		t.Errorf("summary's budgets:\n%+v\nwant\n%+v", sp.Budgets, want)
	}
	hours := r.Jobs["summary"].Hours
	if len(hours) != 48 || hours[0].MoneyNano != 50_000_000 || hours[1].MoneyNano != 60_000_000 || r.Jobs["title"].Hours[1].MoneyNano != 0 {
		t.Errorf("summary's money per hour: %d hours, first %+v, second %+v", len(hours), hours[0], hours[1])
	}
	b, err := json.Marshal(r.Jobs["summary"])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"spent_nano":2870000000`, `"per_day_nano":1435000000`, `"of":"flow","limit":"mpd","period":"day","budget_nano":2000000000,"spent_nano":1440000000,"ratio":0.72`, `"money_nano":60000000`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON without %s:\n%s", want, b)
		}
	}
	if b, _ := json.Marshal(r.Jobs["title"]); strings.Contains(string(b), "spend") || strings.Contains(string(b), "money") {
		t.Errorf("the unpriced job's JSON speaks of money: %s", b)
	}
}
