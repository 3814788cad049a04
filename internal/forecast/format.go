package forecast

import (
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
)

// Format writes s in the scenario file format, so that Parse reads back the
// same scenario: what `sluice plan` shows of a scenario it derived from a
// configuration and what the store recorded, and what --set edits.
func Format(s *Scenario) ([]byte, error) {
	type flow struct {
		Name             string             `yaml:"name"`
		Priority         int                `yaml:"priority,omitempty"`
		Weight           float64            `yaml:"weight"`
		Backlog          int                `yaml:"backlog,omitempty"`
		ArrivalsPerDay   float64            `yaml:"arrivals_per_day,omitempty"`
		After            string             `yaml:"after,omitempty"`
		BatchMax         int                `yaml:"batch_max"`
		PromptTokens     int64              `yaml:"prompt_tokens,omitempty"`
		ItemInputTokens  int64              `yaml:"item_input_tokens,omitempty"`
		ItemOutputTokens int64              `yaml:"item_output_tokens,omitempty"`
		ItemMaxTokens    int64              `yaml:"item_max_tokens,omitempty"`
		Model            string             `yaml:"model,omitempty"`
		Every            string             `yaml:"every,omitempty"`
		PerRun           int                `yaml:"per_run,omitempty"`
		Gap              string             `yaml:"gap,omitempty"`
		Within           string             `yaml:"within,omitempty"`
		Targets          []string           `yaml:"targets,omitempty"`
		Rule             string             `yaml:"rule,omitempty"`
		MaxWait          string             `yaml:"max_wait,omitempty"`
		Budget           map[string]float64 `yaml:"budget,omitempty"`
	}
	type outage struct {
		Start    string `yaml:"start"`
		Duration string `yaml:"duration"`
		Mode     string `yaml:"mode"`
	}
	type target struct {
		Name             string             `yaml:"name"`
		Model            string             `yaml:"model,omitempty"`
		Profile          string             `yaml:"profile"`
		Window           string             `yaml:"window"`
		Accounting       string             `yaml:"accounting"`
		Latency          string             `yaml:"latency"`
		DefaultMaxTokens int64              `yaml:"default_max_tokens"`
		Faults           map[string]float64 `yaml:"faults"`
		Limits           map[string]int64   `yaml:"limits,omitempty"`
		Price            map[string]float64 `yaml:"price,omitempty"`
		Budget           map[string]float64 `yaml:"budget,omitempty"`
		Outages          []outage           `yaml:"outages,omitempty"`
	}
	p := s.Provider
	out := struct {
		Name     string `yaml:"name"`
		Duration string `yaml:"duration"`
		Seed     int64  `yaml:"seed"`
		Provider struct {
			Profile          string             `yaml:"profile"`
			Window           string             `yaml:"window"`
			Accounting       string             `yaml:"accounting"`
			Latency          string             `yaml:"latency"`
			DefaultMaxTokens int64              `yaml:"default_max_tokens"`
			Faults           map[string]float64 `yaml:"faults,omitempty"`
			Limits           map[string]int64   `yaml:"limits,omitempty"`
			Unannounced      []string           `yaml:"unannounced,omitempty"`
		} `yaml:"provider"`
		Prices  map[string]Price `yaml:"prices,omitempty"`
		Targets []target         `yaml:"targets,omitempty"`
		Flows   []flow           `yaml:"flows"`
	}{Name: s.Name, Duration: s.Duration.String(), Seed: s.Seed, Prices: s.Prices}
	out.Provider.Profile, out.Provider.Window, out.Provider.Accounting = string(p.Profile), govtext.WindowWord(p.FixedWindows), govtext.AccountingWord(p.SettleOutput)
	out.Provider.Latency, out.Provider.DefaultMaxTokens = p.Latency.String(), p.DefaultMaxTokens
	if p.Faults != (Faults{}) {
		out.Provider.Faults = map[string]float64{"error_5xx": p.Faults.Error5xx, "timeout": p.Faults.Timeout, "reset": p.Faults.Reset, "bad_json": p.Faults.BadJSON}
	}
	for l := range governor.NumLimits {
		if p.Unannounced[l] {
			out.Provider.Unannounced = append(out.Provider.Unannounced, l.String())
		}
		if p.Limits[l] > 0 {
			if out.Provider.Limits == nil {
				out.Provider.Limits = map[string]int64{}
			}
			out.Provider.Limits[l.String()] = p.Limits[l]
		}
	}
	for _, f := range s.Flows {
		fl := flow{Name: f.Name, Priority: f.Priority, Weight: f.Weight, Backlog: f.Backlog, ArrivalsPerDay: f.ArrivalsPerDay,
			After: f.After, BatchMax: f.BatchMax, PromptTokens: f.PromptTokens, ItemInputTokens: f.ItemInputTokens,
			ItemOutputTokens: f.ItemOutputTokens, ItemMaxTokens: f.ItemMaxTokens, Model: f.Model, PerRun: f.PerRun}
		if f.Every > 0 {
			fl.Every = f.Every.String()
		}
		if f.Gap > 0 {
			fl.Gap = f.Gap.String()
		}
		if f.Within > 0 {
			fl.Within = f.Within.String()
		}
		fl.Targets = f.Targets
		if f.Rule != 0 {
			fl.Rule = f.Rule.String()
		}
		if f.MaxWait != 0 {
			fl.MaxWait = f.MaxWait.String()
		}
		fl.Budget = budgetMap(f.Budget)
		out.Flows = append(out.Flows, fl)
	}
	for _, t := range s.Targets {
		tp := t.Provider
		tg := target{Name: t.Name, Model: t.Model, Profile: string(tp.Profile), Window: govtext.WindowWord(tp.FixedWindows),
			Accounting: govtext.AccountingWord(tp.SettleOutput), Latency: tp.Latency.String(), DefaultMaxTokens: tp.DefaultMaxTokens,
			// Every target's faults, so that none takes the provider section's.
			Faults: map[string]float64{"error_5xx": tp.Faults.Error5xx, "timeout": tp.Faults.Timeout, "reset": tp.Faults.Reset, "bad_json": tp.Faults.BadJSON}}
		for l := range governor.NumLimits {
			if tp.Limits[l] > 0 {
				if tg.Limits == nil {
					tg.Limits = map[string]int64{}
				}
				tg.Limits[l.String()] = tp.Limits[l]
			}
		}
		if !t.Price.IsZero() {
			tg.Price = map[string]float64{"input": t.Price.Input, "cached_input": t.Price.CachedInput, "output": t.Price.Output}
		}
		tg.Budget = budgetMap(t.Budget)
		for _, o := range t.Outages {
			tg.Outages = append(tg.Outages, outage{Start: o.Start.String(), Duration: o.Duration.String(), Mode: o.Mode.String()})
		}
		out.Targets = append(out.Targets, tg)
	}
	return yaml.Marshal(out)
}

// budgetMap writes a budget as the file lays it out; nil for none.
func budgetMap(b governor.Budget) map[string]float64 {
	if b.IsZero() {
		return nil
	}
	return map[string]float64{"day": b.Day, "month": b.Month}
}
