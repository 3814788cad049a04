package devpick

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
)

// logBuffer is a Log safe to read while the scheduler writes.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// naiveOn returns the seed's scheduler on a new database of n articles
// and a simulator with the seed's limits that reserves defaultMax output
// tokens for a request without max_tokens, on one virtual clock.
func naiveOn(t *testing.T, n int, defaultMax int64, order []string) (*Naive, *vclock, *forecast.Model, *logBuffer) {
	t.Helper()
	clk := newClock()
	model, url := simServer(t, forecast.ModelConfig{Limits: seedLimits(t), DefaultMaxTokens: defaultMax, Seed: 7}, clk.Now)
	db, _ := tempDB(t)
	if _, err := Seed(context.Background(), db, n); err != nil {
		t.Fatal(err)
	}
	log := &logBuffer{}
	nv, err := NewNaive(NaiveConfig{DB: db, BaseURL: url, Now: clk.Now, Sleep: clk.Sleep, Log: log, Order: order})
	if err != nil {
		t.Fatal(err)
	}
	return nv, clk, model, log
}

// tick runs the scheduled job once and moves the clock to the next period.
func tick(t *testing.T, nv *Naive, clk *vclock) {
	t.Helper()
	start := clk.Now()
	if err := nv.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(start.Add(30 * time.Minute).Sub(clk.Now()))
}

// The morning of 10-19: no request sets max_tokens, Groq expects up to
// 2,048 output tokens of one, more than the OTPM limit of 1,000: every call
// is refused as too large with a 900 s retry-after, which the shared flag
// takes for a rate limit, so the jobs after the refused one back off: the
// title backfill never sends a request.
func TestNaiveTooLargeWithoutMaxTokens(t *testing.T) {
	t.Parallel()
	nv, clk, model, log := naiveOn(t, 40, 2048, nil)
	ctx := context.Background()
	tick(t, nv, clk) // no new article: the summaries' call is refused
	tick(t, nv, clk)
	if _, err := Arrive(ctx, nv.cfg.DB, clk.Now()); err != nil {
		t.Fatal(err)
	}
	tick(t, nv, clk) // a new article: the analysis's call is refused
	last := clk.Now().Add(-30 * time.Minute)
	if want := last.Add(900 * time.Second); !nv.RateLimitedUntil().Equal(want) {
		t.Errorf("rate_limited_until = %v, want the last run + Groq's 900 s retry-after, %v", nv.RateLimitedUntil(), want)
	}
	tick(t, nv, clk)

	st := nv.Stats()
	const tooLarge = "429 too large (otpm)"
	if got := st[Summary].Refused[tooLarge]; got != 2 {
		t.Errorf("summary refusals %v, want 2 of %q", st[Summary].Refused, tooLarge)
	}
	if got := st[Analysis].Refused[tooLarge]; got != 2 {
		t.Errorf("analysis refusals %v, want 2 of %q", st[Analysis].Refused, tooLarge)
	}
	if s := st[Summary]; s.Saved != 0 || s.RateLimited != 2 || s.Backoffs != 2 {
		t.Errorf("summary: %+v, want nothing saved, 2 runs rate limited, 2 backed off", s)
	}
	if s := st[Title]; s.Backoffs != 4 || s.Requests != 0 || s.Saved != 0 || s.Runs != 0 {
		t.Errorf("title: %+v, want 4 runs backed off, no request, nothing saved", s)
	}
	if ms := model.Stats(); ms.TooLarge != 4 || ms.Succeeded != 0 {
		t.Errorf("the provider refused %d requests as too large and answered %d, want 4 and 0", ms.TooLarge, ms.Succeeded)
	}
	out := log.String()
	for _, want := range []string{
		"07:01:49 English summary backfill: selected=30 retried=0 saved=0 rejected={} aborted=rate_limited\n",
		"07:01:49 English title backfill: aborted=rate_limit_backoff(2026-10-18T07:16:49)\n",
		"08:01:49 Article analysis: selected=1 retried=0 saved=0 rejected={} aborted=rate_limited\n",
		"08:01:49 English summary backfill: aborted=rate_limit_backoff(2026-10-18T08:16:49)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log has no line %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 12 {
		t.Errorf("log has %d lines, want one per job per run, 12:\n%s", n, out)
	}
}

