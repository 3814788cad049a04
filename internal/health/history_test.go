package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

type fakeHistory struct {
	got  [][]store.Sample
	fail bool
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
