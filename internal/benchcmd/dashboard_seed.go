package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// app builds the bench's app on the database: the four functions and the
// backfill, the provider simulator as its one provider.
func (b *scaleBench) app(ctx context.Context, poll time.Duration) (*sluice.App, error) {
	limits, err := govtext.Limits(scaleLimits)
	if err != nil {
		return nil, err
	}
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: b.db, PollInterval: poll, Logger: quietLogger(), AppVersion: "bench", Flows: scaleFlows,
		Providers: []sluice.Provider{{Name: "sim", LLM: llm.Config{BaseURL: b.provider}, Limits: limits}},
	})
	if err != nil {
		return nil, err
	}
	if err := registerScale(app, b.src); err != nil {
		_ = app.Stop(context.Background())
		return nil, err
	}
	return app, nil
}

// scaleEvent is the functions' event data.
type scaleEvent struct {
	I int `json:"i"`
}

// scaleStepsOutput is what a run of three steps returns.
type scaleStepsOutput struct {
	I       int    `json:"i"`
	Summary string `json:"summary"`
	Words   int    `json:"words"`
}

func registerScale(app *sluice.App, src *benchDB) error {
	conc := []run.Concurrency{{Limit: scaleWorkers, PerWorker: true}}
	err := sluice.Register(app, run.Function{ID: scaleOK, Event: "bench/ok", Concurrency: conc},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (int, error) {
			return sluice.Step(ctx, "one", func(context.Context) (int, error) { return ev.Data.I, nil })
		})
	if err != nil {
		return err
	}
	err = sluice.Register(app, run.Function{ID: scaleSteps, Event: "bench/steps", Concurrency: conc},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (scaleStepsOutput, error) {
			text, err := sluice.Step(ctx, "fetch", func(context.Context) (string, error) { return sim.Words(40, uint64(ev.Data.I)), nil })
			if err != nil {
				return scaleStepsOutput{}, err
			}
			summary, err := sluice.Step(ctx, "summarize", func(context.Context) (string, error) {
				w := strings.Fields(text)
				return strings.Join(w[:min(len(w), 12)], " "), nil
			})
			if err != nil {
				return scaleStepsOutput{}, err
			}
			return sluice.Step(ctx, "store", func(context.Context) (scaleStepsOutput, error) {
				return scaleStepsOutput{I: ev.Data.I, Summary: summary, Words: len(strings.Fields(text))}, nil
			})
		})
	if err != nil {
		return err
	}
	err = sluice.Register(app, run.Function{ID: scaleFail, Event: "bench/fail", Concurrency: conc, Retries: run.NoRetries},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (int, error) {
			if _, err := sluice.Step(ctx, "load", func(context.Context) (int, error) { return ev.Data.I, nil }); err != nil {
				return 0, err
			}
			return sluice.Step(ctx, "check", func(context.Context) (int, error) {
				return 0, sluice.NonRetriable(fmt.Errorf("document %d: %s", ev.Data.I, scaleFailReason))
			})
		})
	if err != nil {
		return err
	}
	// One run in a window longer than any bench: every later event of it
	// is dropped and recorded.
	err = sluice.Register(app, run.Function{ID: scaleLimited, Event: "bench/limited", Concurrency: conc,
		RateLimit: &run.RateLimit{Limit: 1, Period: 1_000_000 * time.Hour}},
		func(ctx *sluice.Context, ev sluice.Event[scaleEvent]) (int, error) { return ev.Data.I, nil })
	if err != nil {
		return err
	}
	return sluice.RegisterBackfill(app, itemsBackfill(
		run.Backfill{ID: scaleBackfill, MaxBatch: scaleBatch, InFlight: scaleInFlight, PendingSQL: backfillPending, MaxRejects: 1}, src,
		func(key string) error {
			if scaleRefused(key) {
				return sluice.Reject("not English")
			}
			return nil
		}))
}

// scaleRefused reports whether the backfill refuses an item's output: one
// item in a thousand, which MaxRejects 1 parks at once.
func scaleRefused(key string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(key, "item-"))
	return err == nil && n%1000 == 7
}

// scaleFunctions are the functions whose runs the bench seeds.
// scaleFailReason is the text of scaleFail's failures.
const scaleFailReason = "no text to summarize"

var scaleFunctions = []string{scaleOK, scaleSteps, scaleFail, scaleLimited}

