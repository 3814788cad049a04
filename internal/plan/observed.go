package plan

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// NothingError says there is nothing to plan yet rather than that
// something failed: no app configuration recorded, no flow and no call on
// the key. Its Reason names only the configuration, so it can be shown to
// a user as it is.
type NothingError struct{ Reason string }

func (e *NothingError) Error() string { return e.Reason }

// Key is one provider key as a configuration gives it: what Observed
// plans.
type Key struct {
	// Source is what configured the key, "gateway" or "app", for the
	// scenario's name.
	Source string
	// Name is the key's name in the store's charges.
	Name     string
	Provider forecast.Provider
	Flows    []KeyFlow
}

// KeyFlow is a flow as a configuration gives it.
type KeyFlow struct {
	Name     string
	Weight   float64
	Priority int
	BatchMax int
	After    string
	// MaxTokens is the flow's max_tokens per request, 0: none set. The
	// scenario's request sizes come from the calls recorded.
	MaxTokens int
	// Within is how long a backfill's batch should take at its share
	// (run.Backfill.BatchWithin); 0 for a function's flow.
	Within time.Duration
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

// RecordedKey reads the configuration an app last recorded in st: its
// provider key named name (the first when empty), the flows, the
// backfills. With none recorded, its error is a *NothingError.
func RecordedKey(ctx context.Context, st store.Store, name string, now time.Time) (Key, error) {
	versions, err := st.ConfigVersions(ctx, now)
	if err != nil {
		return Key{}, fmt.Errorf("read the configuration versions: %w", err)
	}
	var last *store.ConfigVersion
	for i := range versions {
		if versions[i].Source == "app" {
			last = &versions[i]
		}
	}
	if last == nil {
		return Key{}, &NothingError{"the database holds no app configuration: an app records one when it starts"}
	}
	var c appConfig
	if err := json.Unmarshal(last.Config, &c); err != nil {
		return Key{}, fmt.Errorf("read the app's configuration of %s: %w", last.At.Format(time.RFC3339), err)
	}
	return c.key(name)
}

// AppKey reads config, an app's configuration as the app records it at
// each start: its provider key named name (the first when empty), the
// flows, the backfills.
func AppKey(config []byte, name string) (Key, error) {
	var c appConfig
	if err := json.Unmarshal(config, &c); err != nil {
		return Key{}, fmt.Errorf("read the app's configuration: %w", err)
	}
	return c.key(name)
}

func (c *appConfig) key(name string) (Key, error) {
	k := Key{Source: "app"}
	found := false
	var err error
	for _, p := range c.Providers {
		if name != "" && p.Name != name {
			continue
		}
		found = true
		k.Name = p.Name
		k.Provider = forecast.Provider{DefaultMaxTokens: int64(cmp.Or(p.DefaultMaxTokens, 1000))}
		if k.Provider.Profile, err = llm.ParseProfile(cmp.Or(p.Profile, "openai")); err != nil {
			return k, err
		}
		for l, n := range p.Limits {
			lim, err := govtext.Limit(l)
			if err != nil {
				return k, err
			}
			k.Provider.Limits[lim] = n
		}
		if k.Provider.FixedWindows, err = govtext.Window(cmp.Or(p.Window, "rolling")); err != nil {
			return k, err
		}
		if k.Provider.SettleOutput, err = govtext.Accounting(cmp.Or(p.Accounting, "reserve")); err != nil {
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
	add := func(f KeyFlow) {
		fc := conf[f.Name]
		f.Weight, f.Priority = cmp.Or(fc.Weight, 1), fc.Priority
		k.Flows = append(k.Flows, f)
	}
	// A backfill or function that names no provider calls the first.
	first := c.Providers[0].Name
	for _, b := range c.Backfills {
		if cmp.Or(b.Provider, first) == k.Name {
			add(KeyFlow{Name: cmp.Or(b.Flow, b.ID), BatchMax: max(b.MaxBatch, 1), After: b.After, Within: b.BatchWithin()})
		}
	}
	for _, fn := range c.Functions {
		name := cmp.Or(fn.Flow, fn.ID)
		if cmp.Or(fn.Provider, first) == k.Name && !slices.ContainsFunc(k.Flows, func(f KeyFlow) bool { return f.Name == name }) {
			add(KeyFlow{Name: name, BatchMax: 1})
		}
	}
	return k, nil
}

// Observed makes the scenario of k's flows from what st recorded in the
// day before now: each flow's calls and their sizes (the key's charges),
// its items per call (the samples), and its backlog (its job's eligible
// items); a flow the configuration does not name but that called the key
// is planned too. A flow without calls in that day has no sizes to go by:
// notes say so. With no flow at all, its error is a *NothingError.
func Observed(ctx context.Context, st store.Store, k Key, now time.Time) (*forecast.Scenario, []string, error) {
	since := now.Add(-24 * time.Hour)
	charges, err := st.Charges(ctx, k.Name, since)
	if err != nil {
		return nil, nil, fmt.Errorf("read the charges of key %s: %w", k.Name, err)
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
	flows := slices.Clone(k.Flows)
	var unnamed []KeyFlow
	for name, s := range by {
		if s.requests > 0 && !slices.ContainsFunc(flows, func(f KeyFlow) bool { return f.Name == name }) {
			unnamed = append(unnamed, KeyFlow{Name: name, Weight: 1, BatchMax: 1})
		}
	}
	// By name, so the same records always make the same forecast.
	slices.SortFunc(unnamed, func(a, b KeyFlow) int { return strings.Compare(a.Name, b.Name) })
	flows = append(flows, unnamed...)
	sc := &forecast.Scenario{Name: k.Source + " " + k.Name + " as of " + now.UTC().Format(time.RFC3339), Duration: 7 * 24 * time.Hour, Seed: 1, Provider: k.Provider}
	var notes []string
	for _, f := range flows {
		s := get(f.Name)
		fl := forecast.Flow{Name: f.Name, Weight: f.Weight, Priority: f.Priority, BatchMax: min(max(f.BatchMax, 1), forecast.MaxBatch), After: f.After,
			Backlog: int(min(backlog[f.Name], forecast.MaxBacklog)), Within: min(f.Within, forecast.MaxDuration)}
		perCall := 1.0
		if s.done > 0 && s.admitted > 0 {
			perCall = min(float64(s.done)/float64(s.admitted), float64(fl.BatchMax))
		}
		if s.requests == 0 {
			notes = append(notes, fmt.Sprintf("%s: no call of it was recorded in the last day: its sizes are unknown, so it counts no tokens", f.Name))
		} else {
			items := float64(s.requests) * perCall
			fl.ItemInputTokens = int64(math.Round(float64(s.input) / items))
			fl.ItemOutputTokens = min(int64(math.Round(float64(s.output)/items)), forecast.MaxOutputTokens)
			fl.ItemMaxTokens = min(fl.ItemOutputTokens, forecast.MaxOutputTokens/int64(fl.BatchMax))
			if backlog[f.Name] == 0 && f.After == "" {
				fl.ArrivalsPerDay = items
			}
		}
		sc.Flows = append(sc.Flows, fl)
	}
	if len(sc.Flows) == 0 {
		return nil, nil, &NothingError{fmt.Sprintf("key %s has no flows in the configuration and no calls recorded in the last day", k.Name)}
	}
	return sc, notes, nil
}
