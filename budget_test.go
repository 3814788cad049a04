package sluice_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// A key's budget in money: calls are admitted on their worst-case price,
// settled with what they cost, a call that can never fit is refused at once
// naming the budget, and the spend survives a restart.
func TestBudgetIsALimit(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		model, client := simProvider(t, governor.Limits{})
		// $1 per million input tokens, $10 per million output; a day's
		// budget of $0.05: a call of ~10 prompt tokens and 1,000 max_tokens
		// is admitted at about $0.01 and costs what it answered.
		provider := sluice.Provider{Name: "groq", LLM: client, Price: governor.Price{Input: 1, Output: 10},
			Budget: sluice.Budget{Day: 0.05}, DayBurst: -1}

		first := newApp(t, sluice.Config{DatabaseURL: url, Providers: []sluice.Provider{provider}})
		registerAskUsage(t, first, run.Function{ID: "ask", Event: "ask"})
		if err := first.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var used governor.Cost
		for _, id := range []string{"a", "b", "c"} {
			st := runTo(t, first, id, ask{MaxTokens: 1000})
			if st.Status != "completed" {
				t.Fatalf("run %s: %s %s", id, st.Status, st.Error)
			}
			u, err := sluice.Result[llm.Usage](context.Background(), first, st.ID)
			if err != nil {
				t.Fatal(err)
			}
			used.Input += u.PromptTokens
			used.Output += u.CompletionTokens
		}
		stats, err := first.Stats(context.Background(), "groq")
		if err != nil {
			t.Fatal(err)
		}
		spent := stats.Limits[governor.MPD].Used
		// Settled with the usage the provider reported: its tokens at the prices.
		want := provider.Price.Of(used)
		if used.Output == 0 || used.Output >= 3000 || spent < want || spent > want+3 { // each call rounded up to a billionth
			t.Fatalf("spent %d billionths; the provider's usage %+v prices at %d", spent, used, want)
		}
		// A call whose worst case is over the whole budget: refused at once.
		calls := model.Stats().Requests
		st := runTo(t, first, "huge", ask{MaxTokens: 10_000}) // up to $0.10
		if st.Status != "failed" || !strings.Contains(st.Error, "budget of money per day is 0.05") || !strings.Contains(st.Error, "max_tokens ≤") {
			t.Fatalf("a call over the whole budget: %s %q, want failed naming the budget", st.Status, st.Error)
		}
		if got := model.Stats().Requests; got != calls {
			t.Fatalf("the provider received %d calls over the budget", got-calls)
		}
		if err := first.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}

		// After a restart the day's spend is still counted.
		second := newApp(t, sluice.Config{DatabaseURL: url, Providers: []sluice.Provider{provider}})
		registerAskUsage(t, second, run.Function{ID: "ask", Event: "ask", Timeout: 3 * time.Second})
		if err := second.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		stats, err = second.Stats(context.Background(), "groq")
		if err != nil {
			t.Fatal(err)
		}
		if got := stats.Limits[governor.MPD].Used; got != spent {
			t.Fatalf("after the restart %d billionths are counted spent, want the %d spent before it", got, spent)
		}
		// What is left of the budget is less than this call's worst case:
		// it waits (here until the run's deadline) and never reaches the provider.
		left := stats.Limits[governor.MPD].Max - spent
		maxTokens := int(left/10_000) + 100 // 10,000 billionths a token of output
		st = runTo(t, second, "over", ask{MaxTokens: maxTokens})
		if st.Status != "timed_out" || st.Step != "call" {
			t.Fatalf("a call past what is left of the budget: %s in %q (%s), want timed out waiting in step call", st.Status, st.Step, st.Error)
		}
		if got := model.Stats().Requests; got != calls {
			t.Fatalf("the provider received %d calls past the budget", got-calls)
		}
	})
}

// registerAskUsage registers a function making one governed call of the
// event's max_tokens, whose output is the usage the provider reported.
func registerAskUsage(t *testing.T, app *sluice.App, cfg run.Function) {
	t.Helper()
	err := sluice.Register(app, cfg, func(ctx *sluice.Context, ev sluice.Event[ask]) (llm.Usage, error) {
		resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{
			Model:     "sim-model",
			Messages:  []llm.Message{{Role: "user", Content: "Summarize the quarterly report."}},
			MaxTokens: ev.Data.MaxTokens,
		})
		if err != nil {
			return llm.Usage{}, err
		}
		return resp.Usage, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBudgetConfigurationErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    sluice.Provider
		want string
	}{
		{sluice.Provider{Name: "k", Budget: sluice.Budget{Day: 5}}, "providers[0] (k): a budget needs the key's price"},
		{sluice.Provider{Name: "k", Price: governor.Price{Input: 1}, Budget: sluice.Budget{Month: -1}}, "budget month -1: want an amount of money between 0 and"},
		{sluice.Provider{Name: "k", Price: governor.Price{Output: 2e6}}, "price output 2e+06: want money per million tokens between 0 and"},
	} {
		_, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: t.TempDir() + "/x.db", Providers: []sluice.Provider{tc.p}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.p, err, tc.want)
		}
	}
}
