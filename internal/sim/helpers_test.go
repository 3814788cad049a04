package sim

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
)

// t0 is a whole minute (and whole day) of the Unix clock, so fixed windows
// start there.
var t0 = time.Date(2026, 10, 18, 0, 0, 0, 0, time.UTC)

// limits reads "rpm=50,tpm=2000" as governor.Limits.UnmarshalText does, for
// literal specs only.
func limits(s string) governor.Limits {
	ls, err := govtext.Limits(s)
	if err != nil {
		panic(err)
	}
	return ls
}

// servedModel is the model of cfg as a Server serves it: with its headers
// and error bodies (ModelConfig.Wire). A cfg the model refuses fails t.
func servedModel(t testing.TB, cfg forecast.ModelConfig) *forecast.Model {
	t.Helper()
	cfg.Wire = true
	m, err := forecast.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
