package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/route"
)

func runRouted(t *testing.T, sc *forecast.Scenario, policies []string) map[string]forecast.Result {
	t.Helper()
	rep, err := Run(context.Background(), sc, policies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]forecast.Result{}
	for _, r := range rep.Results {
		out[r.Policy] = r
	}
	return out
}

// TestGroqTwoModelsPaid holds the acceptance of routing on
// groq-two-models-paid: two free Groq models and a paid fallback with a
// budget of 2.00 a day, a backlog far above the free quotas.
func TestGroqTwoModelsPaid(t *testing.T) {
	t.Parallel()
	sc := load(t, "groq-two-models-paid.yaml")
	res := runRouted(t, sc, RoutedPolicies)
	s, one := res[forecast.Sluice], res[forecast.SluiceOneKey]
	if s.WorkTokens < 19*one.WorkTokens/10 {
		t.Errorf("sluice work_tokens %d, want ≥ 1.9 × sluice-one-key's %d", s.WorkTokens, one.WorkTokens)
	}
	if n := s.ProviderRejections["429"]; n != 0 {
		t.Errorf("sluice drew %d provider 429s, want none", n)
	}
	budget := sc.Targets[sc.TargetIndex("openai-mini")].Budget.Day
	for _, tr := range s.Targets {
		for d, m := range tr.SpendByDay {
			if tr.BudgetDay != nil && m > *tr.BudgetDay {
				t.Errorf("sluice spent %.6f on %s on day %d, over its budget %.2f", m, tr.Name, d, *tr.BudgetDay)
			}
		}
		if tr.Name == "openai-mini" && (tr.BudgetDay == nil || *tr.BudgetDay != budget) {
			t.Errorf("openai-mini's budget_day %v, want %v", tr.BudgetDay, budget)
		}
	}
	if s.WorkPerDollar == nil {
		t.Fatal("sluice spent nothing")
	}
	for _, name := range []string{FixedFallback, LiteLLMShuffle, LiteLLMUsage} {
		r := res[name]
		if r.WorkPerDollar == nil {
			t.Errorf("%s spent nothing", name)
			continue
		}
		if *s.WorkPerDollar <= *r.WorkPerDollar {
			t.Errorf("sluice work_per_dollar %.1f, want above %s's %.1f", *s.WorkPerDollar, name, *r.WorkPerDollar)
		}
	}
	for name, r := range res {
		if r.DoubleRuns != 0 || r.Lost != 0 {
			t.Errorf("%s: double_runs %d, lost %d, want 0 and 0", name, r.DoubleRuns, r.Lost)
		}
	}
	// The rivals' budget is checked against spend recorded after calls
	// end, so their days may pass it; sluice's never do (above).
	t.Logf("work_tokens: sluice %d, sluice-one-key %d (×%.2f); work_per_dollar: sluice %.1f, fixed-fallback %.1f, litellm-shuffle %.1f, litellm-usage %.1f",
		s.WorkTokens, one.WorkTokens, float64(s.WorkTokens)/float64(one.WorkTokens), *s.WorkPerDollar,
		*res[FixedFallback].WorkPerDollar, *res[LiteLLMShuffle].WorkPerDollar, *res[LiteLLMUsage].WorkPerDollar)
}

