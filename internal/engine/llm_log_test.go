package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// A call the governor refuses up front and a call the provider rejects
// each get a log line naming the limit and the numbers.
func TestProviderLogsRefusalsAndRejections(t *testing.T) {
	t.Parallel()
	provLimits, err := govtext.Limits("rpm=1")
	if err != nil {
		t.Fatal(err)
	}
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: provLimits, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	client, err := llm.NewClient(llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq})
	if err != nil {
		t.Fatal(err)
	}
	// The governor knows only OTPM, so the provider's RPM rejects the second call.
	gov, err := governor.New(governor.Config{Key: "groq", Limits: governor.Limits{governor.OTPM: 100}})
	if err != nil {
		t.Fatal(err)
	}
	est, err := llm.NewEstimator(llm.EstimatorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.Buffer
	p := &engine.Provider{Name: "groq", Client: client, Governor: gov, Estimator: est,
		Logger: slog.New(slog.NewTextHandler(&log, nil))}
	req := func(maxTokens int) *llm.ChatRequest {
		return &llm.ChatRequest{Model: "sim-model", MaxTokens: maxTokens, Messages: []llm.Message{{Role: "user", Content: "hi"}}}
	}
	ctx := context.Background()
	if _, err := p.Call(ctx, "titles", req(500)); err == nil {
		t.Fatal("a call needing 500 output tokens under OTPM 100 was not refused")
	}
	// The refusal counts once under its flow.
	if st := gov.Stats(time.Now()); len(st.Flows) != 1 || st.Flows[0].Refusals[governor.OTPM] != 1 {
		t.Errorf("flows after one refusal: %+v, want titles with one OTPM refusal", st.Flows)
	}
	if _, err := p.Call(ctx, "titles", req(20)); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err = p.Call(ctx, "titles", req(20))
	if _, ok := errors.AsType[*llm.RateLimitError](err); !ok {
		t.Fatalf("second call within the provider's RPM 1: %v, want a rate limit", err)
	}
	for _, want := range []string{
		`msg="sluice: refused a call that can never fit" key=groq flow=titles limit=otpm needs=500 allowance=100`,
		`msg="sluice: the provider rejected a call" key=groq flow=titles status=429 limit=rpm allowance=1`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, log.String())
		}
	}
}
