package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

var testFlows = []health.Flow{
	{Name: "titles", State: health.Stalled, Done: 250, Remaining: 750, RatePerHour: 12.5, ETA: now.Add(60 * time.Hour),
		LastProgressAt: now.Add(-3 * time.Hour), ConsecutiveFailures: 4, LastError: "provider said 429 on tpm",
		WaitingOn: "tpm", WaitingUntil: now.Add(40 * time.Second)},
	{Name: "summaries", State: health.Done, Done: 1000},
	{Name: "gateway.chat", State: health.Progressing, Done: 3, Remaining: 1},
}

func TestFlowsListsEveryFlow(t *testing.T) {
	t.Parallel()
	h := newUI(t, ui.Config{Health: &fakeHealth{FlowsFunc: func() []health.Flow { return testFlows }}}, nil)
	_, page := get(t, h, "/flows")
	for _, tc := range []struct {
		flow, state          string
		done, total, percent string
		want                 []string
	}{
		{"titles", "stalled", "250", "1000", "25%", []string{"12.5", "2026-03-07 00:00:00Z", "in 2d 12h", "2026-03-04 09:00:00Z", "3h 0m ago", "4",
			"provider said 429 on tpm", "tpm until 2026-03-04 12:00:40Z"}},
		{"summaries", "done", "1000", "1000", "100%", nil},
		{"gateway.chat", "progressing", "3", "4", "75%", nil},
	} {
		row := page.one(t, "row "+tc.flow, func(n node) bool { return n.Name == "tr" && n.Attrs["data-flow"] == tc.flow })
		if row.Attrs["data-state"] != tc.state {
			t.Errorf("%s: state %q, want %q", tc.flow, row.Attrs["data-state"], tc.state)
		}
		badge := row.one(t, "badge of "+tc.flow, classed("badge"))
		if !classed("state-"+tc.state)(badge) || badge.text() != tc.state {
			t.Errorf("%s: badge %v, want one of state %s", tc.flow, badge, tc.state)
		}
		bar := row.one(t, "progress of "+tc.flow, classed("progress"))
		if bar.Attrs["data-done"] != tc.done || bar.Attrs["data-total"] != tc.total {
			t.Errorf("%s: progress %s of %s, want %s of %s", tc.flow, bar.Attrs["data-done"], bar.Attrs["data-total"], tc.done, tc.total)
		}
		hasText(t, "progress of "+tc.flow, bar, tc.percent)
		hasText(t, "row "+tc.flow, row, tc.want...)
		link := row.one(t, "link of "+tc.flow, func(n node) bool { return n.Name == "a" })
		if link.Attrs["href"] != "/flows/"+tc.flow {
			t.Errorf("%s links to %q", tc.flow, link.Attrs["href"])
		}
	}
	// The bar's fill is the share done.
	fill := page.one(t, "titles's bar", func(n node) bool { return n.Attrs["data-flow"] == "titles" }).one(t, "fill", classed("fill"))
	if fill.Attrs["width"] != "25" {
		t.Errorf("titles's bar fill is %s wide, want 25", fill.Attrs["width"])
	}
}

// item returns a backfill's item as RecentItems gives it.
func item(key string, state store.ItemState, rejects int, reason string, active time.Time) store.RecentItem {
	it := store.RecentItem{Item: store.Item{Backfill: "titles", Key: key, State: state, EligibleAt: now.Add(-24 * time.Hour), Rejects: rejects, Reason: reason,
		RunID: "backfill:titles:" + key}, ActiveAt: active}
	switch state {
	case store.ItemSaved, store.ItemParked:
		it.ProcessedAt = active
	case store.ItemRejected:
		it.RetryAt = active.Add(10 * time.Minute)
	case store.ItemPending:
		it.RunID, it.Reason = "", ""
	}
	return it
}

