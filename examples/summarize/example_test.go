package summarize_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
)

// The pipeline against the provider simulator, with Groq's free-tier limits.
func Example() {
	ctx := context.Background()
	limits := governor.Limits{governor.RPM: 30, governor.TPM: 8000, governor.OTPM: 1000}
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: limits, Wire: true})
	if err != nil {
		log.Fatal(err)
	}
	provider := sim.NewServer(model, sim.ServerConfig{})
	if err := provider.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer provider.Stop(ctx)

	dir, _ := os.MkdirTemp("", "summarize")
	defer os.RemoveAll(dir)
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: filepath.Join(dir, "sluice.db"),
		Providers: []sluice.Provider{{
			Name:   "groq",
			LLM:    llm.Config{BaseURL: "http://" + provider.Addr() + "/v1", Profile: llm.Groq},
			Limits: limits,
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer app.Stop(ctx)
	if err := summarize.Register(app, summarize.Config{}); err != nil {
		log.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		log.Fatal(err)
	}
	sent, err := app.Send(ctx, summarize.Event, "upload-1", summarize.Doc{DocumentID: "d1"})
	if err != nil {
		log.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := app.Wait(wctx, sent[0].RunID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Status, model.Stats().Succeeded, "LLM calls")
	// Output: completed 2 LLM calls
}
