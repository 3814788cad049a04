package plan

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// TestObserved: the key and flows the app last recorded, each flow's call
// sizes and items per call from the day's charges and samples, each
// backfill's backlog from its job, and the flows that called the key
// without being configured, by name; a configured flow without calls is
// noted. The scenario reads back the same from its file format, so
// planning it is planning what `sluice plan --db --print-scenario` shows.
// On both databases.
func TestObserved(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		now := time.Now()
		cfg := `{"providers":[{"name":"groq","profile":"groq","limits":{"rpm":30,"tpd":200000},"window":"fixed","accounting":"settle","default_max_tokens":512},{"name":"openai"}],
			"flows":[{"Name":"summaries","Weight":2,"Priority":1}],
			"functions":[{"ID":"welcome"},{"ID":"classify","Provider":"openai"}],
			"backfills":[{"ID":"summaries","MaxBatch":3},{"ID":"titles","After":"summaries","MaxBatch":5}]}`
		if _, err := st.RecordConfig(ctx, store.ConfigVersion{At: now.Add(-time.Hour), Source: "app", Hash: "h1", Code: "c", Config: []byte(cfg)}); err != nil {
			t.Fatal(err)
		}
		// 10 summary calls of 3 items (300 in, 250 out each item); two flows
		// the configuration does not name called the key too.
		var charges []store.Charge
		for i := range 10 {
			charges = append(charges, store.Charge{ID: fmt.Sprint("s", i), Flow: "summaries", At: now.Add(-time.Duration(i+1) * time.Minute), Cost: governor.Cost{Requests: 1, Input: 900, Output: 750}})
		}
		for _, f := range []string{"zeta", "alpha"} {
			charges = append(charges, store.Charge{ID: f, Flow: f, At: now.Add(-time.Minute), Cost: governor.Cost{Requests: 2, Input: 40, Output: 60}})
		}
		if err := st.UpsertCharges(ctx, "groq", charges); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordSamples(ctx, []store.Sample{{At: now.Add(-time.Minute), Flow: "summaries", Source: "app", Done: 30, Admitted: 10}}); err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 600)
		for i := range keys {
			keys[i] = fmt.Sprintf("a%04d", i)
		}
		if _, err := st.AddItems(ctx, "summaries", keys, now, ""); err != nil {
			t.Fatal(err)
		}

		k, err := RecordedKey(ctx, st, "", now)
		if err != nil {
			t.Fatal(err)
		}
		var want forecast.Provider
		want.Profile, want.FixedWindows, want.SettleOutput, want.DefaultMaxTokens = llm.Groq, true, true, 512
		want.Limits[governor.RPM], want.Limits[governor.TPD] = 30, 200_000
		if k.Name != "groq" || k.Source != "app" || k.Provider != want {
			t.Errorf("key %s from %s, provider %+v; want groq from app, %+v", k.Name, k.Source, k.Provider, want)
		}
		sc, notes, err := Observed(ctx, st, k, now)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range sc.Flows {
			names = append(names, f.Name)
		}
		// The configured flows in their order, then the others by name;
		// classify calls the other key.
		if got := strings.Join(names, " "); got != "summaries titles welcome alpha zeta" {
			t.Fatalf("flows %s, want summaries titles welcome alpha zeta", got)
		}
		s := sc.Flows[0]
		if s.Weight != 2 || s.Priority != 1 || s.BatchMax != 3 || s.Backlog != 600 || s.ItemInputTokens != 300 || s.ItemOutputTokens != 250 || s.ArrivalsPerDay != 0 {
			t.Errorf("summaries %+v: want weight 2, priority 1, batches of 3, 600 waiting, 300 in and 250 out an item", s)
		}
		if ti := sc.Flows[1]; ti.After != "summaries" || ti.BatchMax != 5 || ti.ItemInputTokens != 0 {
			t.Errorf("titles %+v: want after summaries, batches of 5, no sizes", ti)
		}
		if a := sc.Flows[3]; a.ArrivalsPerDay != 2 || a.ItemInputTokens != 20 || a.ItemOutputTokens != 30 || a.Weight != 1 {
			t.Errorf("alpha %+v: want 2 a day of 20 in, 30 out", a)
		}
		if len(notes) != 2 || !strings.HasPrefix(notes[0], "titles: no call of it was recorded") || !strings.HasPrefix(notes[1], "welcome: ") {
			t.Errorf("notes %q: want titles and welcome without calls", notes)
		}
		if !strings.HasPrefix(sc.Name, "app groq as of ") {
			t.Errorf("scenario %q", sc.Name)
		}
		data, err := forecast.Format(sc)
		if err != nil {
			t.Fatal(err)
		}
		back, err := forecast.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, sc) {
			t.Errorf("the scenario reads back otherwise:\n%+v\n%+v", back, sc)
		}

		// Planned, the flows that called have their day's tokens.
		p := make_(t, sc)
		if got := p.Flows["alpha"].TokensPerDay; got != 100 {
			t.Errorf("alpha: %v tokens a day, want 100", got)
		}
	})
}

