package main

import (
	"os"
	"path/filepath"

	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/chart/charttest"
)

// TestPlanSeedTable: the plan of DevPick's jobs as configured on 18 October
// gives the post-mortem's own figure (184,200 tokens a day, 92 % of TPD),
// in the JSON shape docs/plan.md documents, and as a table.
func TestPlanSeedTable(t *testing.T) {
	t.Parallel()
	const file = "../../internal/plan/testdata/devpick-10-18.yaml"
	code, out, errOut := runCLI("plan", "--scenario", file, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct {
		Limits map[string]struct {
			Limit  int64   `json:"limit"`
			Demand float64 `json:"demand"`
			Ratio  float64 `json:"ratio"`
		} `json:"limits"`
		Fit   []map[string]any `json:"fit"`
		Flows map[string]struct {
			EtaHours *float64 `json:"eta_hours"`
		} `json:"flows"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if tpd := p.Limits["tpd"]; tpd.Limit != 200_000 || tpd.Demand != 184_200 || tpd.Ratio != 0.921 {
		t.Errorf("tpd %+v", tpd)
	}
	if p.Fit == nil || p.Flows["summary"].EtaHours == nil {
		t.Errorf("fit %v, summary %+v: want a list and an ETA", p.Fit, p.Flows["summary"])
	}
	code, out, _ = runCLI("plan", "--scenario", file)
	for _, want := range []string{"184,200", "92.1", "tokens per day: the steady demand is 184,200 tokens a day (92 %)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, table without %q:\n%s", code, want, out)
		}
	}
}

// TestPlanWhatIf: --set and --drop-flow plan the changed configuration
// beside the first; a bad change is refused, naming it.
func TestPlanWhatIf(t *testing.T) {
	t.Parallel()
	const file = "../../internal/bench/testdata/devpick.yaml"
	code, out, errOut := runCLI("plan", "--scenario", file, "--json", "--set", "tpd=500000", "--drop-flow", "title")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	type side struct {
		Limits map[string]struct{ Limit int64 } `json:"limits"`
		Flows  map[string]struct {
			EtaHours *float64 `json:"eta_hours"`
		} `json:"flows"`
	}
	var w struct {
		Changes []string `json:"changes"`
		Base    side     `json:"base"`
		WhatIf  side     `json:"what_if"`
	}
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatal(err)
	}
	if strings.Join(w.Changes, " ") != "--set tpd=500000 --drop-flow title" {
		t.Errorf("changes %q", w.Changes)
	}
	if w.Base.Limits["tpd"].Limit != 200_000 || w.WhatIf.Limits["tpd"].Limit != 500_000 {
		t.Errorf("tpd %d → %d", w.Base.Limits["tpd"].Limit, w.WhatIf.Limits["tpd"].Limit)
	}
	if _, ok := w.WhatIf.Flows["title"]; ok || len(w.Base.Flows) != 3 {
		t.Errorf("flows %v → %v: want title dropped", w.Base.Flows, w.WhatIf.Flows)
	}
	// More TPD and no titles: the summaries end sooner.
	b, a := w.Base.Flows["summary"].EtaHours, w.WhatIf.Flows["summary"].EtaHours
	if b == nil || a == nil || !(*a < *b) {
		t.Errorf("summary ETA %v → %v: want sooner", b, a)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "flows.summary.wieght=2"}, "--set flows.summary.wieght=2: flows[1].wieght: unknown key"},
		{[]string{"--set", "tpd"}, `--set "tpd": want PATH=VALUE`},
		{[]string{"--drop-flow", "summary"}, `--drop-flow summary: flows[1].after: "summary" names no flow`},
		{[]string{"--stall-after", "0s"}, "--stall-after 0s: want a positive duration"},
	} {
		code, _, errOut := runCLI(append([]string{"plan", "--scenario", file}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestPlanSVG: plan --svg draws the simulation behind a plan and its
// what-if side by side: a first panel with both, then each one's progress
// and limit use, nothing outside its frame.
func TestPlanSVG(t *testing.T) {
	t.Parallel()
	svg := filepath.Join(t.TempDir(), "plan.svg")
	code, _, errOut := runCLI("plan", "--scenario", "../../internal/bench/testdata/devpick.yaml", "--set", "tpd=500000", "--svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	panels := charttest.Panels(t, charttest.Parse(t, data))
	if len(panels) != 5 {
		t.Fatalf("%d panels, want both side by side, then two for each", len(panels))
	}
	for _, p := range panels {
		charttest.CheckInside(t, p)
	}
	for _, want := range []string{"sluice plan: devpick, the governor simulated", "what if"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the chart does not say %q", want)
		}
	}
}

// TestPlanTargets: the plan of a scenario with targets gives each target's
// demand, money and budget, as a table and in the JSON.
func TestPlanTargets(t *testing.T) {
	t.Parallel()
	const file = "../../internal/bench/testdata/primary-outage.yaml"
	code, out, errOut := runCLI("plan", "--scenario", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Targets (the demand sluice's routes give each", "BUDGET RUNS OUT", "primary", "fallback"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "LIMIT  PER") {
		t.Errorf("the plan shows the key's empty limits table:\n%s", out)
	}
	code, out, errOut = runCLI("plan", "--scenario", file, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct {
		Targets []struct {
			Name        string  `json:"name"`
			MoneyPerDay float64 `json:"money_per_day"`
			ItemsPerDay float64 `json:"items_per_day"`
		} `json:"targets"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Targets) != 2 || p.Targets[0].Name != "primary" || p.Targets[0].MoneyPerDay <= 0 || p.Targets[1].ItemsPerDay <= 0 {
		t.Errorf("targets %+v", p.Targets)
	}
}

// TestPlanFlowBudgets: a flow with a budget of its own gets a row of its
// money against it, in the text and in the JSON; a plan without one has
// no such table.
func TestPlanFlowBudgets(t *testing.T) {
	t.Parallel()
	const file = "../../internal/bench/testdata/flow-budget.yaml"
	code, text, errOut := runCLI("plan", "--scenario", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, js, errOut := runCLI("plan", "--scenario", file, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct {
		Flows map[string]struct {
			MoneyPerDay *float64 `json:"money_per_day"`
			BudgetDay   float64  `json:"budget_day"`
			DayBudget   *struct {
				RunsOutHours *float64 `json:"runs_out_hours"`
			} `json:"day_budget"`
		} `json:"flows"`
	}
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	intern, team := p.Flows["intern"], p.Flows["team"]
	if intern.MoneyPerDay == nil || intern.BudgetDay != 0.5 || intern.DayBudget == nil || intern.DayBudget.RunsOutHours == nil {
		t.Fatalf("intern %+v, want its money against its budget of 0.50 a day, run out", intern)
	}
	if team.MoneyPerDay != nil || team.DayBudget != nil {
		t.Errorf("team has no budget, but its plan has money against one: %+v", team)
	}
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^ *intern +%.2f +[0-9.]+ +0\.50 +- +day: at %d h *$`, *intern.MoneyPerDay, int64(*intern.DayBudget.RunsOutHours)))
	if !row.MatchString(text) {
		t.Errorf("the plan has no row of intern's money against its budget (%s):\n%s", row, text)
	}
	for _, want := range []string{"Flows' own budgets", "BUDGET RUNS OUT"} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan has no %q:\n%s", want, text)
		}
	}
	_, table, _ := strings.Cut(text, "Flows' own budgets")
	table, _, _ = strings.Cut(table, "Warnings")
	if strings.Contains(table, "team") {
		t.Errorf("team, without a budget, is in the budgets' table:\n%s", text)
	}
	code, text, errOut = runCLI("plan", "--scenario", "../../internal/bench/testdata/devpick.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(text, "own budgets") {
		t.Errorf("a plan without flow budgets shows their table:\n%s", text)
	}
}
