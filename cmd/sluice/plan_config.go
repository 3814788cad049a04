package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/internal/yamlfile"
	"github.com/sluice-dev/sluice/jobs"
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

// jobsData derives the scenario of the jobs of a serve config file (its
// jobs: key) on the file's key: each job's flow, batches and request sizes
// as its prompt renders rows of its source, and its backlog as its source
// query lists it now. ok is false when the file declares no jobs.
func jobsData(ctx context.Context, env *cli.Env, path, dbURL string) (data []byte, notes []string, ok bool, err error) {
	cfg, err := jobs.Load(path)
	if err != nil {
		return nil, nil, true, fmt.Errorf("--config %w", err)
	}
	if len(cfg.Jobs()) == 0 {
		return nil, nil, false, nil
	}
	// The file's settings of the key, with serve's own defaults.
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	sf := addServeFlags(fs)
	var file serveFile
	lines, err := readConfigFile(fs, map[string]bool{}, path, &file)
	if err != nil {
		return nil, nil, true, err
	}
	fail := func(key string, err error) error {
		return fmt.Errorf("--config %s: %w", path, &yamlfile.Error{Path: key, Line: lines.Line(key), Err: err})
	}
	o := sf.app
	p := forecast.Provider{DefaultMaxTokens: forecast.DefaultMaxTokens}
	if p.Profile, err = llm.ParseProfile(o.Profile); err != nil {
		return nil, nil, true, fail("profile", err)
	}
	if p.Limits, err = govtext.Limits(o.Limits); err != nil {
		return nil, nil, true, fail("limits", err)
	}
	shapes, err := cfg.Shapes(ctx, jobs.Options{AppDB: serveapp.DB(cmp.Or(dbURL, o.DB), env.Getenv), Model: o.Model, Provider: o.Profile, Getenv: env.Getenv})
	if err != nil {
		return nil, nil, true, fmt.Errorf("--config %w", err)
	}
	sc := &forecast.Scenario{Name: "jobs of " + path, Duration: 7 * 24 * time.Hour, Seed: 1, Provider: p}
	var price governor.Price
	if o.Price != "" {
		if err := price.UnmarshalText([]byte(o.Price)); err != nil {
			return nil, nil, true, fail("price", err)
		}
		sc.Prices = map[string]forecast.Price{}
	}
	for _, s := range shapes {
		if s.Event {
			notes = append(notes, fmt.Sprintf("%s: runs per event, so it has no backlog to plan; its calls count in `sluice plan --db` once recorded", s.Name))
			continue
		}
		if sc.Prices != nil {
			sc.Prices[s.Model] = forecast.Price{Input: price.Input, Output: price.Output}
		}
		batch := min(s.BatchMax, forecast.MaxBatch)
		out := min(s.MaxTokens, forecast.MaxOutputTokens/int64(batch))
		sc.Flows = append(sc.Flows, forecast.Flow{Name: s.Name, Model: s.Model, Weight: cmp.Or(s.Weight, 1), Priority: s.Priority,
			BatchMax: batch, After: s.After, Backlog: min(s.Backlog, forecast.MaxBacklog), Within: s.Within,
			PromptTokens: s.PromptTokens, ItemInputTokens: s.ItemInputTokens, ItemOutputTokens: out, ItemMaxTokens: out})
		if s.Sampled == 0 {
			notes = append(notes, fmt.Sprintf("%s: its source lists no rows now: its item size is its prompt's on placeholder values", s.Name))
		}
	}
	if len(sc.Flows) == 0 {
		return nil, notes, true, fmt.Errorf("--config %s: no job with a source query to plan", path)
	}
	notes = append(notes, "each item's output is taken at its job's max_tokens, an upper bound: the ETAs are the latest")
	data, err = forecast.Format(sc)
	return data, notes, true, err
}
