package store_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// Two processes on one database (two stores) that sample one job in the
// same millisecond make one sample of what both did: each one's counts
// add up, and the job's progress counts once. Were the second to replace
// the first, the first's items and calls would be lost to every report.
func TestSamplesOfTwoProcessesInOneMillisecondAddUp(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		a, b := testenv.OpenStore(t, url), testenv.OpenStore(t, url)
		at := time.Date(2026, 10, 19, 8, 1, 0, 0, time.UTC)
		if err := a.StartJob(ctx, "notes", at.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		// Both read 0 items done at the start of the interval; a read 5 at
		// its end, b, a little later, 7.
		sa := store.Sample{At: at, Flow: "notes", Source: "app", State: "progressing", Done: 5, DoneTo: 5, Remaining: 35,
			Admitted: 3, Tokens: 300, Rejections: map[string]int64{"tpm": 1}}
		sb := store.Sample{At: at, Flow: "notes", Source: "app", State: "progressing", Done: 7, DoneTo: 7, Remaining: 33,
			Admitted: 4, Tokens: 400, Rejections: map[string]int64{"tpm": 2, "rpm": 1}, Refusals: map[string]int64{"tpd": 1}}
		if err := a.RecordSamples(ctx, []store.Sample{sa}); err != nil {
			t.Fatal(err)
		}
		if err := b.RecordSamples(ctx, []store.Sample{sb}); err != nil {
			t.Fatal(err)
		}
		got, err := a.Samples(ctx, at, at.Add(time.Millisecond), "notes")
		if err != nil {
			t.Fatal(err)
		}
		want := store.Sample{At: at, Flow: "notes", Source: "app", State: "progressing", Done: 7, Remaining: 33,
			Admitted: 7, Tokens: 700, Rejections: map[string]int64{"tpm": 3, "rpm": 1}, Refusals: map[string]int64{"tpd": 1}}
		if len(got) != 1 || !sameSample(got[0], want) {
			t.Fatalf("samples of two processes in one millisecond: %+v\nwant one: %+v", got, want)
		}
	})
}

// Processes that record samples of one key at the same time lose none of
// them: each transaction adds to what the one before it wrote.
func TestSamplesOfProcessesAtOnceAddUp(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		stores := []store.Store{testenv.OpenStore(t, url), testenv.OpenStore(t, url)}
		base := time.Date(2026, 10, 19, 8, 0, 0, 0, time.UTC)
		if err := stores[0].StartJob(ctx, "notes", base); err != nil {
			t.Fatal(err)
		}
		const writers, rounds = 6, 4
		for r := range rounds {
			at := base.Add(time.Duration(r+1) * time.Minute)
			// Writer w read the job's items done rise from r×writers to
			// r×writers+w+1: between them, the round's progress is writers
			// items.
			start := make(chan struct{})
			errs := make(chan error, writers)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					<-start
					from, to := int64(r*writers), int64(r*writers+w+1)
					smp := store.Sample{At: at, Flow: "notes", Source: "app", Done: to - from, DoneFrom: from, DoneTo: to,
						Admitted: 1, Tokens: 10, Rejections: map[string]int64{"tpm": 1}}
					if err := stores[w%len(stores)].RecordSamples(ctx, []store.Sample{smp}); err != nil {
						errs <- fmt.Errorf("writer %d: %w", w, err)
					}
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			got, err := stores[0].Samples(ctx, at, at.Add(time.Millisecond), "notes")
			if err != nil {
				t.Fatal(err)
			}
			want := store.Sample{At: at, Flow: "notes", Source: "app", Done: writers, Admitted: writers, Tokens: 10 * writers,
				Rejections: map[string]int64{"tpm": writers}}
			if len(got) != 1 || !sameSample(got[0], want) {
				t.Fatalf("round %d: samples of %d writers at once: %+v\nwant one: %+v", r, writers, got, want)
			}
		}
	})
}

func sameSample(got, want store.Sample) bool {
	return got.At.Equal(want.At) && got.Flow == want.Flow && got.Source == want.Source && got.State == want.State &&
		got.Reason == want.Reason && got.Done == want.Done && got.Remaining == want.Remaining &&
		got.Admitted == want.Admitted && got.Tokens == want.Tokens &&
		maps.Equal(got.Rejections, want.Rejections) && maps.Equal(got.Refusals, want.Refusals)
}
