package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/chart/charttest"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestReportWhichChangeHelped: records of DevPick's 18 and 19 October
// fixes — the titles stalled under both the first configuration and the
// 18th's, and moved after the 19th's — give a report, on either database,
// that puts the titles' recovery on the 19th's change, names what it
// changed, and draws a chart of one panel per job.
func TestReportWhichChangeHelped(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		st := testenv.OpenStore(t, url)
		ctx := context.Background()
		day := time.Date(2026, 10, 17, 12, 0, 0, 0, time.UTC)
		fix18, fix19 := day.Add(19*time.Hour+30*time.Minute), day.Add(45*time.Hour)
		for i, v := range []struct {
			at       time.Time
			code     string
			tokens   int
			titleRun int
		}{{day.Add(-2 * time.Hour), "a1", 0, 10}, {fix18, "b2", 0, 5}, {fix19, "c3", 60, 5}} {
			cfg := fmt.Sprintf(`{"flows":[{"name":"summary","batch_max":2},{"name":"title","batch_max":%d,"max_tokens":%d}]}`, v.titleRun, v.tokens)
			if ok, err := st.RecordConfig(ctx, store.ConfigVersion{At: v.at, Source: "app", Hash: fmt.Sprint("v", i), Code: v.code, Config: []byte(cfg)}); err != nil || !ok {
				t.Fatalf("record version %d: %v, %v", i, ok, err)
			}
		}
		var samples []store.Sample
		for at := day.Add(time.Hour); !at.After(day.Add(56 * time.Hour)); at = at.Add(time.Hour) {
			title, state := int64(0), "stalled"
			var rej map[string]int64
			if at.After(fix19) {
				title, state = 12, "progressing"
			} else if at.After(fix18) {
				rej = map[string]int64{"otpm": 1}
			}
			samples = append(samples,
				store.Sample{At: at, Flow: "summary", Source: "app", State: "progressing", Done: 4},
				store.Sample{At: at, Flow: "title", Source: "app", State: state, Done: title, Rejections: rej})
		}
		if err := st.RecordSamples(ctx, samples); err != nil {
			t.Fatal(err)
		}
		svg := filepath.Join(t.TempDir(), "report.svg")
		code, out, errOut := runCLI("report", "--db", url, "--since", day.Format(time.RFC3339), "--until", day.Add(57*time.Hour).Format(time.RFC3339), "--json", "--svg", svg)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var rep struct {
			Jobs map[string]struct {
				Done       int64            `json:"done"`
				Rejections map[string]int64 `json:"rejections"`
				Stalls     []struct{ From, To time.Time }
			} `json:"jobs"`
			Changes []struct {
				Code   string   `json:"code"`
				Diff   []string `json:"diff"`
				Helped []string `json:"helped"`
				Jobs   map[string]struct{ Before, After float64 }
			} `json:"changes"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Changes) != 2 || rep.Changes[0].Code != "b2" || rep.Changes[1].Code != "c3" {
			t.Fatalf("changes %+v", rep.Changes)
		}
		c18, c19 := rep.Changes[0], rep.Changes[1]
		if len(c18.Helped) != 0 || !slices.Equal(c19.Helped, []string{"title"}) || c19.Jobs["title"].Before != 0 || c19.Jobs["title"].After != 11 {
			t.Errorf("18th %+v, 19th %+v: want the titles' recovery on the 19th's change", c18, c19)
		}
		if !slices.Contains(c19.Diff, "flows.title.max_tokens: 0 → 60") || !slices.Contains(c18.Diff, "flows.title.batch_max: 10 → 5") {
			t.Errorf("diffs %q, %q", c18.Diff, c19.Diff)
		}
		title := rep.Jobs["title"]
		if title.Done != 11*12 || title.Rejections["otpm"] != 26 || len(title.Stalls) != 1 || !title.Stalls[0].To.Equal(fix19.Add(time.Hour)) {
			t.Errorf("title %+v", title)
		}
		data, err := os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		panels := charttest.Panels(t, charttest.Parse(t, data))
		if len(panels) != 2 {
			t.Fatalf("%d panels, want one per job", len(panels))
		}
		for _, p := range panels {
			charttest.CheckInside(t, p)
		}
		if !strings.Contains(string(data), "provider rejection on otpm") || !strings.Contains(string(data), "stalled") {
			t.Error("the chart marks no rejection or no stall")
		}
		code, out, _ = runCLI("report", "--db", url, "--since", day.Format(time.RFC3339), "--until", day.Add(57*time.Hour).Format(time.RFC3339))
		for _, want := range []string{"title: 0.0 → 11.0 items/h (+11.0)   ← the change its largest rise came with", "flows.title.max_tokens: 0 → 60", "otpm=26"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("table without %q:\n%s", want, out)
			}
		}
		// No key has a price: the report says nothing of money.
		if strings.Contains(out, "Spend") || strings.Contains(string(data), "money") {
			t.Errorf("a report without a price speaks of money:\n%s", out)
		}
	})
}

func TestReportRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", filepath.Join(t.TempDir(), "none.db")}, "give the database sluice serve or the gateway records in"},
		{[]string{"--since", "-5h"}, "--since -5h: want a duration from 1m"},
		{[]string{"--since", "yesterday"}, `--since "yesterday": want a duration such as 48h`},
		{[]string{"--until", "now"}, `--until "now": want a time`},
	} {
		code, _, errOut := runCLI(append([]string{"report"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestReportSpendAgainstBudgets: a day of a priced key's samples, an hour
// apart — "summary" spends 0.08 an hour under its own budget of 2.00 a day
// and the key's 5.00 a day — and an unpriced job beside it give, on either
// database, a report that says what summary spent, per day and against
// each budget, in its table, its JSON and its chart, and says nothing of
// money for the other.
func TestReportSpendAgainstBudgets(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		st := testenv.OpenStore(t, url)
		ctx := context.Background()
		day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		var samples []store.Sample
		for h := int64(1); h <= 24; h++ {
			spent := h * 80_000_000 // 0.08 an hour, so far today
			samples = append(samples,
				store.Sample{At: day.Add(time.Duration(h) * time.Hour), Flow: "summary", Source: "app", State: "progressing", Done: 5,
					Money: 80_000_000, Priced: true, Budgets: []store.SampleBudget{
						{Limit: "mpd", Max: 2_000_000_000, Spent: spent},
						{Limit: "mpd", Key: true, Max: 5_000_000_000, Spent: 2 * spent},
					}},
				store.Sample{At: day.Add(time.Duration(h) * time.Hour), Flow: "title", Source: "app", State: "progressing", Done: 3})
		}
		if err := st.RecordSamples(ctx, samples); err != nil {
			t.Fatal(err)
		}
		args := []string{"report", "--db", url, "--since", day.Format(time.RFC3339), "--until", day.Add(24*time.Hour + time.Minute).Format(time.RFC3339)}
		svg := filepath.Join(t.TempDir(), "report.svg")
		code, out, errOut := runCLI(append(args, "--json", "--svg", svg)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var rep struct {
			Jobs map[string]struct {
				Spend *struct {
					SpentNano  int64 `json:"spent_nano"`
					PerDayNano int64 `json:"per_day_nano"`
					Budgets    []struct {
						Of, Limit, Period string
						Budget            int64 `json:"budget_nano"`
						Spent             int64 `json:"spent_nano"`
						Ratio             float64
					} `json:"budgets"`
				} `json:"spend"`
				Hours []struct {
					MoneyNano int64 `json:"money_nano"`
				} `json:"hours"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		sp := rep.Jobs["summary"].Spend
		// 24 samples of 0.08 in a window of 24 h 1 min: 1.92, and 1.92 ×
		// 24 h ∕ 24 h 1 min a day.
		if sp == nil || sp.SpentNano != 1_920_000_000 || sp.PerDayNano != 1_918_667_592 {
			t.Fatalf("summary's spend %+v: want 1.92 in the window, 1.918667592 a day", sp)
		}
		if len(sp.Budgets) != 2 || sp.Budgets[0].Of != "flow" || sp.Budgets[0].Period != "day" || sp.Budgets[0].Budget != 2_000_000_000 ||
			sp.Budgets[0].Spent != 1_920_000_000 || sp.Budgets[0].Ratio != 0.96 ||
			sp.Budgets[1].Of != "key" || sp.Budgets[1].Limit != "mpd" || sp.Budgets[1].Spent != 3_840_000_000 || sp.Budgets[1].Ratio != 0.768 {
			t.Errorf("summary's budgets %+v", sp.Budgets)
		}
		if hs := rep.Jobs["summary"].Hours; len(hs) != 25 || hs[1].MoneyNano != 80_000_000 || hs[0].MoneyNano != 0 {
			t.Errorf("summary's hours %+v", hs)
		}
		if rep.Jobs["title"].Spend != nil {
			t.Errorf("the unpriced job has a spend: %+v", rep.Jobs["title"].Spend)
		}
		data, err := os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		panels := charttest.Panels(t, charttest.Parse(t, data))
		if len(panels) != 3 {
			t.Fatalf("%d panels, want one per job and one of summary's spend", len(panels))
		}
		// Summary's items, then its spend, on an axis of money per hour
		// with the budgets' paces, then the title's items.
		for i, want := range []string{"summary: items done per hour", "summary: money spent per hour", "title: items done per hour"} {
			if got := panels[i].All("panel-title"); len(got) != 1 || got[0].Text != want {
				t.Errorf("panel %d: %+v, want %q", i, got, want)
			}
		}
		if got := panels[1].All("unit"); len(got) != 1 || got[0].Text != "money/h" || !slices.Equal(charttest.Series(panels[1]), []string{"spent"}) {
			t.Errorf("the spend's panel: unit %+v, series %q; want money/h and spent", got, charttest.Series(panels[1]))
		}
		if ticks := charttest.YTicks(t, panels[1]); ticks[len(ticks)-1] < 0.2 {
			t.Errorf("the spend's axis ends at %v, below the key's pace of 5.00/day, 0.21 an hour", ticks)
		}
		for _, want := range []string{"own budget 2.00/day, even pace", "key&#39;s budget 5.00/day, even pace"} {
			if !strings.Contains(string(data), want) {
				t.Errorf("the chart has no %q", want)
			}
		}
		code, out, errOut = runCLI(args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, want := range []string{
			"summary  1.92 in the window, 1.918667592 a day",
			"spend 1.92 of 2.00/day (96 %), the flow's own budget",
			"spend 3.84 of 5.00/day (77 %), the key's budget, all its flows",
			"Spend per hour, one mark an hour from 2026-12-01 00:00 (money; · none):\n  summary  ·████████████████████████\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("report without %q:\n%s", want, out)
			}
		}
		if i := strings.Index(out, "\nSpend,"); i < 0 || strings.Contains(out[i:], "title") {
			t.Errorf("the unpriced job is in the spend, or there is no spend:\n%s", out)
		}
	})
}

