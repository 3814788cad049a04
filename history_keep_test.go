package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestHistoryKeep: a started app deletes the history's samples older than
// Config.HistoryKeep — every source's, a gateway's too — and keeps the
// others.
func TestHistoryKeep(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		now := time.Now().UTC()
		st := testenv.OpenStore(t, url)
		samples := []store.Sample{
			{At: now.Add(-72 * time.Hour), Flow: "titles", Source: "gateway", State: "progressing", Done: 1},
			{At: now.Add(-50 * time.Hour), Flow: "titles", Source: "app", State: "progressing", Done: 2},
			{At: now.Add(-time.Hour), Flow: "titles", Source: "app", State: "progressing", Done: 3},
		}
		if err := st.RecordSamples(ctx, samples); err != nil {
			t.Fatal(err)
		}
		app := newApp(t, sluice.Config{DatabaseURL: url, HealthEvery: 20 * time.Millisecond, HistoryKeep: 48 * time.Hour})
		if err := app.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var got []store.Sample
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // poll interval: until the app's first health poll has pruned (the deadline bounds it)
			var err error
			if got, err = st.Samples(ctx, now.Add(-7*24*time.Hour), now.Add(time.Hour), "titles"); err != nil {
				t.Fatal(err)
			}
			if len(got) < len(samples) || time.Now().After(deadline) {
				break
			}
		}
		if len(got) != 1 || got[0].Done != 3 {
			t.Fatalf("samples left %+v: want only the one of an hour ago (Done 3)", got)
		}
	})
}
