package sluice_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// An app on a clock 600 times as fast as the wall clock, against a
// simulator on the same clock, spends a key of 2 requests a minute as it
// would in real time — 6 calls take 2 minutes of its clock — and sleeps
// those minutes in a fifth of a second each: the governor's waits and the
// durable sleeps for quota are both divided by the speed.
func TestSpeedCompressesQuotaWaits(t *testing.T) {
	t.Parallel()
	const speed = 600
	clk := clock.New(speed)
	limits := governor.Limits{governor.RPM: 2}
	model, srv := simOn(t, clk, limits)
	app := newApp(t, sluice.Config{
		DatabaseURL: "sqlite:" + t.TempDir() + "/speed.db",
		Now:         clk.Now,
		Speed:       speed,
		// A minute of lag is 100 ms of the wall clock: a loaded machine's
		// scheduling delays, multiplied by the speed, stay within it.
		Providers: []sluice.Provider{{Name: "groq", Limits: limits, Lag: time.Minute,
			LLM: llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq}}},
	})
	registerAsk(t, app, run.Function{ID: "ask", Event: "ask"})
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	began, wall := clk.Now(), time.Now()
	var ids []string
	for i := range 6 {
		sent, err := app.Send(context.Background(), "ask", fmt.Sprint("call-", i), ask{MaxTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sent[0].RunID)
	}
	// Uncompressed, the durable sleeps alone would take minutes of wall
	// time; compressed they take well under a second each.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		st, err := app.Wait(ctx, id)
		if err != nil {
			t.Fatalf("run %s did not end in 30 s of wall time (%v): quota waits are not compressed", id, err)
		}
		if st.Status != "completed" {
			t.Fatalf("run %s: %s %s", id, st.Status, st.Error)
		}
	}
	if took := clk.Now().Sub(began); took < 2*time.Minute {
		t.Fatalf("6 calls at 2 a minute took %v of the app's clock, want at least 2m: the governor did not pace on it", took)
	}
	st := model.Stats()
	if st.Succeeded != 6 || st.RejectedByStatus[429] != 0 {
		t.Fatalf("the provider answered %d and refused %d, want 6 and 0", st.Succeeded, st.RejectedByStatus[429])
	}
	t.Logf("6 calls took %v of the app's clock in %v of wall time", clk.Now().Sub(began).Round(time.Second), time.Since(wall).Round(time.Millisecond))
}

func TestSpeedIsBounded(t *testing.T) {
	t.Parallel()
	for _, s := range []float64{-1, sluice.MaxSpeed + 1} {
		if _, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: "sqlite:" + t.TempDir() + "/x.db", Speed: s}); err == nil {
			t.Errorf("speed %v accepted", s)
		}
	}
}

// simOn starts a simulated Groq key of limits on clk, stopped when t ends.
func simOn(t *testing.T, clk *clock.Clock, limits governor.Limits) (*sim.Model, *sim.Server) {
	t.Helper()
	model, err := sim.NewModel(sim.Config{Profile: "groq", Limits: limits, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{Now: clk.Now, Speed: clk.Speed()})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return model, srv
}