// TestReportOnTheAppsClock: an app whose clock ran ahead of the wall clock
// (a demo in compressed time) recorded its samples in its own time; a
// report of its last 48 hours without --until, on either database, ends
// at its latest record rather than at the wall clock's now, counts every
// item done in those 48 hours of its clock and none before, and says
// which clock it is on. Records on the wall clock end the window at now,
// unlabelled.
func TestReportOnTheAppsClock(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		st := testenv.OpenStore(t, url)
		ctx := context.Background()
		// The app's clock stands 20 days ahead of the wall clock; it
		// sampled one job every 10 minutes for its last 3 days.
		last := time.Now().UTC().Add(20 * 24 * time.Hour).Truncate(time.Minute)
		var samples []store.Sample
		var inWindow int64
		for at := last.Add(-72 * time.Hour); !at.After(last); at = at.Add(10 * time.Minute) {
			samples = append(samples, store.Sample{At: at, Flow: "summary", Source: "app", State: "progressing", Done: 3})
			if at.After(last.Add(-48 * time.Hour)) {
				inWindow += 3
			}
		}
		if err := st.RecordSamples(ctx, samples); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI("report", "--db", url, "--since", "48h", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var rep struct {
			Until time.Time
			Clock string
			Jobs  map[string]struct{ Done int64 }
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Jobs["summary"].Done != inWindow || rep.Until.Before(last) || rep.Until.After(last.Add(time.Second)) || !strings.Contains(rep.Clock, "the app's clock") {
			t.Errorf("report until %s (%q): %d done, want until %s on the app's clock, %d done", rep.Until, rep.Clock, rep.Jobs["summary"].Done, last, inWindow)
		}
		code, out, _ = runCLI("report", "--db", url, "--since", "48h")
		if code != 0 || !strings.Contains(out, "on the app's clock: its latest record, 20d 0h ahead of the wall clock") {
			t.Errorf("the table does not name its clock:\n%s", out)
		}
	})
	testenv.Databases(t, func(t *testing.T, url string) {
		st := testenv.OpenStore(t, url)
		before := time.Now().UTC()
		if err := st.RecordSamples(context.Background(), []store.Sample{{At: before.Add(-time.Hour), Flow: "summary", Source: "app", State: "progressing", Done: 7}}); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI("report", "--db", url, "--since", "48h", "--json")
		var rep struct {
			Until time.Time
			Clock string
			Jobs  map[string]struct{ Done int64 }
		}
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		if rep.Jobs["summary"].Done != 7 || rep.Clock != "" || rep.Until.Before(before) {
			t.Errorf("a wall-clock app's report until %s (%q): %d done, want now, unlabelled, 7 done", rep.Until, rep.Clock, rep.Jobs["summary"].Done)
		}
	})
}