func TestFlowPageShowsItemsAndRuns(t *testing.T) {
	t.Parallel()
	var gotBefore []store.RecentCursor
	items := &fakeItems{
		RecentItemsFunc: func(_ context.Context, backfill string, limit int, before store.RecentCursor) ([]store.RecentItem, error) {
			if backfill != "titles" || limit < 1 || limit > store.MaxRecentItems {
				t.Errorf("RecentItems(%q, %d)", backfill, limit)
			}
			gotBefore = append(gotBefore, before)
			if !before.IsZero() {
				return []store.RecentItem{item("old", store.ItemSaved, 0, "", now.Add(-time.Hour))}, nil
			}
			out := []store.RecentItem{
				item("doc-4", store.ItemSaved, 1, "", now.Add(-time.Minute)),
				item("doc-3", store.ItemRejected, 2, "title too long", now.Add(-2*time.Minute)),
				item("doc-2", store.ItemParked, 3, "wrong language", now.Add(-3*time.Minute)),
				item("doc-1", store.ItemPending, 0, "", now.Add(-24*time.Hour)),
			}
			// A full page: there are older ones.
			for i := len(out); i < limit; i++ {
				out = append(out, item(fmt.Sprintf("filler-%02d", i), store.ItemPending, 0, "", now.Add(-25*time.Hour)))
			}
			return out, nil
		},
		BackfillRunsFunc: func(_ context.Context, backfill string, limit int) ([]store.BackfillRun, error) {
			if backfill != "titles" || limit < 1 || limit > 100 {
				t.Errorf("BackfillRuns(%q, %d)", backfill, limit)
			}
			return []store.BackfillRun{{RunID: "backfill:titles:run-7", Backfill: "titles", StartedAt: now.Add(-10 * time.Minute), EndedAt: now.Add(-9 * time.Minute),
				Selected: 50, Retried: 3, Saved: 44, Rejected: map[string]int{"title too long": 4, "wrong language": 1}, Parked: 1, Stopped: "aborted=quota tpd"}}, nil
		},
	}
	h := newUI(t, ui.Config{Health: &fakeHealth{FlowsFunc: func() []health.Flow { return testFlows }}, Items: items}, nil)
	_, page := get(t, h, "/flows/titles")
	summary := page.one(t, "summary", classed("summary"))
	hasText(t, "summary", summary, "stalled", "250 / 1,000 (25%)", "12.5 / h", "provider said 429 on tpm", "tpm until")
	if p := summary.one(t, "progress", classed("progress")); p.Attrs["data-done"] != "250" || p.Attrs["data-remaining"] != "750" {
		t.Errorf("progress %v", p.Attrs)
	}

	for _, tc := range []struct {
		key, outcome string
		want         []string
		attempts     string
	}{
		{"doc-4", "saved", []string{"saved", "2026-03-04 11:59:00Z"}, "2"},
		{"doc-3", "rejected", []string{"rejected", "title too long", "retry 2026-03-04 12:08:00Z"}, "2"},
		{"doc-2", "parked", []string{"parked", "wrong language", "2026-03-04 11:57:00Z"}, "3"},
		{"doc-1", "pending", []string{"pending", "2026-03-03 12:00:00Z"}, "0"},
	} {
		row := page.one(t, "item "+tc.key, func(n node) bool { return n.Name == "tr" && n.Attrs["data-key"] == tc.key })
		if row.Attrs["data-outcome"] != tc.outcome {
			t.Errorf("item %s: outcome %q, want %q", tc.key, row.Attrs["data-outcome"], tc.outcome)
		}
		hasText(t, "item "+tc.key, row, tc.want...)
		if got := row.one(t, "attempts", classed("attempts")).text(); got != tc.attempts {
			t.Errorf("item %s: %s attempts, want %s", tc.key, got, tc.attempts)
		}
		links := row.all(func(n node) bool { return n.Name == "a" })
		if tc.outcome == "pending" {
			if len(links) != 0 {
				t.Errorf("a pending item links to a run: %v", links)
			}
		} else if len(links) != 1 || links[0].Attrs["href"] != "/runs/backfill:titles:"+tc.key {
			t.Errorf("item %s links %v, want its run", tc.key, links)
		}
	}
	// Items come in the store's order, newest first.
	var keys []string
	for _, r := range page.all(func(n node) bool { return n.Name == "tr" && n.Attrs["data-key"] != "" })[:4] {
		keys = append(keys, r.Attrs["data-key"])
	}
	if strings.Join(keys, ",") != "doc-4,doc-3,doc-2,doc-1" {
		t.Errorf("items in order %q", keys)
	}

	// The run's figures.
	run := page.one(t, "backfill run", with("data-run", "backfill:titles:run-7"))
	if got := run.text(); !strings.Contains(got, "50 3 44 5: title too long × 4, wrong language × 1 1 aborted=quota tpd") || !strings.Contains(got, "1m 0s") {
		t.Errorf("backfill run row %q", got)
	}

	// The page is full, so it links to the older items, from its last.
	older := page.one(t, "older link", classed("older"))
	u, err := url.Parse(older.Attrs["href"])
	if err != nil || u.Path != "/flows/titles" || u.Query().Get("before_key") != "filler-49" || u.Query().Get("before_at") != "2026-03-03T11:00:00Z" {
		t.Fatalf("older link %q, want the cursor of the last item", older.Attrs["href"])
	}
	_, page = get(t, h, older.Attrs["href"])
	if want := (store.RecentCursor{At: now.Add(-25 * time.Hour), Key: "filler-49"}); len(gotBefore) != 2 || !gotBefore[1].At.Equal(want.At) || gotBefore[1].Key != want.Key {
		t.Fatalf("RecentItems before %+v, want %+v", gotBefore, want)
	}
	page.one(t, "the older item", with("data-key", "old"))
	if n := page.all(classed("older")); len(n) != 0 {
		t.Errorf("a page that is not full links to older items")
	}
	hasText(t, "pager", page.one(t, "pager", classed("pager")), "Newest")
}