// seed fills the database, then stops the app that did.
func (b *scaleBench) seed(ctx context.Context, rep *scaleReport) error {
	began := time.Now()
	t := time.Now()
	if _, err := seedBackfill(ctx, b.db, b.items); err != nil {
		return fmt.Errorf("the app table of %d items: %w", b.items, err)
	}
	rep.Seeding.AppTableS = time.Since(t).Seconds()
	var err error
	if b.src, err = openBenchPool(ctx, b.db, 4); err != nil {
		return err
	}
	app, err := b.app(ctx, benchPoll)
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())
	st, err := store.Open(ctx, b.db)
	if err != nil {
		return err
	}
	defer st.Close()
	b.itemsFrom = time.Now()
	if err := app.Start(ctx); err != nil {
		return err
	}
	// On st's pool, which the client closes: it closes after st's last
	// use, before st's deferred Close.
	runs, err := dbosRunsOn(ctx, st)
	if err != nil {
		return err
	}
	defer runs.close()
	job, err := b.waitItems(ctx, st)
	if err != nil {
		return fmt.Errorf("the backfill: %w", err)
	}
	b.itemsTo = time.Now()
	rep.Seeding.ItemsS = b.itemsTo.Sub(b.itemsFrom).Seconds()
	rep.Seeding.ItemsPerS = float64(b.items) / rep.Seeding.ItemsS
	rep.Items = map[string]int64{"saved": job.Saved, "parked": job.Parked, "pending": job.Pending, "rejected": job.Rejected}

	t = time.Now()
	b.runsFrom = t
	if err := b.seedRuns(ctx, app, runs, rep); err != nil {
		return fmt.Errorf("the runs: %w", err)
	}
	b.runsTo = time.Now()
	rep.Seeding.RunsS = time.Since(t).Seconds()
	rep.Seeding.RunsPerS = float64(b.runs) / rep.Seeding.RunsS

	t = time.Now()
	if rep.HistorySamples, err = seedScaleHistory(ctx, st, time.Now()); err != nil {
		return fmt.Errorf("the samples: %w", err)
	}
	rep.Seeding.HistoryS = time.Since(t).Seconds()
	rep.Seeding.TotalS = time.Since(began).Seconds()
	if rep.Seeding.DatabaseBytes, err = databaseSize(ctx, b.src, b.db); err != nil {
		return err
	}
	return nil
}

