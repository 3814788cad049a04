package sluice

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/run"
)

// effectiveConfig is what the app runs with, as `sluice report` compares
// versions of it: each provider key's limits (never its secret or URL),
// the flows, every function's and backfill's settings.
type effectiveConfig struct {
	Providers []providerConfig      `json:"providers"`
	Flows     []governor.FlowConfig `json:"flows"`
	Functions []run.Function        `json:"functions"`
	Backfills []run.Backfill        `json:"backfills"`
}

type providerConfig struct {
	Name             string           `json:"name"`
	Profile          string           `json:"profile"`
	Limits           map[string]int64 `json:"limits"`
	Window           string           `json:"window"`
	Accounting       string           `json:"accounting"`
	DefaultMaxTokens int              `json:"default_max_tokens,omitempty"`
	DayBurst         time.Duration    `json:"day_burst,omitempty"`
}

func (a *App) effectiveConfig() effectiveConfig {
	c := effectiveConfig{Flows: slices.Clone(a.cfg.Flows), Functions: []run.Function{}, Backfills: a.backfills.Settings()}
	for _, p := range a.cfg.Providers {
		pc := providerConfig{Name: p.Name, Profile: string(p.LLM.Profile), Limits: map[string]int64{},
			Window: govtext.WindowWord(p.FixedWindows), Accounting: govtext.AccountingWord(p.SettleOutput), DefaultMaxTokens: p.LLM.DefaultMaxTokens, DayBurst: p.DayBurst}
		for l := range governor.NumLimits {
			if p.Limits[l] > 0 {
				pc.Limits[l.String()] = p.Limits[l]
			}
		}
		c.Providers = append(c.Providers, pc)
	}
	for _, f := range a.e.Functions() {
		if !strings.HasPrefix(f.ID, "backfill:") { // a backfill's own, listed with it
			c.Functions = append(c.Functions, f.Function)
		}
	}
	slices.SortFunc(c.Functions, func(x, y run.Function) int { return strings.Compare(x.ID, y.ID) })
	slices.SortFunc(c.Flows, func(x, y governor.FlowConfig) int { return strings.Compare(x.Name, y.Name) })
	return c
}

// recordConfig records the configuration the app starts with, unless it is
// the one last recorded: `sluice report` attributes changes in the jobs'
// rates to these versions.
func (a *App) recordConfig(ctx context.Context) error {
	config, err := json.Marshal(a.effectiveConfig())
	if err != nil {
		return err
	}
	_, err = a.st.RecordConfig(ctx, store.NewConfigVersion(a.e.Now(), "app", a.e.AppVersion(), config))
	return err
}
