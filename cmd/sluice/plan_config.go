package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/scenario"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/yamlfile"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// observedFlow is a flow as a configuration gives it.
type observedFlow struct {
	name      string
	weight    float64
	priority  int
	batchMax  int
	after     string
	maxTokens int // per request, 0: none set
}

// observedKey is one provider key as a configuration gives it.
type observedKey struct {
	source   string // "gateway" or "app"
	key      string // the key's name in the store's charges
	provider scenario.Provider
	flows    []observedFlow
}

// gatewayKey reads a gateway config file as `sluice gateway --config`
// does: the key, its limits and its flows, and the database it records in.
func gatewayKey(path string) (observedKey, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return observedKey{}, "", fmt.Errorf("--config: %w", err)
	}
	var f gatewayFile
	lines, err := yamlfile.Decode(data, &f)
	if err != nil {
		return observedKey{}, "", fmt.Errorf("--config %s: %w", path, err)
	}
	fail := func(key string, err error) error {
		return fmt.Errorf("--config %s: %w", path, &yamlfile.Error{Path: key, Line: lines.Line(key), Err: err})
	}
	k := observedKey{source: "gateway", provider: scenario.Provider{Profile: llm.OpenAI, DefaultMaxTokens: 1024}}
	if f.Profile != "" {
		if k.provider.Profile, err = llm.ParseProfile(f.Profile); err != nil {
			return k, "", fail("profile", err)
		}
	}
	if k.provider.Limits, err = governor.ParseLimits(f.Limits); err != nil {
		return k, "", fail("limits", err)
	}
	if f.Window != "" {
		if k.provider.Window, err = governor.ParseWindow(f.Window); err != nil {
			return k, "", fail("window", err)
		}
	}
	if f.Accounting != "" {
		if k.provider.Accounting, err = governor.ParseAccounting(f.Accounting); err != nil {
			return k, "", fail("accounting", err)
		}
	} else if k.provider.Profile == llm.Anthropic {
		k.provider.Accounting = governor.SettleAccounting
	}
	if f.DefaultMaxTokens != "" {
		n, err := strconv.Atoi(f.DefaultMaxTokens)
		if err != nil || n < 1 || n > scenario.MaxOutputTokens {
			return k, "", fail("default_max_tokens", fmt.Errorf("%q is not a whole number from 1 to %d", f.DefaultMaxTokens, scenario.MaxOutputTokens))
		}
		k.provider.DefaultMaxTokens = int64(n)
	}
	k.key = cmp.Or(f.Key, string(k.provider.Profile))
	for i, fl := range f.Flows {
		gf, err := newFlow(fl.Name, fl.Weight, fl.Priority, fl.DefaultMaxTokens)
		if err != nil {
			return k, "", fail(fmt.Sprintf("flows[%d]", i), err)
		}
		k.flows = append(k.flows, observedFlow{name: gf.Name, weight: gf.Weight, priority: gf.Priority, batchMax: 1, maxTokens: gf.DefaultMaxTokens})
	}
	return k, f.DB, nil
}

// appConfig is the part of the configuration an app records at each start
// (see sluice's effectiveConfig) that a plan reads.
type appConfig struct {
	Providers []struct {
		Name             string           `json:"name"`
		Profile          string           `json:"profile"`
		Limits           map[string]int64 `json:"limits"`
		Window           string           `json:"window"`
		Accounting       string           `json:"accounting"`
		DefaultMaxTokens int              `json:"default_max_tokens"`
	} `json:"providers"`
	Flows     []governor.FlowConfig `json:"flows"`
	Functions []run.Function        `json:"functions"`
	Backfills []run.Backfill        `json:"backfills"`
}