// TestAppKey: a configuration's key by name, the first by default, with
// the flows that call it; a key it lacks or a configuration that is no
// JSON is refused.
func TestAppKey(t *testing.T) {
	t.Parallel()
	const cfg = `{"providers":[{"name":"groq","limits":{"tpm":8000}},{"name":"openai","profile":"openai","limits":{"tpm":30000}}],
		"flows":[{"Name":"essays","Weight":3}],
		"functions":[{"ID":"classify","Provider":"openai"},{"ID":"welcome"},{"ID":"ask","Flow":"essays","Provider":"openai"}],
		"backfills":[{"ID":"summaries","MaxBatch":3,"StallAfter":1200000000000},{"ID":"essays","Provider":"openai"}]}`
	for _, tc := range []struct {
		name, key, flows string
		tpm              int64
	}{
		// A backfill's batches are sized for its BatchWithin (a quarter of
		// a stall threshold of 20 minutes; 15 minutes by default).
		{"the first by default", "", "summaries/1/3/5m0s welcome/1/1/0s", 8000},
		{"by name", "openai", "essays/3/1/15m0s classify/1/1/0s", 30000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := AppKey([]byte(cfg), tc.key)
			if err != nil {
				t.Fatal(err)
			}
			var flows []string
			for _, f := range k.Flows {
				flows = append(flows, fmt.Sprintf("%s/%g/%d/%s", f.Name, f.Weight, f.BatchMax, f.Within))
			}
			if got := strings.Join(flows, " "); got != tc.flows || k.Provider.Limits[governor.TPM] != tc.tpm ||
				k.Provider.Profile != llm.OpenAI || k.Provider.DefaultMaxTokens != 1000 {
				t.Errorf("key %s: flows %s, %+v; want %s, tpm %d, the defaults", k.Name, got, k.Provider, tc.flows, tc.tpm)
			}
		})
	}
	for _, tc := range []struct{ config, key, want string }{
		{cfg, "anthropic", `the app's configuration has no provider "anthropic"`},
		{`{"providers":[{"name":"groq","limits":{"tpx":1}}]}`, "", "tpx"},
		{`{"providers":`, "", "read the app's configuration: "},
	} {
		_, err := AppKey([]byte(tc.config), tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AppKey(%s, %q): %v, want %q", tc.config, tc.key, err, tc.want)
		}
		if _, ok := errors.AsType[*NothingError](err); ok {
			t.Errorf("AppKey(%s, %q): %v is a failure, not nothing to plan", tc.config, tc.key, err)
		}
	}
}

// TestNothingToPlan: a database without an app configuration, and a key
// with no flow and no call, are nothing to plan, and say so.
func TestNothingToPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testenv.OpenStore(t, t.TempDir()+"/s.db")
	now := time.Now()
	_, err := RecordedKey(ctx, st, "", now)
	if ne, ok := errors.AsType[*NothingError](err); !ok || ne.Reason != "the database holds no app configuration: an app records one when it starts" {
		t.Errorf("RecordedKey on an empty database: %v, want nothing to plan", err)
	}
	k, err := AppKey([]byte(`{"providers":[{"name":"groq","limits":{"tpm":8000}}],"functions":[{"ID":"ask","Provider":"other"}]}`), "")
	if err != nil || len(k.Flows) != 0 {
		t.Fatalf("key %+v, %v: want groq without flows", k, err)
	}
	_, _, err = Observed(ctx, st, k, now)
	if ne, ok := errors.AsType[*NothingError](err); !ok || ne.Reason != "key groq has no flows in the configuration and no calls recorded in the last day" {
		t.Errorf("Observed of a key without flows: %v, want nothing to plan", err)
	}
	// A call is enough to plan.
	if err := st.UpsertCharges(ctx, "groq", []store.Charge{{ID: "c", Flow: "ask", At: now.Add(-time.Minute), Cost: governor.Cost{Requests: 1, Input: 10, Output: 10}}}); err != nil {
		t.Fatal(err)
	}
	sc, _, err := Observed(ctx, st, k, now)
	if err != nil || !slices.ContainsFunc(sc.Flows, func(f forecast.Flow) bool { return f.Name == "ask" }) {
		t.Errorf("Observed with a call of ask: %v, %v", sc, err)
	}
}