// The morning of 10-18: the provider reserves 1,000 output tokens for a
// request without max_tokens, all of the OTPM minute. The summaries' first
// call of each run gets in and saves 5; their second, 10 s later, gets a
// 429 that sets the shared flag, and the titles, run right after, back off:
// run after run the summaries move and the titles starve, with titles of
// summarised articles piling up.
func TestNaiveTitlesStarve(t *testing.T) {
	t.Parallel()
	nv, clk, _, log := naiveOn(t, 40, 0, nil)
	for range 3 {
		tick(t, nv, clk)
	}
	st := nv.Stats()
	if s := st[Summary]; s.Saved != 15 || s.RateLimited != 3 || s.Refused["429 rate limited (otpm)"] != 3 {
		t.Errorf("summary: %+v, want 5 saved a run and each run ended by an OTPM 429", s)
	}
	if s := st[Title]; s.Backoffs != 3 || s.Saved != 0 || s.Requests != 0 {
		t.Errorf("title: %+v, want every run backed off and nothing saved", s)
	}
	if s := st[Title]; s.Remaining != 15 || s.Done != 0 {
		t.Errorf("title counts done=%d remaining=%d, want 0 and the 15 summarised articles", s.Done, s.Remaining)
	}
	if !strings.Contains(log.String(), "English summary backfill: selected=30 retried=0 saved=5 rejected={} aborted=rate_limited\n") {
		t.Errorf("no summary line of the seed's shape:\n%s", log)
	}
	p, err := Progress(context.Background(), nv.cfg.DB, NaivePipeline)
	if err != nil {
		t.Fatal(err)
	}
	if p[Summary].Done != 15 || p[Title].Remaining != 15 || p[Title].Waiting != 25 {
		t.Errorf("progress %+v, want 15 summaries, 15 titles eligible and 25 waiting", p)
	}
	// The sluice pipeline's columns are untouched.
	if s, err := Progress(context.Background(), nv.cfg.DB, SluicePipeline); err != nil || s[Summary].Done != 0 {
		t.Errorf("sluice's progress %+v (%v), want no summary", s, err)
	}
}

// The fix of 10-18 runs the titles before the summaries. The starvation
// moves: a run where the titles make a call leaves no OTPM for the
// summaries, which then hit a 429 of their own; and without max_tokens the
// titles come back too long.
func TestNaiveSwappedOrder(t *testing.T) {
	t.Parallel()
	nv, clk, _, _ := naiveOn(t, 40, 0, []string{Analysis, Title, Summary})
	tick(t, nv, clk) // no summaries yet: the titles select nothing, the summaries save 5
	tick(t, nv, clk) // the titles' call takes the minute's output; the summaries are refused
	st := nv.Stats()
	if s := st[Title]; s.Requests != 1 || s.Selected != 5 || s.Backoffs != 0 {
		t.Errorf("title: %+v, want one request of the 5 summarised articles, never backed off", s)
	}
	if s := st[Title]; s.Rejected[ReasonTooLong] == 0 {
		t.Errorf("title rejections %v, want outputs too long without max_tokens", s.Rejected)
	}
	if s := st[Summary]; s.Saved != 5 || s.RateLimited != 2 || s.Requests != 3 {
		t.Errorf("summary: %+v, want 5 saved in the first run, then a 429 right after the titles' call", s)
	}
}

// Run ticks every period of the injected clock until its context ends.
func TestNaiveRunPeriods(t *testing.T) {
	t.Parallel()
	clk := newClock()
	db, _ := tempDB(t)
	if _, err := Seed(context.Background(), db, 3); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var waits []time.Duration
	nv, err := NewNaive(NaiveConfig{
		DB: db, BaseURL: "http://127.0.0.1:1/v1", Now: clk.Now, Every: time.Hour,
		Shapes: map[string]NaiveShape{Summary: {PerRun: 0, PerRequest: 1}, Title: {PerRun: 0, PerRequest: 1}},
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			waits = append(waits, d)
			if len(waits) == 3 {
				cancel()
			}
			mu.Unlock()
			return clk.Sleep(ctx, d)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nv.Run(ctx); err != context.Canceled {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if st := nv.Stats(); st[Analysis].Runs != 3 || st[Summary].Runs != 3 {
		t.Errorf("stats %+v, want 3 runs of each job", st)
	}
	for _, w := range waits {
		if w != time.Hour {
			t.Errorf("waited %v between runs that took no time, want the period, 1h", w)
		}
	}
}