// waitItems waits until every item of the backfill is saved or parked.
func (b *scaleBench) waitItems(ctx context.Context, st store.Store) (store.Job, error) {
	for {
		j, err := st.Job(ctx, scaleBackfill)
		switch {
		case errors.Is(err, store.ErrNoJob):
		case err != nil:
			return j, err
		case j.Saved+j.Parked == int64(b.items):
			return j, nil
		case j.ConsecutiveFailures >= 3:
			return j, fmt.Errorf("failed %d runs in a row: %s", j.ConsecutiveFailures, j.LastError)
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scaleKind is the function the i-th event goes to: the first to the
// rate-limited one (its one run), then of every ten, one that fails, two of
// three steps and seven of one.
func scaleKind(i int) string {
	switch {
	case i == 0:
		return "bench/limited"
	case i%10 == 0:
		return "bench/fail"
	case i%10 == 3 || i%10 == 6:
		return "bench/steps"
	}
	return "bench/ok"
}

// seedRuns sends the events of b.runs runs, and then events the rate limit
// drops, from scaleSenders goroutines that wait while more than
// scaleBacklog runs are queued, and waits until every run has ended.
func (b *scaleBench) seedRuns(ctx context.Context, app *sluice.App, runs *dbosRuns, rep *scaleReport) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &scaleSender{b: b, app: app, cancel: cancel, drops: min(max(b.runs/100, 1), 1000), tag: strconv.FormatInt(time.Now().UnixNano(), 36)}
	// The rate-limited function's one run first, before any event it
	// drops.
	sent, err := app.Send(ctx, scaleKind(0), s.tag+"-0", scaleEvent{})
	if err != nil {
		return fmt.Errorf("send event 0: %w", err)
	}
	if len(sent) != 1 || sent[0].Status != "queued" {
		return fmt.Errorf("event 0 (%s): %+v, want one run queued", scaleKind(0), sent)
	}
	s.next.Store(1)
	var wg sync.WaitGroup
	for range scaleSenders {
		wg.Go(func() { s.send(ctx) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if err := s.waitRuns(ctx, runs, done); err != nil {
		return err
	}
	if err := b.countRuns(runs, rep); err != nil {
		return err
	}
	if len(s.stepsRuns) == 0 {
		return errors.New("no run of three steps was started")
	}
	slices.Sort(s.stepsRuns)
	b.stepsRun = s.stepsRuns[len(s.stepsRuns)/2]
	rep.Dropped = s.drops
	rep.Seeding.SendRetries = int(s.retries.Load())
	return nil
}

// scaleSender is the seeding's senders: what they share.
type scaleSender struct {
	b      *scaleBench
	app    *sluice.App
	cancel context.CancelCauseFunc // with the first send that failed
	drops  int                     // events sent after the runs, for the rate limit to drop
	tag    string                  // new in every invocation: names its events

	next, backlog, retries atomic.Int64
	mu                     sync.Mutex
	stepsRuns              []string // the runs of three steps started
}

// send sends the next event, in turn with the other senders, until every
// event is sent or one failed.
func (s *scaleSender) send(ctx context.Context) {
	for {
		i := int(s.next.Add(1) - 1)
		if i >= s.b.runs+s.drops || ctx.Err() != nil {
			return
		}
		for s.backlog.Load() > scaleBacklog && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		name := scaleKind(i)
		if i >= s.b.runs {
			name = "bench/limited"
		}
		sent, err := s.app.Send(ctx, name, s.tag+"-"+strconv.Itoa(i), scaleEvent{I: i})
		again := false
		for try := 1; try < scaleSendTries && errors.As(err, new(*sqlite.LockedError)); try++ {
			s.retries.Add(1)
			again = true
			sent, err = s.app.Send(ctx, name, s.tag+"-"+strconv.Itoa(i), scaleEvent{I: i})
		}
		if err != nil {
			s.cancel(fmt.Errorf("send event %d: %w", i, err))
			return
		}
		want := "queued"
		if i >= s.b.runs {
			want = "dropped"
		}
		if again && len(sent) == 1 && sent[0].Status == "existing" && want == "queued" {
			sent[0].Status = want // the first send had started it
		}
		if len(sent) != 1 || sent[0].Status != want {
			s.cancel(fmt.Errorf("event %d (%s): %+v, want one run %s", i, name, sent, want))
			return
		}
		if want == "queued" {
			s.backlog.Add(1)
		}
		if name == "bench/steps" {
			s.mu.Lock()
			s.stepsRuns = append(s.stepsRuns, sent[0].RunID)
			s.mu.Unlock()
		}
	}
}

// waitRuns counts the backlog again from the database every 200 ms (the
// senders add their runs to it in between) until the senders are done and
// no run is left to end.
func (s *scaleSender) waitRuns(ctx context.Context, runs *dbosRuns, done chan struct{}) error {
	sending := true
	for {
		counts, err := runs.countUnended(scaleFunctions...)
		if err != nil {
			if c := context.Cause(ctx); c != nil {
				return c
			}
			return fmt.Errorf("count the runs not ended: %w", err)
		}
		n := counts.of(dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusPending)
		s.backlog.Store(int64(n))
		if !sending && n == 0 {
			return nil
		}
		select {
		case <-done:
			sending = false
			if c := context.Cause(ctx); c != nil {
				return c
			}
			done = nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// countRuns counts the seeded runs by status, as the API names them, and
// checks that every one ended completed or failed.
func (b *scaleBench) countRuns(runs *dbosRuns, rep *scaleReport) error {
	counts, err := runs.countByStatus(scaleFunctions...)
	if err != nil {
		return err
	}
	rep.Runs = map[string]int{}
	for status, n := range counts {
		name := string(status)
		switch status {
		case dbos.WorkflowStatusSuccess:
			name = string(run.Completed)
		case dbos.WorkflowStatusError:
			name = string(run.Failed)
		}
		rep.Runs[name] += n
	}
	if total := rep.Runs[string(run.Completed)] + rep.Runs[string(run.Failed)]; total != b.runs || len(rep.Runs) != 2 {
		return fmt.Errorf("the engine's tables hold %v, want %d runs completed or failed", rep.Runs, b.runs)
	}
	return nil
}

// seedScaleHistory records a day of minute samples, ending at now, of each of
// the key's flows, a flow's day in one call, and returns how many.
func seedScaleHistory(ctx context.Context, st store.Store, now time.Time) (int, error) {
	end := now.UTC().Truncate(time.Minute)
	n := 0
	for fi, f := range scaleFlows {
		day := make([]store.Sample, 0, 24*60)
		for m := range 24 * 60 {
			s := store.Sample{At: end.Add(-time.Duration(m) * time.Minute), Flow: f.Name, Source: "app", State: string(health.Progressing),
				Done: int64(40 + (m*7+fi*13)%60), Remaining: int64(24*60 - m), Admitted: int64(20 + (m*11+fi)%40)}
			s.Tokens = s.Admitted * 900
			if m%97 == fi {
				s.Rejections = map[string]int64{"tpm": 1}
			}
			day = append(day, s)
		}
		if err := st.RecordSamples(ctx, day); err != nil {
			return n, err
		}
		n += len(day)
	}
	return n, nil
}
