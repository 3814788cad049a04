package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

type fakeHistory struct {
	got       [][]store.Sample
	fail      bool
	pruned    []time.Time // the before of each PruneHistory
	pruneFail bool
	onPrune   func() // called by PruneHistory, when set
}

func (h *fakeHistory) PruneHistory(_ context.Context, before time.Time) (int64, error) {
	if h.onPrune != nil {
		h.onPrune()
	}
	if h.pruneFail {
		return 0, errors.New("database is locked")
	}
	h.pruned = append(h.pruned, before)
	return 1, nil
}

func (h *fakeHistory) RecordSamples(_ context.Context, s []store.Sample) error {
	if h.fail {
		return errors.New("database is locked")
	}
	h.got = append(h.got, s)
	return nil
}

// TestHistorySamples: the first poll only takes the counts to start from;
// then a sample per job every HistoryEvery says what it did in the
// interval. A sample that cannot be written is counted in the next, and
// counters that went down (another process) count from zero.
func TestHistorySamples(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)
	job := store.Job{Name: "titles", MonitoringSince: now.Add(-time.Hour), LastProgressAt: now, Pending: 100}
	counters := Counters{Admitted: 5, Tokens: 500, Rejections: map[string]int64{"otpm": 1}}
	src := &fakeSource{JobsFunc: func(context.Context) ([]store.Job, error) { return []store.Job{job}, nil },
		SetJobAlertFunc: func(context.Context, string, string, string) (bool, error) { return true, nil }}
	h := &fakeHistory{}
	m, err := New(Config{Source: src, Every: 30 * time.Second, History: h, HistorySource: "app",
		Counters: func(string, time.Time) Counters { return counters },
		Now:      func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	poll := func(d time.Duration) {
		t.Helper()
		now = now.Add(d)
		if err := m.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	poll(0)
	if len(h.got) != 0 {
		t.Fatalf("the first poll recorded %v", h.got)
	}
	job.Saved, job.LastProgressAt = 7, now.Add(30*time.Second)
	counters = Counters{Admitted: 8, Tokens: 900, Rejections: map[string]int64{"otpm": 3}, Refusals: map[string]int64{"tpm": 1}}
	poll(30 * time.Second) // within HistoryEvery: nothing yet
	if len(h.got) != 0 {
		t.Fatalf("recorded within a minute: %v", h.got)
	}
	poll(30 * time.Second)
	if len(h.got) != 1 || len(h.got[0]) != 1 {
		t.Fatalf("samples %v", h.got)
	}
	s := h.got[0][0]
	if s.Flow != "titles" || s.Source != "app" || !s.At.Equal(now) || s.Done != 7 || s.Remaining != 100 || s.Admitted != 3 || s.Tokens != 400 ||
		s.Rejections["otpm"] != 2 || s.Refusals["tpm"] != 1 || s.State != string(Progressing) {
		t.Errorf("sample %+v", s)
	}
	// A failed write: its interval is counted in the next sample.
	h.fail = true
	job.Saved = 10
	poll(time.Minute)
	h.fail = false
	job.Saved = 12
	counters = Counters{Admitted: 2} // a new process: counts from zero
	poll(time.Minute)
	if len(h.got) != 2 || h.got[1][0].Done != 5 || h.got[1][0].Admitted != 2 || h.got[1][0].Rejections != nil {
		t.Errorf("after a failed write: %+v", h.got)
	}
	// A stall that one poll between two samples saw is in the sample, even
	// though the job progressed again before it.
	job.LastProgressAt = now.Add(-2*time.Hour + 10*time.Second) // the last progress, just within the threshold
	poll(20 * time.Second)                                      // stalled, but not a minute since the last sample
	if len(h.got) != 2 {
		t.Fatalf("a sample within a minute: %+v", h.got)
	}
	job.Saved, job.LastProgressAt = 13, now.Add(time.Second)
	poll(40 * time.Second) // progressing again, and a minute since the last sample
	if len(h.got) != 3 || h.got[2][0].State != string(Stalled) {
		t.Fatalf("the stall's sample: %+v", h.got[len(h.got)-1])
	}
	poll(time.Minute)
	if len(h.got) != 4 || h.got[3][0].State != string(Progressing) || !strings.Contains(h.got[2][0].Reason, "no item processed") {
		t.Errorf("after the stall: %+v, the stall's reason %q", h.got[3][0], h.got[2][0].Reason)
	}
}

// TestCountersOfMoney: on a priced key, a flow's counters carry what its
// calls cost, and the flow's own budget and the key's, each with what it
// counted; a sample records the money spent in its interval. On a key
// without a price, none of it.
func TestCountersOfMoney(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)
	// 1 a million input tokens, 2 a million output: 1,000 in and 500 out
	// cost 0.002, 2,000,000 billionths.
	g, err := governor.New(governor.Config{Key: "groq", Price: governor.Price{Input: 1, Output: 2},
		Limits: governor.Budget{Day: 5, Month: 100}.Limits(governor.Limits{}), DayBurst: -1,
		Flows: []governor.FlowConfig{{Name: "titles", Budget: governor.Budget{Day: 2}}, {Name: "other"}}})
	if err != nil {
		t.Fatal(err)
	}
	spend := func(flow string) {
		t.Helper()
		r, err := g.Reserve(now, flow, governor.Cost{Requests: 1, Input: 1000, Output: 2000})
		if err != nil {
			t.Fatal(err)
		}
		g.Advance(now)
		if !r.Admitted() {
			t.Fatalf("a call of %s was not admitted", flow)
		}
		r.Settle(now, governor.Cost{Input: 1000, Output: 500})
	}
	spend("titles")
	spend("other")
	c := CountersOf(g, "titles", now)
	want := []store.SampleBudget{
		{Limit: "mpd", Max: 2 * governor.Nano, Spent: 2_000_000},
		{Limit: "mpd", Key: true, Max: 5 * governor.Nano, Spent: 4_000_000},
		{Limit: "mpm", Key: true, Max: 100 * governor.Nano, Spent: 4_000_000},
	}
	if c.Money != 2_000_000 || !c.Priced || c.Admitted != 1 || !slices.Equal(c.Budgets, want) {
		t.Errorf("counters of a priced flow: %+v\nwant money 2,000,000, priced, budgets %+v", c, want)
	}
	if o := CountersOf(g, "other", now); o.Money != 2_000_000 || len(o.Budgets) != 2 || o.Budgets[0].Key != true {
		t.Errorf("counters of a flow without a budget of its own: %+v, want only the key's budgets", o)
	}

	plain, err := governor.New(governor.Config{Key: "free", Flows: []governor.FlowConfig{{Name: "titles"}}})
	if err != nil {
		t.Fatal(err)
	}
	if c := CountersOf(plain, "titles", now); c.Money != 0 || c.Priced || c.Budgets != nil {
		t.Errorf("counters on a key without a price: %+v, want no money, no budget", c)
	}

	// The monitor's samples: the money spent in each interval, and the
	// budgets as they stood at its end.
	job := store.Job{Name: "titles", MonitoringSince: now.Add(-time.Hour), LastProgressAt: now, Pending: 10}
	src := &fakeSource{JobsFunc: func(context.Context) ([]store.Job, error) { return []store.Job{job}, nil },
		SetJobAlertFunc: func(context.Context, string, string, string) (bool, error) { return true, nil }}
	h := &fakeHistory{}
	m, err := New(Config{Source: src, Every: time.Minute, History: h, HistorySource: "app",
		Counters: func(_ string, at time.Time) Counters { return CountersOf(g, "titles", at) },
		Now:      func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	spend("titles")
	spend("titles")
	if err := m.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(h.got) != 1 || len(h.got[0]) != 1 {
		t.Fatalf("samples %+v", h.got)
	}
	s := h.got[0][0]
	if s.Money != 4_000_000 || !s.Priced || len(s.Budgets) != 3 || s.Budgets[0].Spent != 6_000_000 || s.Budgets[1].Spent != 8_000_000 {
		t.Errorf("sample %+v: want 4,000,000 spent in the interval, priced, the flow's day budget at 6,000,000 and the key's at 8,000,000", s)
	}
}

// TestHistoryPruned: the first poll deletes the samples older than
// HistoryKeep, then a poll does at most once every PruneEvery of the
// monitor's clock; one that fails is tried again at the next poll; a
// negative keep never deletes; and the default keeps DefaultHistoryKeep.
func TestHistoryPruned(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)
	job := store.Job{Name: "titles", MonitoringSince: start.Add(-time.Hour), LastProgressAt: start, Pending: 100}
	monitor := func(keep time.Duration, h *fakeHistory, now *time.Time) *Monitor {
		t.Helper()
		src := &fakeSource{JobsFunc: func(context.Context) ([]store.Job, error) { return []store.Job{job}, nil },
			SetJobAlertFunc: func(context.Context, string, string, string) (bool, error) { return true, nil }}
		m, err := New(Config{Source: src, Every: 30 * time.Second, History: h, HistoryKeep: keep,
			Now: func() time.Time { return *now }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	poll := func(m *Monitor, now *time.Time, d time.Duration) {
		t.Helper()
		*now = now.Add(d)
		if err := m.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	now := start
	h := &fakeHistory{}
	m := monitor(48*time.Hour, h, &now)
	// The poll's views are published before the prune, which may take a
	// while on a long history.
	var during []View
	h.onPrune = func() { during = m.Views() }
	poll(m, &now, 0)
	h.onPrune = nil
	if len(during) != 1 || during[0].Name != "titles" {
		t.Fatalf("views while the first prune ran: %+v, want the first poll's (titles)", during)
	}
	poll(m, &now, 30*time.Minute)
	poll(m, &now, 29*time.Minute)
	if want := []time.Time{start.Add(-48 * time.Hour)}; !slices.Equal(h.pruned, want) {
		t.Fatalf("pruned before %v in the first hour, want %v", h.pruned, want)
	}
	poll(m, &now, time.Minute) // an hour after the first
	if want := start.Add(time.Hour - 48*time.Hour); len(h.pruned) != 2 || !h.pruned[1].Equal(want) {
		t.Fatalf("pruned before %v, want a second prune before %v", h.pruned, want)
	}

	// A failed prune is tried at the next poll, not an hour later.
	h.pruneFail = true
	poll(m, &now, time.Hour)
	h.pruneFail = false
	poll(m, &now, 30*time.Second)
	if len(h.pruned) != 3 || !h.pruned[2].Equal(now.Add(-48*time.Hour)) {
		t.Fatalf("pruned before %v, want the failed prune done at the next poll (before %v)", h.pruned, now.Add(-48*time.Hour))
	}

	// Negative: kept for good.
	now = start
	h = &fakeHistory{}
	m = monitor(-1, h, &now)
	for range 3 {
		poll(m, &now, 2*time.Hour)
	}
	if len(h.pruned) != 0 || len(h.got) == 0 {
		t.Fatalf("HistoryKeep -1: pruned before %v (want none), %d samples recorded (want some)", h.pruned, len(h.got))
	}

	// Zero: the default.
	now = start
	h = &fakeHistory{}
	m = monitor(0, h, &now)
	poll(m, &now, 0)
	if len(h.pruned) != 1 || !h.pruned[0].Equal(start.Add(-DefaultHistoryKeep)) {
		t.Fatalf("HistoryKeep 0: pruned before %v, want before %v", h.pruned, start.Add(-DefaultHistoryKeep))
	}
}
