package sluice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// The provider's "request too large" is the only place Groq reveals OTPM:
// once told, the governor refuses such calls before any is sent.
func TestTooLargeTeachesTheLimit(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		model, client := simProvider(t, governor.Limits{governor.OTPM: 1000})
		// The key's OTPM limit is not configured: the provider has to say it.
		app := newApp(t, sluice.Config{DatabaseURL: url, Providers: []sluice.Provider{{Name: "groq", LLM: client, Limits: governor.Limits{governor.TPM: 100000}}}})
		registerAsk(t, app, run.Function{ID: "ask", Event: "ask"})
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := runTo(t, app, "first", ask{MaxTokens: 1252})
		if st.Status != "failed" || !strings.Contains(st.Error, "not retried") {
			t.Fatalf("too large for OTPM: run %s (%s), want failed and not retried", st.Status, st.Error)
		}
		if model.Stats().TooLarge != 1 {
			t.Fatalf("provider saw %d too-large calls, want 1", model.Stats().TooLarge)
		}
		stats, err := app.Stats(context.Background(), "groq")
		if err != nil {
			t.Fatal(err)
		}
		if got := stats.Limits[governor.OTPM].Max; got != 1000 {
			t.Fatalf("the governor's OTPM allowance is %d after the provider named 1,000", got)
		}
		st = runTo(t, app, "second", ask{MaxTokens: 1252})
		if st.Status != "failed" || !strings.Contains(st.Error, "OTPM") {
			t.Fatalf("second too-large call: run %s (%s), want refused naming OTPM", st.Status, st.Error)
		}
		if got := model.Stats().Requests; got != 1 {
			t.Fatalf("the provider received %d calls, want only the first: the second must be refused before it is sent", got)
		}
		if st := runTo(t, app, "fits", ask{MaxTokens: 900}); st.Status != "completed" {
			t.Fatalf("a call within OTPM: %s %s", st.Status, st.Error)
		}
	})
}

// A 429 names limits no header reports (Groq: RPM, TPD): the governor takes
// the allowance it names and holds that limit until the retry time.
func TestRateLimitTeachesTheLimit(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		model, client := simProvider(t, governor.Limits{governor.RPM: 1})
		app := newApp(t, sluice.Config{DatabaseURL: url, Providers: []sluice.Provider{{Name: "groq", LLM: client}}})
		registerAsk(t, app, run.Function{ID: "ask", Event: "ask", Retries: run.NoRetries})
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := runTo(t, app, "first", ask{MaxTokens: 50}); st.Status != "completed" {
			t.Fatalf("first call: %s %s", st.Status, st.Error)
		}
		if st := runTo(t, app, "second", ask{MaxTokens: 50}); st.Status != "failed" || !strings.Contains(st.Error, "RPM") {
			t.Fatalf("second call in the minute: run %s (%s), want the provider's RPM rejection", st.Status, st.Error)
		}
		if model.Stats().RejectedByLimit[governor.RPM] != 1 {
			t.Fatalf("provider rejections by RPM: %d, want 1", model.Stats().RejectedByLimit[governor.RPM])
		}
		stats, err := app.Stats(context.Background(), "groq")
		if err != nil {
			t.Fatal(err)
		}
		if got := stats.Limits[governor.RPM].Max; got != 1 {
			t.Fatalf("the governor's RPM allowance is %d after the provider named 1", got)
		}
		if got := stats.Flows[0].Rejections[governor.RPM]; got != 1 {
			t.Fatalf("flow %s counts %d RPM rejections, want 1", stats.Flows[0].Name, got)
		}
	})
}
