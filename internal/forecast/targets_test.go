package forecast

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/route"
)

const targetsBase = `duration: 4h
provider:
  profile: groq
  latency: 1s
targets:
  - name: free
    model: small
    limits: {rpm: 30, tpd: 500000}
  - name: paid
    model: mini
    profile: openai
    window: fixed
    latency: 2s
    limits: {tpm: 200000}
    price: {input: 0.15, cached_input: 0.075, output: 0.60}
    budget: {day: 2.00, month: 40}
    outages:
      - {start: 1h, duration: 30m, mode: 5xx}
      - {start: 2h, duration: 1m, mode: 429}
flows:
  - name: a
    backlog: 10
    targets: [paid, free]
    rule: ordered
    max_wait: 45s
  - name: b
`

func TestParseTargets(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(targetsBase))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Routed() || len(s.Targets) != 2 {
		t.Fatalf("targets = %+v", s.Targets)
	}
	free, paid := s.Targets[0], s.Targets[1]
	if free.Provider.Profile != "groq" || free.Provider.Latency != time.Second || free.Provider.FixedWindows ||
		free.Provider.Limits != (governor.Limits{governor.RPM: 30, governor.TPD: 500000}) || !free.Price.IsZero() || len(free.Outages) != 0 {
		t.Errorf("free = %+v", free)
	}
	if paid.Provider.Profile != "openai" || paid.Provider.Latency != 2*time.Second || !paid.Provider.FixedWindows ||
		paid.Provider.DefaultMaxTokens != DefaultMaxTokens || paid.Model != "mini" ||
		paid.Price != (governor.Price{Input: 0.15, CachedInput: 0.075, Output: 0.60}) || paid.Budget != (governor.Budget{Day: 2, Month: 40}) {
		t.Errorf("paid = %+v", paid)
	}
	wantOutages := []Outage{{Start: time.Hour, Duration: 30 * time.Minute, Mode: Outage5xx}, {Start: 2 * time.Hour, Duration: time.Minute, Mode: Outage429}}
	if len(paid.Outages) != 2 || paid.Outages[0] != wantOutages[0] || paid.Outages[1] != wantOutages[1] {
		t.Errorf("outages = %+v, want %+v", paid.Outages, wantOutages)
	}
	a, b := s.Flows[0], s.Flows[1]
	if a.Rule != route.Ordered || a.MaxWait != 45*time.Second || len(a.Targets) != 2 {
		t.Errorf("flow a = %+v", a)
	}
	if got := s.RouteOf(&a); len(got) != 2 || got[0] != 1 || got[1] != 0 {
		t.Errorf("route of a = %v, want [1 0]", got)
	}
	if got := s.RouteOf(&b); len(got) != 2 || got[0] != 0 || got[1] != 1 || b.Rule != route.Cheapest {
		t.Errorf("route of b = %v (rule %v), want every target in order", got, b.Rule)
	}
}

func TestParseTargetErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown target key", strings.Replace(targetsBase, "model: small", "model: small\n    region: eu", 1), []string{"targets[0].region: unknown key", "line 8"}},
		{"unknown price key", strings.Replace(targetsBase, "cached_input", "cachd", 1), []string{"targets[1].price.cachd: unknown key"}},
		{"bad mode", strings.Replace(targetsBase, "mode: 5xx", "mode: 502", 1), []string{`targets[1].outages[0].mode: "502" is not 5xx, overload, 429 or down`}},
		{"outage past the end", strings.Replace(targetsBase, "start: 2h, duration: 1m", "start: 3h, duration: 2h", 1), []string{"targets[1].outages[1].duration: the outage ends at 5h0m0s, after the scenario's duration, 4h0m0s"}},
		{"outage start past the end", strings.Replace(targetsBase, "start: 2h,", "start: 5h,", 1), []string{"targets[1].outages[1].start: 5h0m0s is not within"}},
		{"outage without duration", strings.Replace(targetsBase, "duration: 1m, ", "", 1), []string{"targets[1].outages[1].duration: 0s is not positive"}},
		{"unknown flow target", strings.Replace(targetsBase, "[paid, free]", "[paid, gratis]", 1), []string{`flows[0].targets[1]: "gratis" names no target`}},
		{"flow target twice", strings.Replace(targetsBase, "[paid, free]", "[paid, paid]", 1), []string{`flows[0].targets[1]: "paid" is named twice`}},
		{"bad rule", strings.Replace(targetsBase, "rule: ordered", "rule: random", 1), []string{`flows[0].rule: "random" is not cheapest or ordered`}},
		{"max wait too long", strings.Replace(targetsBase, "max_wait: 45s", "max_wait: 48h", 1), []string{"flows[0].max_wait: 48h0m0s is not between 0 and 24h0m0s"}},
		{"budget without price", strings.Replace(targetsBase, "limits: {rpm: 30, tpd: 500000}", "limits: {rpm: 30, tpd: 500000}\n    budget: {day: 1}", 1), []string{"targets[0].budget: needs the target's price"}},
		{"price too high", strings.Replace(targetsBase, "output: 0.60", "output: 2e6", 1), []string{"targets[1].price.output: 2e+06 is not between 0 and 1e+06"}},
		{"budget too high", strings.Replace(targetsBase, "day: 2.00", "day: 2e9", 1), []string{"targets[1].budget.day: 2e+09 is not between 0 and 1e+09"}},
		{"money as a limit", strings.Replace(targetsBase, "limits: {tpm: 200000}", "limits: {tpm: 200000, mpd: 5}", 1), []string{"targets[1].limits.mpd: is a budget of money"}},
		{"target name twice", strings.Replace(targetsBase, "name: paid", "name: free", 1), []string{`targets[1].name: "free" is already the name of targets[0]`}},
		{"target without name", strings.Replace(targetsBase, "  - name: free\n", "  -\n", 1), []string{"targets[0].name: missing or empty"}},
		{"target limit zero", strings.Replace(targetsBase, "rpm: 30,", "rpm: 0,", 1), []string{"targets[0].limits.rpm: 0 is not positive"}},
		{"target latency", strings.Replace(targetsBase, "latency: 2s", "latency: 2h", 1), []string{"targets[1].latency: 2h0m0s is more than the bound of 1h0m0s"}},
		{"provider limits beside targets", strings.Replace(targetsBase, "latency: 1s\n", "latency: 1s\n  limits: {rpm: 5}\n", 1), []string{"provider.limits: with targets, each target has its own limits"}},
		{"route without targets", "duration: 1h\nflows:\n  - name: a\n    targets: [x]\n", []string{"flows[0].targets: names targets, but the scenario lists none"}},
		{"max wait without targets", "duration: 1h\nflows:\n  - name: a\n    max_wait: 5s\n", []string{"flows[0].max_wait: is for a route"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error for:\n%s", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestTooManyTargets(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("duration: 1h\ntargets:\n")
	for i := range route.MaxTargets + 1 {
		b.WriteString("  - name: t" + strings.Repeat("x", i) + "\n")
	}
	b.WriteString("flows:\n  - name: a\n")
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "targets: 33 targets is more than the bound of 32") {
		t.Errorf("error %v, want the bound on targets", err)
	}
}

// TestOutageFailsWithoutCharge replays a scenario whose only target is
// down for its first half: every call then fails, none is charged or
// done, and sluice's work is done after the outage, each item once.
func TestOutageFailsWithoutCharge(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`duration: 2h
targets:
  - name: only
    limits: {rpm: 60}
    price: {input: 1, output: 1}
    outages: [{start: 0s, duration: 1h, mode: down}]
flows:
  - name: a
    backlog: 30
    prompt_tokens: 100
    item_output_tokens: 10
    item_max_tokens: 20
`))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := NewSluice(s)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Replay(context.Background(), s, Sluice, pol, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Targets[0]
	if tr.OutageFailures == 0 || res.Flows["a"].Done != 30 || tr.Done != 30 || res.DoubleRuns != 0 || res.Lost != 0 {
		t.Errorf("result %+v, target %+v", res.Flows["a"], tr)
	}
	// 30 calls of 100 input tokens and about 10 output, at 1 a million each.
	if tr.Spend < 30*100e-6 || tr.Spend > 30*113e-6 || res.WorkPerDollar == nil {
		t.Errorf("spend %v, want the 30 calls' usage at the price", tr.Spend)
	}
	if len(res.Outages) != 1 || res.Outages[0].BackAfterSeconds == nil {
		t.Errorf("outages %+v, want the target back after its outage", res.Outages)
	}
}
