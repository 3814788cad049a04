package plan

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/forecast"
)

func load(t *testing.T, path string) *forecast.Scenario {
	t.Helper()
	sc, err := forecast.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func make_(t *testing.T, sc *forecast.Scenario) *Plan {
	t.Helper()
	p, err := Make(context.Background(), sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

// The seed's own cost table, from its jobs as configured on 18 October:
// about 184,000 tokens a day, 92 % of TPD — and what the seed did not see:
// the provider charges the reservation of requests without max_tokens, and
// the analysis job's busiest minute asks more output than OTPM allows.
func TestSeedTable(t *testing.T) {
	p := make_(t, load(t, "testdata/devpick-10-18.yaml"))
	tpd := p.Limits["tpd"]
	if tpd.Demand != 184_200 || tpd.Ratio != 0.921 {
		t.Errorf("tpd demand %v (%v), want 184,200 (0.921)", tpd.Demand, tpd.Ratio)
	}
	for flow, want := range map[string]float64{"analysis": 105_000, "summary": 52_800, "title": 26_400} {
		if got := tpd.ByFlow[flow]; got != want {
			t.Errorf("tpd by %s: %v, want %v", flow, got, want)
		}
	}
	// 144 requests a day, each charged 1,000 output tokens more than its
	// real output would be on average: 130 % of TPD.
	if tpd.ChargedRatio <= 1 || tpd.Charged != 259_600 {
		t.Errorf("tpd charged %v (%v), want 259,600 (> 1)", tpd.Charged, tpd.ChargedRatio)
	}
	if otpm := p.Limits["otpm"]; otpm.Per != "minute" || otpm.Ratio <= 1 {
		t.Errorf("otpm %+v: want the busiest minute above the limit", otpm)
	}
	if !hasWarning(p, "tokens per day", "charges 259,600") || !hasWarning(p, "output tokens per minute", "245 %") {
		t.Errorf("warnings %q: want TPD's charge and OTPM's busiest minute named", p.Warnings)
	}
	sum := p.Flows["summary"]
	if !sum.Paced || sum.ItemsPerDay != 96 || sum.PacedDays == nil || *sum.PacedDays != 62.5 {
		t.Errorf("summary %+v: want paced, 96 a day, 62.5 days at its own pace", sum)
	}
	// Money: analysis 70,000 input and 35,000 output tokens a day.
	if a := p.Flows["analysis"]; a.CostPerDay == nil || !near(*a.CostPerDay, (70_000*0.29+35_000*0.59)/1e6, 0.01) {
		t.Errorf("analysis cost per day %v", a.CostPerDay)
	}
	if p.Money == nil || !near(p.Money.PerDay, 0.074, 0.02) {
		t.Errorf("money %+v", p.Money)
	}
}

// DevPick as sluice runs it: the requests that can never fit a per-minute
// limit, with the largest batch that does, and ETAs from the simulation.
func TestFitAndETAs(t *testing.T) {
	p := make_(t, load(t, "../bench/testdata/devpick.yaml"))
	want := map[string]Fit{
		"analysis/otpm": {Flow: "analysis", Limit: "otpm", BatchMax: 5, Request: 1_800, LimitValue: 1_000, FitsBatch: 2},
		"summary/tpm":   {Flow: "summary", Limit: "tpm", BatchMax: 30, Request: 16_900, LimitValue: 8_000, FitsBatch: 3},
		"summary/otpm":  {Flow: "summary", Limit: "otpm", BatchMax: 30, Request: 7_800, LimitValue: 1_000, FitsBatch: 3},
	}
	if len(p.Fit) != len(want) {
		t.Errorf("fit %+v, want %d entries", p.Fit, len(want))
	}
	for _, f := range p.Fit {
		if w, ok := want[f.Flow+"/"+f.Limit]; !ok || f != w {
			t.Errorf("fit %+v, want %+v", f, w)
		}
	}
	for _, name := range []string{"summary", "title"} {
		f := p.Flows[name]
		// A week is not enough for 6,000 summaries on 200,000 tokens a day,
		// so the ETA is the last day's rate carried on.
		if f.EtaFrom != "extrapolated" || f.EtaHours == nil || *f.EtaHours <= p.SimulatedHours || f.StallRisk != "low" {
			t.Errorf("%s: %+v: want an extrapolated ETA after the run, low stall risk", name, f)
		}
	}
	// Titles wait for the summaries that feed them.
	if s, tt := p.Flows["summary"], p.Flows["title"]; s.EtaHours == nil || tt.EtaHours == nil || *tt.EtaHours < *s.EtaHours {
		t.Errorf("title ETA %v before summary's %v", tt.EtaHours, s.EtaHours)
	}
	if a := p.Flows["analysis"]; a.EtaFrom != "arrivals" || a.EtaHours != nil {
		t.Errorf("analysis %+v: want no ETA, arrivals only", a)
	}
}

// A backlog the simulation clears has a simulated ETA; a flow whose every
// request is too large never does its work and is a high risk.
func TestClearedAndNever(t *testing.T) {
	sc, err := forecast.Parse([]byte(`
name: small
duration: 24h
provider: {limits: {tpm: 10000, otpm: 500}}
flows:
  - {name: quick, backlog: 100, batch_max: 4, item_input_tokens: 100, item_output_tokens: 50, item_max_tokens: 60}
  - {name: huge, backlog: 10, item_input_tokens: 100, item_output_tokens: 50, item_max_tokens: 900}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := make_(t, sc)
	q := p.Flows["quick"]
	if q.EtaFrom != "simulated" || q.EtaHours == nil || *q.EtaHours <= 0 || *q.EtaHours > 24 || q.Remaining != 0 {
		t.Errorf("quick %+v: want cleared within the day", q)
	}
	h := p.Flows["huge"]
	if h.NeverFit != 10 || h.Done != 0 || h.StallRisk != "high" {
		t.Errorf("huge %+v: want all 10 never fit, high stall risk", h)
	}
	if !hasWarning(p, "huge: a request of even one item", "refuses it however long it waits") {
		t.Errorf("warnings %q", p.Warnings)
	}
}

func hasWarning(p *Plan, parts ...string) bool {
next:
	for _, w := range p.Warnings {
		for _, s := range parts {
			if !strings.Contains(w, s) {
				continue next
			}
		}
		return true
	}
	return false
}
