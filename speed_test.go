package sluice_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/run"
)

// An app on a clock 600 times as fast as the wall clock, against a
// simulator on the same clock, spends a key of 2 requests a minute as it
// would in real time — 6 calls take 2 minutes of its clock — and sleeps
// those minutes in a fifth of a second each: the governor's waits and the
// durable sleeps for quota are both divided by the speed. The wall clock
// here is the bubble's (see inBubble), which moves only while every
// party sleeps: how long the sleeps were is what it measures, whatever the
// load of the machine, and no call takes any of it in transit.
func TestSpeedCompressesQuotaWaits(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + t.TempDir() + "/speed.db"
	inBubble(t, func(t *testing.T) {
		const speed = 600
		clk := clock.New(speed)
		limits := governor.Limits{governor.RPM: 2}
		model, pc := simInBubble(t, limits, sim.ServerConfig{Now: clk.Now, Speed: speed})
		app := newApp(t, sluice.Config{
			DatabaseURL: url,
			Now:         clk.Now,
			Speed:       speed,
			Providers:   []sluice.Provider{{Name: "groq", Limits: limits, LLM: pc}},
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
		for _, id := range ids {
			st, err := app.Wait(context.Background(), id)
			if err != nil || st.Status != "completed" {
				t.Fatalf("run %s: %+v, %v", id, st, err)
			}
		}
		took, slept := clk.Now().Sub(began), time.Since(wall)
		if took < 2*time.Minute {
			t.Fatalf("6 calls at 2 a minute took %v of the app's clock, want at least 2m: the governor did not pace on it", took)
		}
		// Uncompressed, the third call's wait alone would be most of a
		// minute of the wall clock; compressed, the two minutes of waits
		// are 0.2 s, with the engine's polls of the wall clock on top.
		if slept > time.Second {
			t.Fatalf("6 calls took %v of the wall clock for %v of the app's: the waits for quota were not divided by the speed", slept, took)
		}
		st := model.Stats()
		if st.Succeeded != 6 || st.RejectedByStatus[429] != 0 {
			t.Fatalf("the provider answered %d and refused %d, want 6 and 0", st.Succeeded, st.RejectedByStatus[429])
		}
		t.Logf("6 calls took %v of the app's clock in %v of the wall clock", took.Round(time.Second), slept)
	})
}

func TestSpeedIsBounded(t *testing.T) {
	t.Parallel()
	for _, s := range []float64{-1, 0.5, math.NaN(), math.Inf(1), sluice.MaxSpeed + 1} {
		_, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: "sqlite:" + t.TempDir() + "/x.db", Speed: s})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("want a number between 1 and %d (0 means 1)", sluice.MaxSpeed)) {
			t.Errorf("speed %v: %v, want the bounds named", s, err)
		}
	}
}

// TestConfigIsChecked: every duration a Config takes is refused negative,
// naming the field, before anything opens.
func TestConfigIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  sluice.Config
		want string
	}{
		{sluice.Config{MaxInlineWait: -time.Second}, "MaxInlineWait -1s is negative"},
		{sluice.Config{PollInterval: -time.Second}, "PollInterval -1s is negative"},
		{sluice.Config{RetryBase: -time.Second}, "RetryBase -1s is negative"},
		{sluice.Config{RetryMax: -time.Second}, "RetryMax -1s is negative"},
		{sluice.Config{HealthEvery: -time.Second}, "HealthEvery -1s is negative"},
		{sluice.Config{HistoryEvery: -time.Second}, "HistoryEvery -1s is negative"},
		{sluice.Config{RetryBase: time.Minute, RetryMax: time.Second}, "RetryBase 1m0s is above RetryMax 1s"},
	} {
		dir := t.TempDir()
		tc.cfg.DatabaseURL = "sqlite:" + dir + "/x.db"
		_, err := sluice.New(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
		if _, statErr := os.Stat(dir + "/x.db"); statErr == nil {
			t.Errorf("%q: the database was created", tc.want)
		}
	}
}