// appKey reads the configuration an app last recorded in st: its provider
// key named name (the first when empty), the flows, the backfills.
func appKey(ctx context.Context, st store.Store, name string, now time.Time) (observedKey, error) {
	versions, err := st.ConfigVersions(ctx, now)
	if err != nil {
		return observedKey{}, fmt.Errorf("read the configuration versions: %w", err)
	}
	var last *store.ConfigVersion
	for i := range versions {
		if versions[i].Source == "app" {
			last = &versions[i]
		}
	}
	if last == nil {
		return observedKey{}, fmt.Errorf("the database holds no app configuration: an app records one when it starts (or give the gateway's --config)")
	}
	var c appConfig
	if err := json.Unmarshal(last.Config, &c); err != nil {
		return observedKey{}, fmt.Errorf("read the app's configuration of %s: %w", last.At.Format(time.RFC3339), err)
	}
	k := observedKey{source: "app"}
	found := false
	for _, p := range c.Providers {
		if name != "" && p.Name != name {
			continue
		}
		found = true
		k.key = p.Name
		k.provider = scenario.Provider{DefaultMaxTokens: int64(cmp.Or(p.DefaultMaxTokens, 1000))}
		if k.provider.Profile, err = llm.ParseProfile(cmp.Or(p.Profile, "openai")); err != nil {
			return k, err
		}
		for l, n := range p.Limits {
			lim, err := governor.ParseLimit(l)
			if err != nil {
				return k, err
			}
			k.provider.Limits[lim] = n
		}
		if k.provider.Window, err = governor.ParseWindow(cmp.Or(p.Window, "rolling")); err != nil {
			return k, err
		}
		if k.provider.Accounting, err = governor.ParseAccounting(cmp.Or(p.Accounting, "reserve")); err != nil {
			return k, err
		}
		break
	}
	if !found {
		return k, fmt.Errorf("the app's configuration has no provider %q", name)
	}
	conf := map[string]governor.FlowConfig{}
	for _, f := range c.Flows {
		conf[f.Name] = f
	}
	add := func(f observedFlow) {
		fc := conf[f.name]
		f.weight, f.priority = cmp.Or(fc.Weight, 1), fc.Priority
		k.flows = append(k.flows, f)
	}
	// A backfill or function that names no provider calls the first.
	first := c.Providers[0].Name
	for _, b := range c.Backfills {
		if cmp.Or(b.Provider, first) == k.key {
			add(observedFlow{name: cmp.Or(b.Flow, b.ID), batchMax: max(b.MaxBatch, 1), after: b.After})
		}
	}
	for _, fn := range c.Functions {
		name := cmp.Or(fn.Flow, fn.ID)
		if cmp.Or(fn.Provider, first) == k.key && !slices.ContainsFunc(k.flows, func(f observedFlow) bool { return f.name == name }) {
			add(observedFlow{name: name, batchMax: 1})
		}
	}
	return k, nil
}

// observedScenario makes the scenario of k's flows from what st recorded in
// the day before now: each flow's calls and their sizes (the key's
// charges), its items per call (the samples), and its backlog (its job's
// eligible items). A flow without calls in that day has no sizes to go by:
// notes say so.
func observedScenario(ctx context.Context, st store.Store, k observedKey, now time.Time) (*scenario.Scenario, []string, error) {
	since := now.Add(-24 * time.Hour)
	charges, err := st.Charges(ctx, k.key, since)
	if err != nil {
		return nil, nil, fmt.Errorf("read the charges of key %s: %w", k.key, err)
	}
	samples, err := st.Samples(ctx, since, now, "")
	if err != nil {
		return nil, nil, fmt.Errorf("read the samples: %w", err)
	}
	jobs, err := st.Jobs(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read the jobs: %w", err)
	}
	type seen struct{ requests, input, output, done, admitted int64 }
	by := map[string]*seen{}
	get := func(name string) *seen {
		if by[name] == nil {
			by[name] = &seen{}
		}
		return by[name]
	}
	for _, c := range charges {
		s := get(c.Flow)
		s.requests += c.Cost.Requests
		s.input += c.Cost.Input
		s.output += c.Cost.Output
	}
	for _, s := range samples {
		x := get(s.Flow)
		x.done += s.Done
		x.admitted += s.Admitted
	}
	backlog := map[string]int64{}
	for _, j := range jobs {
		backlog[j.Name] = max(j.Pending+j.Rejected, 0)
	}
	flows := slices.Clone(k.flows)
	for name, s := range by {
		if s.requests > 0 && !slices.ContainsFunc(flows, func(f observedFlow) bool { return f.name == name }) {
			flows = append(flows, observedFlow{name: name, weight: 1, batchMax: 1})
		}
	}
	sc := &scenario.Scenario{Name: k.source + " " + k.key + " as of " + now.UTC().Format(time.RFC3339), Duration: 7 * 24 * time.Hour, Seed: 1, Provider: k.provider}
	var notes []string
	for _, f := range flows {
		s := get(f.name)
		fl := scenario.Flow{Name: f.name, Weight: f.weight, Priority: f.priority, BatchMax: min(max(f.batchMax, 1), scenario.MaxBatch), After: f.after,
			Backlog: int(min(backlog[f.name], scenario.MaxBacklog))}
		perCall := 1.0
		if s.done > 0 && s.admitted > 0 {
			perCall = min(float64(s.done)/float64(s.admitted), float64(fl.BatchMax))
		}
		if s.requests == 0 {
			notes = append(notes, fmt.Sprintf("%s: no call of it was recorded in the last day: its sizes are unknown, so it counts no tokens", f.name))
		} else {
			items := float64(s.requests) * perCall
			fl.ItemInputTokens = int64(math.Round(float64(s.input) / items))
			fl.ItemOutputTokens = min(int64(math.Round(float64(s.output)/items)), scenario.MaxOutputTokens)
			fl.ItemMaxTokens = min(fl.ItemOutputTokens, scenario.MaxOutputTokens/int64(fl.BatchMax))
			if backlog[f.name] == 0 && f.after == "" {
				fl.ArrivalsPerDay = items
			}
		}
		sc.Flows = append(sc.Flows, fl)
	}
	if len(sc.Flows) == 0 {
		return nil, nil, fmt.Errorf("key %s has no flows in the configuration and no calls recorded in the last day", k.key)
	}
	return sc, notes, nil
}