func TestFlowPageBadInputAndUnknownFlows(t *testing.T) {
	t.Parallel()
	items := &fakeItems{
		RecentItemsFunc: func(_ context.Context, backfill string, _ int, _ store.RecentCursor) ([]store.RecentItem, error) {
			return nil, fmt.Errorf("list recent items of %s: backfill %q is not recorded: %w", backfill, backfill, store.ErrNoJob)
		},
	}
	h := newUI(t, ui.Config{Health: &fakeHealth{FlowsFunc: func() []health.Flow { return testFlows }}, Items: items}, nil)
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/flows/titles?before_at=yesterday", http.StatusBadRequest, `before_at "yesterday" is not an RFC 3339 time`},
		{"/flows/titles?before_key=doc-1", http.StatusBadRequest, "before_key needs before_at"},
		{"/flows/titles?before_at=2026-03-04T10:00:00Z&before_key=" + url.QueryEscape(strings.Repeat("k", 300)), http.StatusBadRequest, "before_key is not an item key"},
		{"/flows/nobody", http.StatusNotFound, `there is no flow named "nobody"`},
		// Names no flow can have are refused before the store sees them.
		{"/flows/a%00b", http.StatusBadRequest, `flow name "a\x00b" is not a name`},
		{"/flows/" + strings.Repeat("a", 300), http.StatusBadRequest, "at most 256 bytes of UTF-8"},
		{"/flows/%ff", http.StatusBadRequest, `flow name "\xff" is not a name`},
		// Known to the monitor, but not a backfill: no items, no error.
		{"/flows/gateway.chat", http.StatusOK, "This flow is not a backfill"},
	} {
		res, body := do(t, h, req{path: tc.path})
		if res.StatusCode != tc.status || !strings.Contains(parse(t, body).text(), tc.want) {
			t.Errorf("GET %s: %d, want %d with %q:\n%s", tc.path, res.StatusCode, tc.status, tc.want, body)
		}
	}
}

// TestPagesNameTheirClock: on an app whose clock is simulated, every page
// is stamped with its time and says it is simulated, the runs' pages too.
func TestPagesNameTheirClock(t *testing.T) {
	t.Parallel()
	app := now.Add(50 * time.Hour)
	h := newUI(t, ui.Config{Health: &fakeHealth{FlowsFunc: func() []health.Flow { return testFlows }}, Sender: &fakeSender{},
		Engine: &fakeEngine{
			RunsFunc:      func(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, nil },
			RunDetailFunc: func(context.Context, string, int) (*engine.RunDetail, error) { return detail(run.Completed), nil },
		},
		AppNow: func() time.Time { return app }, Speed: 720}, nil)
	for _, path := range []string{"/", "/flows", "/flows/titles", "/plan", "/runs", "/runs/" + url.PathEscape("summarize:doc/1")} {
		_, page := get(t, h, path)
		hasText(t, path+" stamp", page.one(t, "stamp", classed("stamp")), "As of 2026-03-06 14:00:00Z (simulated time, ×720)")
		hasText(t, path+" footer", page.one(t, "footer", func(n node) bool { return n.Name == "footer" }), "times in UTC, simulated time, ×720")
	}
	_, page := get(t, h, "/send")
	hasText(t, "/send footer", page.one(t, "footer", func(n node) bool { return n.Name == "footer" }), "times in UTC, simulated time, ×720")

	// On the wall clock, nothing is said but that times are the app's.
	_, page = get(t, newUI(t, ui.Config{Health: &fakeHealth{FlowsFunc: func() []health.Flow { return testFlows }}}, nil), "/flows")
	if s := page.one(t, "stamp", classed("stamp")).text(); strings.Contains(s, "simulated") {
		t.Errorf("a wall-clock app's stamp %q", s)
	}
}
