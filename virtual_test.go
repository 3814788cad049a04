package sluice_test

import (
	"testing"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// Tests that pace calls over minutes of a key's windows run in a
// testing/synctest bubble (inBubble): every party — the apps, their
// database and the simulated provider — reads the bubble's clock, which
// moves only when every goroutine in it waits for a timer or for another
// one. A request in transit, a slow transaction or a loaded machine takes
// none of the clock's time, so what the provider counts is what the
// governor counted, whatever the load. Every read of the database costs
// real time while the clock stands still, so such a test polls as seldom
// as it can.
//
// A goroutine reading a socket is never idle to the bubble, so the
// parties talk over net.Pipe (simInBubble), and the database is an SQLite
// file: on PostgreSQL the engine keeps a connection reading notifications.

// inBubble runs f in a bubble: see testenv.InBubble.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	testenv.InBubble(t, f)
}

// simInBubble serves a simulated Groq key of limits on the bubble's clock
// (cfg's Now and Speed, when set), over a PipeNet, until t ends; it
// returns the model and the llm.Config that reaches it. Call it inside
// the bubble.
func simInBubble(t *testing.T, limits governor.Limits, cfg sim.ServerConfig) (*forecast.Model, llm.Config) {
	t.Helper()
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: limits, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	client := testenv.ServePipe(t, sim.NewServer(model, cfg))
	return model, llm.Config{BaseURL: "http://sim/v1", Profile: llm.Groq, HTTPClient: client}
}
