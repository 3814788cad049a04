package llm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
)

// The simulator writes its answers with llm's wire formats, so a test of
// the client against it is outside the package.

// TestSimulatorTimeoutFault: the first-byte deadline ends a call the
// simulator's timeout fault holds (for 10 min) with a retryable Timeout.
func TestSimulatorTimeoutFault(t *testing.T) {
	t.Parallel()
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Wire: true, Faults: forecast.Faults{Timeout: 1}})
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	// The defaults but a shorter first-byte deadline, so the test is quick.
	const d = 300 * time.Millisecond
	c, err := llm.NewClient(llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq, DefaultMaxTokens: 10,
		Timeouts: llm.Timeouts{FirstByte: d}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Chat(context.Background(), &llm.ChatRequest{Model: "sim-model", Messages: []llm.Message{{Role: "user", Content: "hi"}}})
	took := time.Since(start)
	var te *llm.TransportError
	if !errors.As(err, &te) || te.Kind != llm.Timeout {
		t.Fatalf("err = %#v, want a *TransportError of kind Timeout", err)
	}
	if want := "within 300ms (first-byte deadline)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to say %q", err, want)
	}
	if !llm.Retryable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v: Retryable %v, is DeadlineExceeded %v", err, llm.Retryable(err), errors.Is(err, context.DeadlineExceeded))
	}
	if took < d {
		t.Fatalf("failed after %v, before the %v deadline", took, d)
	}
}