// TestPrimaryOutage holds the acceptance of routing through an outage: on
// primary-outage, sluice's work moves to the fallback soon after the
// primary starts failing, and back once it is up again, and no item is run
// twice or lost.
func TestPrimaryOutage(t *testing.T) {
	t.Parallel()
	sc := load(t, "primary-outage.yaml")
	res := runRouted(t, sc, RoutedPolicies)
	s := res[forecast.Sluice]
	if len(s.Outages) != 1 {
		t.Fatalf("sluice outages %+v, want one", s.Outages)
	}
	o := s.Outages[0]
	flow := sc.Flows[0]
	fallback := sc.Targets[sc.TargetIndex("fallback")]
	// The calls that fail before the router takes the primary out
	// (route.DefaultFailures, 3 in a row) each answer after 100 ms, and the
	// flow backs off 1 s, then 2 s, then 4 s; then a call waits at most
	// max_wait on the fallback and takes its latency (±50 %).
	backoff := 7 * time.Second
	within := flow.MaxWait + backoff + route.DefaultFailures*100*time.Millisecond + fallback.Provider.Latency*3/2
	if o.FallbackAfterSeconds == nil || *o.FallbackAfterSeconds > within.Seconds() {
		t.Errorf("sluice fallback_after_seconds %v, want ≤ %.1f (max_wait %s + backoff %s + failed tries + the fallback's latency)",
			o.FallbackAfterSeconds, within.Seconds(), flow.MaxWait, backoff)
	}
	// Out for at most the router's max cooldown, then its next call (one
	// arrival slot at most away) and that call's latency.
	primary := sc.Targets[sc.TargetIndex("primary")]
	back := route.DefaultMaxCooldown + flow.ArrivalSlot() + primary.Provider.Latency*3/2
	if o.BackAfterSeconds == nil || *o.BackAfterSeconds > back.Seconds() {
		t.Errorf("sluice back_after_seconds %v, want ≤ %.1f (the router's max cooldown %s + an arrival + the primary's latency)",
			o.BackAfterSeconds, back.Seconds(), route.DefaultMaxCooldown)
	}
	for name, r := range res {
		if r.DoubleRuns != 0 || r.Lost != 0 {
			t.Errorf("%s: double_runs %d, lost %d, want 0 and 0", name, r.DoubleRuns, r.Lost)
		}
	}
	if f := s.Flows["summarize"]; f.DoneByTarget["fallback"] == 0 || f.DoneByTarget["primary"] == 0 {
		t.Errorf("sluice done by target %v, want work on both", f.DoneByTarget)
	}
	t.Logf("sluice: fallback after %.1f s, back after %.1f s", *o.FallbackAfterSeconds, *o.BackAfterSeconds)
}

// TestRoutedSameSeedSameReport replays a scenario with targets twice under
// every policy that applies: same seed, same report.
func TestRoutedSameSeedSameReport(t *testing.T) {
	t.Parallel()
	sc := load(t, "primary-outage.yaml")
	var reports [2][]byte
	for i := range reports {
		rep, err := Run(context.Background(), sc, RoutedPolicies, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for j := range rep.Results {
			rep.Results[j].WallSeconds = 0
		}
		reports[i], _ = json.Marshal(rep)
	}
	if string(reports[0]) != string(reports[1]) {
		t.Error("two replays of the same scenario and seed differ")
	}
	for _, key := range []string{`"targets":`, `"spend":`, `"work_per_dollar":`, `"double_runs":`, `"lost":`, `"outages":`, `"done_by_target":`} {
		if !strings.Contains(string(reports[0]), key) {
			t.Errorf("the report has no %s", key)
		}
	}
}

// TestOneKeyPoliciesRefuseTargets: the policies that model one key say so
// on a scenario with targets, and "all" there runs the routed ones.
func TestOneKeyPoliciesRefuseTargets(t *testing.T) {
	sc := load(t, "primary-outage.yaml")
	for _, name := range []string{"cookbook", "devpick-naive", "inngest-throttle", Greedy} {
		_, err := Run(context.Background(), sc, []string{name}, Options{})
		if err == nil || !strings.Contains(err.Error(), "models one provider key") {
			t.Errorf("%s on a scenario with targets: %v, want a refusal", name, err)
		}
	}
	if got := AllPolicies(sc); len(got) != len(RoutedPolicies) {
		t.Errorf("all on a scenario with targets is %v", got)
	}
	if got := AllPolicies(load(t, "devpick.yaml")); len(got) != len(Policies) {
		t.Errorf("all on a scenario without targets is %v", got)
	}
}

// TestSingleTargetReportUnchanged: a scenario without targets has none of
// the routed fields in its report.
func TestSingleTargetReportUnchanged(t *testing.T) {
	sc := load(t, "rolling-minute.yaml")
	rep, err := Run(context.Background(), sc, []string{forecast.Sluice}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	for _, key := range []string{`"targets"`, `"spend"`, `"work_per_dollar"`, `"double_runs"`, `"done_by_target"`} {
		if strings.Contains(string(b), key) {
			t.Errorf("the report of a scenario without targets has %s", key)
		}
	}
}
