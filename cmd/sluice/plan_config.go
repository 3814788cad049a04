package main

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/yamlfile"
	"github.com/sluice-dev/sluice/llm"
)

// gatewayKey reads a gateway config file as `sluice gateway --config`
// does: the key, its limits and its flows, and the database it records in.
func gatewayKey(path string) (plan.Key, string, error) {
	var f gatewayFile
	lines, err := decodeConfigFile(path, &f)
	if err != nil {
		return plan.Key{}, "", err
	}
	fail := func(key string, err error) error {
		return fmt.Errorf("--config %s: %w", path, &yamlfile.Error{Path: key, Line: lines.Line(key), Err: err})
	}
	k := plan.Key{Source: "gateway", Provider: forecast.Provider{Profile: llm.OpenAI, DefaultMaxTokens: 1024}}
	if f.Profile != "" {
		if k.Provider.Profile, err = llm.ParseProfile(f.Profile); err != nil {
			return k, "", fail("profile", err)
		}
	}
	if k.Provider.Limits, err = govtext.Limits(f.Limits); err != nil {
		return k, "", fail("limits", err)
	}
	if f.Window != "" {
		if k.Provider.FixedWindows, err = govtext.Window(f.Window); err != nil {
			return k, "", fail("window", err)
		}
	}
	if f.Accounting != "" {
		if k.Provider.SettleOutput, err = govtext.Accounting(f.Accounting); err != nil {
			return k, "", fail("accounting", err)
		}
	} else if k.Provider.Profile == llm.Anthropic {
		k.Provider.SettleOutput = true
	}
	if f.DefaultMaxTokens != "" {
		n, err := strconv.Atoi(f.DefaultMaxTokens)
		if err != nil || n < 1 || n > forecast.MaxOutputTokens {
			return k, "", fail("default_max_tokens", fmt.Errorf("%q is not a whole number from 1 to %d", f.DefaultMaxTokens, forecast.MaxOutputTokens))
		}
		k.Provider.DefaultMaxTokens = int64(n)
	}
	k.Name = cmp.Or(f.Key, string(k.Provider.Profile))
	for i, fl := range f.Flows {
		gf, err := newFlow(fl.Name, fl.Weight, fl.Priority, fl.DefaultMaxTokens)
		if err != nil {
			return k, "", fail(fmt.Sprintf("flows[%d]", i), err)
		}
		k.Flows = append(k.Flows, plan.KeyFlow{Name: gf.Name, Weight: gf.Weight, Priority: gf.Priority, BatchMax: 1, MaxTokens: gf.DefaultMaxTokens})
	}
	return k, f.DB, nil
}
