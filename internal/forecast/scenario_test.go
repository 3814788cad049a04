package forecast

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/yamlfile"
)

func TestLoadDevpick(t *testing.T) {
	t.Parallel()
	s, err := Load("testdata/devpick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "devpick" || s.Duration != 168*time.Hour || s.Seed != 1 {
		t.Errorf("header = %q %s %d, want devpick 168h 1", s.Name, s.Duration, s.Seed)
	}
	p := s.Provider
	if p.Profile != "groq" || p.FixedWindows || p.SettleOutput ||
		p.Latency != 2*time.Second || p.DefaultMaxTokens != 1000 || p.Faults != (Faults{}) {
		t.Errorf("provider = %+v", p)
	}
	want := governor.Limits{governor.RPM: 30, governor.RPD: 1000, governor.TPM: 8000, governor.TPD: 200000, governor.OTPM: 1000}
	if p.Limits != want {
		t.Errorf("limits = %v, want %v", p.Limits, want)
	}
	wantFlows := []Flow{
		{Name: "analysis", Priority: 1, Weight: 1, ArrivalsPerDay: 100, BatchMax: 5, PromptTokens: 150,
			ItemInputTokens: 600, ItemOutputTokens: 300, ItemMaxTokens: 360},
		{Name: "summary", Weight: 1, Backlog: 6000, BatchMax: 30, PromptTokens: 100,
			ItemInputTokens: 300, ItemOutputTokens: 200, ItemMaxTokens: 260},
		{Name: "title", Weight: 1, Backlog: 1412, After: "summary", BatchMax: 10, PromptTokens: 150,
			ItemInputTokens: 40, ItemOutputTokens: 40, ItemMaxTokens: 60},
	}
	if len(s.Flows) != len(wantFlows) {
		t.Fatalf("got %d flows, want %d", len(s.Flows), len(wantFlows))
	}
	for i := range wantFlows {
		if !reflect.DeepEqual(s.Flows[i], wantFlows[i]) {
			t.Errorf("flows[%d] = %+v\nwant %+v", i, s.Flows[i], wantFlows[i])
		}
	}
}

const base = `name: t
duration: 1h
provider:
  profile: groq
  limits: {tpm: 8000}
flows:
  - name: a
`

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte("duration: 2m\nflows:\n  - name: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := s.Provider
	if p.Profile != "openai" || p.FixedWindows || p.SettleOutput || p.DefaultMaxTokens != 1000 || p.Limits != (governor.Limits{}) {
		t.Errorf("provider defaults = %+v", p)
	}
	if f := s.Flows[0]; f.Weight != 1 || f.BatchMax != 1 || f.Priority != 0 || f.ItemMaxTokens != 0 {
		t.Errorf("flow defaults = %+v", f)
	}
}

func TestParseAll(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`name: all
duration: 24h
seed: -7
provider:
  profile: anthropic
  window: fixed
  accounting: settle
  latency: 150ms
  default_max_tokens: 4096
  faults: {error_5xx: 0.1, timeout: 0.05, reset: 0.01, bad_json: 0.01}
  unannounced: [otpm, itpm]
  limits: {rpm: 50, rpd: 5000, tpm: 90000, tpd: 1000000, itpm: 40000, otpm: 8000}
flows:
  - name: a
    priority: -2
    weight: 2.5
    arrivals_per_day: 12.5
  - name: b
    after: a
    batch_max: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	p := s.Provider
	want := Provider{Profile: "anthropic", FixedWindows: true, SettleOutput: true, Latency: 150 * time.Millisecond,
		DefaultMaxTokens: 4096, Faults: Faults{0.1, 0.05, 0.01, 0.01},
		Limits:      governor.Limits{50, 5000, 90000, 1000000, 40000, 8000},
		Unannounced: [governor.NumLimits]bool{governor.ITPM: true, governor.OTPM: true}}
	if p != want {
		t.Errorf("provider = %+v\nwant %+v", p, want)
	}
	if got, want := p.Announced(), (governor.Limits{50, 5000, 90000, 1000000, 0, 0}); got != want {
		t.Errorf("announced limits = %v, want %v", got, want)
	}
	if s.Seed != -7 || s.Flows[0].Priority != -2 || s.Flows[0].Weight != 2.5 || s.Flows[0].ArrivalsPerDay != 12.5 ||
		s.Flows[1].After != "a" || s.Flows[1].BatchMax != 3 {
		t.Errorf("scenario = %+v", s)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		want       []string // every one must appear in the error
	}{
		{"unknown top key", base + "colour: red\n", []string{"colour: unknown key", "line 8"}},
		{"unknown provider key", strings.Replace(base, "profile: groq", "profile: groq\n  region: eu", 1), []string{"provider.region: unknown key"}},
		{"unknown flow key", base + "    batchmax: 3\n", []string{"flows[0].batchmax: unknown key"}},
		{"unknown flow key later", base + "  - name: b\n  - name: c\n    batchmax: 3\n", []string{"flows[2].batchmax: unknown key"}},
		{"unknown fault", strings.Replace(base, "limits:", "faults: {oops: 0.1}\n  limits:", 1), []string{"provider.faults.oops: unknown key"}},
		{"unknown limit", strings.Replace(base, "tpm: 8000", "tpx: 8000", 1), []string{`provider.limits.tpx: "tpx" is not a limit (want rpm, rpd, tpm, tpd, itpm or otpm)`, "line 5"}},
		{"limit upper case", strings.Replace(base, "tpm: 8000", "TPM: 8000", 1), []string{`provider.limits.TPM: "TPM" is not a limit`}},
		{"limit zero", strings.Replace(base, "tpm: 8000", "tpm: 0", 1), []string{"provider.limits.tpm: 0 is not positive", "line 5"}},
		{"limit negative", strings.Replace(base, "tpm: 8000", "tpm: -5", 1), []string{"provider.limits.tpm: -5 is not positive"}},
		{"limit not a number", strings.Replace(base, "tpm: 8000", "tpm: lots", 1), []string{"provider.limits.tpm", `"lots"`, "whole number"}},
		{"limit fraction", strings.Replace(base, "tpm: 8000", "tpm: 1.5", 1), []string{"provider.limits.tpm", `"1.5"`}},
		{"window", strings.Replace(base, "profile: groq", "profile: groq\n  window: sliding", 1), []string{`provider.window: "sliding" is not rolling or fixed`}},
		{"accounting", strings.Replace(base, "profile: groq", "profile: groq\n  accounting: later", 1), []string{`provider.accounting: "later" is not reserve or settle`}},
		{"profile", strings.Replace(base, "profile: groq", "profile: mistral", 1), []string{`provider.profile: "mistral"`, "groq, openai or anthropic"}},
		{"latency", strings.Replace(base, "profile: groq", "profile: groq\n  latency: fast", 1), []string{`provider.latency: "fast"`}},
		{"latency negative", strings.Replace(base, "profile: groq", "profile: groq\n  latency: -1s", 1), []string{"provider.latency: -1s is negative", "line 5"}},
		{"default max tokens", strings.Replace(base, "profile: groq", "profile: groq\n  default_max_tokens: 0", 1), []string{"provider.default_max_tokens: 0 is not positive"}},
		{"fault above 1", strings.Replace(base, "limits:", "faults: {timeout: 1.5}\n  limits:", 1), []string{"provider.faults.timeout: 1.5 is not a fraction in [0, 1]", "line 5"}},
		{"fault negative", strings.Replace(base, "limits:", "faults: {reset: -0.1}\n  limits:", 1), []string{"provider.faults.reset: -0.1 is not a fraction"}},
		{"fault not a number", strings.Replace(base, "limits:", "faults: {bad_json: often}\n  limits:", 1), []string{`provider.faults.bad_json: "often"`}},
		{"fault sum", strings.Replace(base, "limits:", "faults: {error_5xx: 0.6, timeout: 0.5}\n  limits:", 1), []string{"provider.faults", "more than 1"}},
		{"unannounced not a list", strings.Replace(base, "limits:", "unannounced: otpm\n  limits:", 1), []string{"provider.unannounced: want a list", "line 5"}},
		{"unannounced unknown", strings.Replace(base, "limits:", "unannounced: [tpx]\n  limits:", 1), []string{`provider.unannounced[0]: "tpx" is not a limit`}},
		{"unannounced upper case", strings.Replace(base, "limits:", "unannounced: [tpm, OTPM]\n  limits:", 1), []string{`provider.unannounced[1]: "OTPM" is not a limit`}},
		{"unannounced twice", strings.Replace(base, "limits:", "unannounced: [tpm, tpm]\n  limits:", 1), []string{"provider.unannounced[1]: tpm is given twice", "line 5"}},
		{"unannounced not a limit of the provider", strings.Replace(base, "limits:", "unannounced: [otpm]\n  limits:", 1), []string{"provider.unannounced: otpm is not one of provider.limits", "line 5"}},
		{"unannounced before limits", strings.Replace(base, "  limits: {tpm: 8000}\n", "  unannounced: [tpm]\n  limits: {rpm: 5}\n", 1), []string{"provider.unannounced: tpm is not one of provider.limits"}},
		{"unannounced a number", strings.Replace(base, "limits:", "unannounced: [3]\n  limits:", 1), []string{`provider.unannounced[0]: "3" is not a limit`}},
		{"duration missing", strings.Replace(base, "duration: 1h\n", "", 1), []string{"duration: missing"}},
		{"duration bad", strings.Replace(base, "duration: 1h", "duration: a week", 1), []string{`duration: "a week"`}},
		{"duration zero", strings.Replace(base, "duration: 1h", "duration: 0s", 1), []string{"duration: 0s is not positive"}},
		{"duration negative", strings.Replace(base, "duration: 1h", "duration: -1h", 1), []string{"duration: -1h0m0s is not positive"}},
		{"seed", strings.Replace(base, "name: t", "name: t\nseed: abc", 1), []string{`seed: "abc"`}},
		{"no flows", strings.Replace(base, "flows:\n  - name: a\n", "", 1), []string{"flows: at least one"}},
		{"flows not a list", strings.Replace(base, "  - name: a\n", "  name: a\n", 1), []string{"flows: want a list"}},
		{"flow name missing", base + "  - weight: 2\n", []string{"flows[1].name: missing", "line 8"}},
		{"flow name empty", base + "  - name: \"\"\n", []string{"flows[1].name: missing or empty", "line 8"}},
		{"flow name duplicate", base + "  - name: a\n", []string{`flows[1].name: "a" is already the name of flows[0]`}},
		{"weight zero", base + "    weight: 0\n", []string{"flows[0].weight: 0 is not positive", "line 8"}},
		{"weight negative", base + "    weight: -1\n", []string{"flows[0].weight: -1 is not positive"}},
		{"batch_max zero", base + "    batch_max: 0\n", []string{"flows[0].batch_max: 0 is not positive"}},
		{"batch_max fraction", base + "    batch_max: 2.5\n", []string{`flows[0].batch_max: "2.5"`}},
		{"backlog negative", base + "    backlog: -3\n", []string{"flows[0].backlog: -3 is negative", "line 8"}},
		{"arrivals negative", base + "    arrivals_per_day: -1\n", []string{"flows[0].arrivals_per_day: -1 is negative"}},
		{"priority", base + "    priority: high\n", []string{`flows[0].priority: "high"`}},
		{"prompt_tokens", base + "    prompt_tokens: -1\n", []string{"flows[0].prompt_tokens: -1 is negative"}},
		{"item_input_tokens", base + "    item_input_tokens: -1\n", []string{"flows[0].item_input_tokens: -1 is negative"}},
		{"item_output_tokens", base + "    item_output_tokens: x\n", []string{`flows[0].item_output_tokens: "x"`}},
		{"item_max_tokens", base + "    item_max_tokens: -60\n", []string{"flows[0].item_max_tokens: -60 is negative", "line 8"}},
		{"after unknown", base + "    after: ghost\n", []string{`flows[0].after: "ghost" names no flow`}},
		{"every negative", base + "    every: -30m\n", []string{"flows[0].every: -30m0s is not between 0 and 8784h0m0s"}},
		{"every not a duration", base + "    every: often\n", []string{`flows[0].every: "often" is not a duration`}},
		{"per_run without every", base + "    per_run: 5\n", []string{"flows[0].every: missing: per_run and gap pace a job"}},
		{"per_run negative", base + "    every: 30m\n    per_run: -1\n", []string{"flows[0].per_run: -1 is negative"}},
		{"model without price", base + "    model: m2\nprices:\n  m1: {input: 1, output: 2}\n", []string{`flows[0].model: "m2" has no price in prices`}},
		{"price negative", base + "prices:\n  m1: {input: -1, output: 2}\n", []string{"prices.m1.input: -1 is not between 0 and 1e+06"}},
		{"price unknown key", base + "prices:\n  m1: {inptu: 1}\n", []string{"prices.m1.inptu: unknown key"}},
		{"after self", base + "    after: a\n", []string{"flows[0].after: cycle a → a"}},
		{"after cycle", base + "    after: c\n  - name: b\n    after: a\n  - name: c\n    after: b\n", []string{"flows[0].after: cycle a → c → b → a"}},
		{"key twice", base + "    backlog: 1\n    backlog: 2\n", []string{"flows[0].backlog: given twice", "line 9"}},
		{"key without a value", base + "    backlog:\n", []string{"flows[0].backlog: has no value", "line 8"}},
		{"merge key", base + "    <<: {backlog: 2}\n", []string{"flows[0].<<: unknown key", "line 8"}},
		{"alias of another section", strings.Replace(base, "provider:", "provider: &p", 1) + "  - *p\n", []string{"flows[1].profile: unknown key", "line 4"}},
		{"provider not a mapping", strings.Replace(base, "provider:\n  profile: groq\n  limits: {tpm: 8000}\n", "provider: groq\n", 1), []string{"provider: want a mapping"}},
		{"name not a string", strings.Replace(base, "name: t", "name: [x]", 1), []string{"name: want a single value"}},
		{"not yaml", "flows: [\n", []string{"not valid YAML"}},
		{"empty", "", []string{"empty"}},
		{"top level list", "- a\n", []string{"want a mapping of keys to values", "line 1"}},
		{"flow budget without a price", strings.Replace(budgetBase, "prices:\n  m: {input: 1, output: 2}\n", "", 1),
			[]string{"flows[0].budget: needs a price for the flow's model", "line 7"}},
		{"flow budget at a free price", strings.Replace(budgetBase, "{input: 1, output: 2}", "{input: 0, output: 0}", 1),
			[]string{"flows[0].budget: needs a price"}},
		{"flow budget negative", strings.Replace(budgetBase, "day: 0.5", "day: -1", 1),
			[]string{"flows[0].budget.day: -1 is not between 0 and 1e+09 (money; 0: no budget)", "line 9"}},
		{"flow budget over the bound", strings.Replace(budgetBase, "month: 10", "month: 2e9", 1),
			[]string{"flows[0].budget.month: 2e+09 is not between 0 and 1e+09", "line 9"}},
		{"flow budget below a billionth", strings.Replace(budgetBase, "day: 0.5", "day: 1e-12", 1),
			[]string{"flows[0].budget.day: 1e-12 is less than a billionth"}},
		{"flow budget not a number", strings.Replace(budgetBase, "day: 0.5", "day: lots", 1),
			[]string{`flows[0].budget.day: "lots" is not a number`}},
		{"flow budget unknown key", strings.Replace(budgetBase, "day: 0.5", "week: 0.5", 1),
			[]string{"flows[0].budget.week: unknown key", "line 9"}},
		{"flow budget as text", strings.Replace(budgetBase, "{day: 0.5, month: 10}", `"day=0.5"`, 1),
			[]string{"flows[0].budget: want a mapping"}},
		{"another flow's model priced otherwise", strings.Replace(budgetBase, "  m: {input: 1, output: 2}\n", "  m: {input: 1, output: 2}\n  n: {input: 3, output: 4}\n", 1) +
			"  - name: b\n    model: n\n", []string{`flows[1].model: "n" is not priced as "m" of flows[0], which has a budget`, "line 12"}},
		{"flow budget with targets", targetsBase + "  - name: c\n    budget: {day: 1}\n",
			[]string{"flows[2].budget: a flow's own budget across targets is not simulated yet"}},
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

func TestBaseParses(t *testing.T) {
	t.Parallel()
	// The error table edits this document; it must be valid itself.
	if _, err := Parse([]byte(base)); err != nil {
		t.Fatal(err)
	}
}

func TestLoadNamesFile(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/missing.yaml")
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("error = %v, want one naming the file", err)
	}
}

func TestLoadReadsOnlyBoundedRegularFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]error{dir: yamlfile.ErrNotRegular, big: yamlfile.ErrTooLarge} {
		if _, err := Load(path); !errors.Is(err, want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%s) = %v, want %v naming the path", path, err, want)
		}
	}
}

func TestValidateInCode(t *testing.T) {
	t.Parallel()
	s := Scenario{Duration: time.Hour, Provider: Provider{Profile: "groq", DefaultMaxTokens: 1000},
		Flows: []Flow{{Name: "a", Weight: 1, BatchMax: 0}}}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "flows[0].batch_max") {
		t.Errorf("Validate = %v, want batch_max error", err)
	}
	s.Flows[0].BatchMax = 1
	s.Provider.Limits[governor.TPM] = -1
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "provider.limits.tpm") {
		t.Errorf("Validate = %v, want tpm error", err)
	}
	s.Provider.Limits[governor.TPM] = 8000
	s.Provider.Unannounced[governor.OTPM] = true
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "provider.unannounced: otpm is not one of provider.limits") {
		t.Errorf("Validate = %v, want unannounced error", err)
	}
	s.Provider.Limits[governor.OTPM] = 1000
	if err := s.Validate(); err != nil {
		t.Errorf("Validate = %v, want none", err)
	}
}

// TestScenarioBounds: a value beyond a documented bound is refused at load, naming
// the key, the bound and the line; a value at the bound loads. Numbers too
// large for int64 or float64 are refused, never wrapped or read as zero.
func TestScenarioBounds(t *testing.T) {
	t.Parallel()
	flow := func(extra string) string { return base + extra }
	for _, tc := range []struct {
		name, yaml string
		want       []string // every one must appear in the error; nil: it loads
	}{
		{"duration at bound", strings.Replace(base, "duration: 1h", "duration: 8784h", 1), nil},
		{"duration over", strings.Replace(base, "duration: 1h", "duration: 8785h", 1), []string{"duration: 8785h0m0s is more than the bound of 8784h (366 days)", "line 2"}},
		{"duration overflows", strings.Replace(base, "duration: 1h", "duration: 100000000h", 1), []string{`duration: "100000000h" is too large`}},
		{"latency over", strings.Replace(base, "profile: groq", "profile: groq\n  latency: 61m", 1), []string{"provider.latency: 1h1m0s is more than the bound of 1h0m0s"}},
		{"default max at bound", strings.Replace(base, "profile: groq", "profile: groq\n  default_max_tokens: 32768", 1), nil},
		{"default max over", strings.Replace(base, "profile: groq", "profile: groq\n  default_max_tokens: 32769", 1), []string{"provider.default_max_tokens: 32769 is more than the bound of 32,768", "line 5"}},
		{"limit at bound", strings.Replace(base, "tpm: 8000", "tpm: 1_000_000_000_000", 1), nil},
		{"limit over", strings.Replace(base, "tpm: 8000", "tpm: 1000000000001", 1), []string{"provider.limits.tpm: 1000000000001 is more than the bound of 1,000,000,000,000", "line 5"}},
		{"limit beyond int64", strings.Replace(base, "tpm: 8000", "tpm: 9223372036854775808", 1), []string{`provider.limits.tpm: "9223372036854775808" is more than the bound`}},
		{"limit beyond uint64", strings.Replace(base, "tpm: 8000", "tpm: 99999999999999999999999", 1), []string{"provider.limits.tpm", "is more than the bound"}},
		{"limit 1e300", strings.Replace(base, "tpm: 8000", "tpm: 1e300", 1), []string{`provider.limits.tpm: "1e300" is more than the bound`}},
		{"limit whole float", strings.Replace(base, "tpm: 8000", "tpm: 1e4", 1), nil},
		{"backlog at bound", flow("    backlog: 1000000\n"), nil},
		{"backlog over", flow("    backlog: 2147483647\n"), []string{"flows[0].backlog: 2147483647 is more than the bound of 1,000,000", "line 8"}},
		{"backlog below int64", flow("    backlog: -9223372036854775809\n"), []string{`flows[0].backlog: "-9223372036854775809" is less than the bound of -9,223,372,036,854,775,808`}},
		{"backlog NaN", flow("    backlog: .nan\n"), []string{`flows[0].backlog: ".nan" is not a whole number`}},
		{"backlog inf", flow("    backlog: .inf\n"), []string{`flows[0].backlog: ".inf" is more than the bound`}},
		{"backlog quoted", flow("    backlog: \"5\"\n"), []string{`flows[0].backlog: "5" is not a whole number`}},
		{"arrivals at bound", flow("    arrivals_per_day: 1e6\n"), nil}, // an hour of it: 41,667 items
		{"arrivals over", flow("    arrivals_per_day: 1e12\n"), []string{"flows[0].arrivals_per_day: 1e+12 is more than the bound of 1,000,000", "line 8"}},
		{"arrivals 1e300", flow("    arrivals_per_day: 1e300\n"), []string{"flows[0].arrivals_per_day: 1e+300 is more than the bound of 1,000,000"}},
		{"arrivals 1e400", flow("    arrivals_per_day: 1e400\n"), []string{`flows[0].arrivals_per_day: "1e400" is not a finite number`}},
		{"arrivals NaN", flow("    arrivals_per_day: .nan\n"), []string{`flows[0].arrivals_per_day: ".nan" is not a finite number`}},
		{"arrivals inf", flow("    arrivals_per_day: .inf\n"), []string{`flows[0].arrivals_per_day: ".inf" is not a finite number`}},
		{"arrivals tiny", flow("    arrivals_per_day: 1e-300\n"), []string{"flows[0].arrivals_per_day: 1e-300 is less than the bound of 0.01 (one item every 100 days; 0 means none)"}},
		{"arrivals least", flow("    arrivals_per_day: 0.01\n"), nil},
		{"weight over", flow("    weight: 1e7\n"), []string{"flows[0].weight: 1e+07 is more than the bound of 1,000,000"}},
		{"weight tiny", flow("    weight: 1e-9\n"), []string{"flows[0].weight: 1e-09 is less than the bound of 0.001"}},
		{"batch_max over", flow("    batch_max: 10001\n"), []string{"flows[0].batch_max: 10001 is more than the bound of 10,000"}},
		{"prompt_tokens over", flow("    prompt_tokens: 1000001\n"), []string{"flows[0].prompt_tokens: 1000001 is more than the bound of 1,000,000"}},
		{"item_input_tokens over", flow("    item_input_tokens: 1000001\n"), []string{"flows[0].item_input_tokens: 1000001 is more than the bound of 1,000,000"}},
		{"item_output_tokens over", flow("    item_output_tokens: 32769\n"), []string{"flows[0].item_output_tokens: 32769 is more than the bound of 32,768"}},
		{"item_max_tokens over", flow("    item_max_tokens: 40000\n"), []string{"flows[0].item_max_tokens: 40000 is more than the bound of 32,768"}},
		{"request max at bound", flow("    batch_max: 8\n    item_max_tokens: 4096\n"), nil},
		{"request max over", flow("    batch_max: 10\n    item_max_tokens: 4096\n"),
			[]string{"flows[0]: batch_max × item_max_tokens = 10 × 4096 = 40,960 max_tokens in one request, more than the simulated model's 32,768 max output tokens", "line 7"}},
		{"priority beyond int32", flow("    priority: 2147483648\n"), []string{"flows[0].priority: 2147483648 is not between -3 and 3"}},
		{"priority at bound", flow("    priority: 3\n"), nil},
		{"priority over", flow("    priority: 4\n"), []string{`flows[0].priority: 4 is not between -3 and 3`}},
		{"priority under", flow("    priority: -4\n"), []string{`flows[0].priority: -4 is not between -3 and 3`}},
		{"seed beyond int64", strings.Replace(base, "name: t", "name: t\nseed: 9223372036854775808", 1), []string{`seed: "9223372036854775808" is more than the bound`}},
		{"seed below int64", strings.Replace(base, "name: t", "name: t\nseed: -9223372036854775809", 1), []string{`seed: "-9223372036854775809" is less than the bound`}},
		{"seed at int64's bounds", strings.Replace(base, "name: t", "name: t\nseed: -9223372036854775808", 1), nil},
		{"too many flows", base + manyFlows(100), []string{"flows: 101 flows is more than the bound of 100", "line 7"}},
		{"items over", strings.Replace(base, "duration: 1h", "duration: 168h", 1) + "    arrivals_per_day: 150000\n",
			[]string{"flows: the scenario makes up to 1,050,000 items", "more than the bound of 1,000,000", "line 7"}},
		{"items of after chains", base + "    backlog: 400000\n  - name: b\n    after: a\n  - name: c\n    after: b\n",
			[]string{"flows: the scenario makes up to 1,200,000 items"}},
		{"file too large", base + "# " + strings.Repeat("x", MaxFileBytes) + "\n", []string{"scenario is more than the bound of 1,048,576 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse([]byte(tc.yaml))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				checkBounded(t, s)
				return
			}
			if err == nil {
				t.Fatalf("loaded %+v", s)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// manyFlows is n more flows, named f0…
func manyFlows(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  - name: f%d\n", i)
	}
	return b.String()
}

// checkBounded asserts every documented bound on s, independently of Validate.
func checkBounded(t *testing.T, s *Scenario) {
	t.Helper()
	if s.Duration <= 0 || s.Duration > 366*24*time.Hour {
		t.Errorf("duration %s", s.Duration)
	}
	p := s.Provider
	if p.Latency < 0 || p.Latency > time.Hour || p.DefaultMaxTokens < 1 || p.DefaultMaxTokens > 32768 {
		t.Errorf("provider %+v", p)
	}
	for l := range governor.NumLimits {
		if p.Limits[l] < 0 || p.Limits[l] > 1e12 {
			t.Errorf("limit %s = %d", l, p.Limits[l])
		}
		if p.Unannounced[l] && p.Limits[l] == 0 {
			t.Errorf("limit %s unannounced but not enforced", l)
		}
	}
	for _, x := range []float64{p.Faults.Error5xx, p.Faults.Timeout, p.Faults.Reset, p.Faults.BadJSON, p.Faults.Sum()} {
		if !(x >= 0 && x <= 1+1e-9) {
			t.Errorf("faults %+v", p.Faults)
		}
	}
	if len(s.Flows) < 1 || len(s.Flows) > 100 {
		t.Errorf("%d flows", len(s.Flows))
	}
	var items float64
	byName := map[string]Flow{}
	for _, f := range s.Flows {
		byName[f.Name] = f
	}
	for _, f := range s.Flows {
		if !(f.Weight >= 0.001 && f.Weight <= 1e6) || f.Backlog < 0 || f.Backlog > 1e6 || f.BatchMax < 1 || f.BatchMax > 10000 ||
			!(f.ArrivalsPerDay == 0 || f.ArrivalsPerDay >= 0.01 && f.ArrivalsPerDay <= 1e6) ||
			f.PromptTokens < 0 || f.PromptTokens > 1e6 || f.ItemInputTokens < 0 || f.ItemInputTokens > 1e6 ||
			f.ItemOutputTokens < 0 || f.ItemOutputTokens > 32768 || f.ItemMaxTokens < 0 || int64(f.BatchMax)*f.ItemMaxTokens > 32768 {
			t.Errorf("flow %+v", f)
		}
		for _, x := range []float64{f.Budget.Day, f.Budget.Month} {
			if !(x == 0 || x >= 1e-9 && x <= 1e9) {
				t.Errorf("flow %s: budget %+v", f.Name, f.Budget)
			}
		}
		if pr, ok := s.PriceOf(&f); !f.Budget.IsZero() && (!ok || pr == (Price{}) || s.Routed()) {
			t.Errorf("flow %s: budget %+v without a price of one key", f.Name, f.Budget)
		}
		// The items this flow can get: its own and those of every flow up its chain.
		for cur, n := f, 0; n <= len(s.Flows); n++ {
			items += float64(cur.Backlog) + math.Ceil(s.Duration.Hours()/24*cur.ArrivalsPerDay)
			next, ok := byName[cur.After]
			if !ok {
				break
			}
			cur = next
		}
	}
	if items > 1_000_000*(1+1e-6) {
		t.Errorf("%v items", items)
	}
}

func TestScenarioItems(t *testing.T) {
	t.Parallel()
	s := &Scenario{Duration: 48 * time.Hour, Flows: []Flow{
		{Name: "a", Backlog: 10, ArrivalsPerDay: 3},
		{Name: "b", After: "a", Backlog: 1},
		{Name: "c", After: "b"},
		{Name: "d", ArrivalsPerDay: 0.5}, // one every 2 days: one slot starts in 48h
	}}
	// a: 10 + 6; b: 1 + 16; c: 17; d: 1.
	if got := s.Items(); got != 16+17+17+1 {
		t.Errorf("Items = %d, want 51", got)
	}
	f := Flow{ArrivalsPerDay: 100}
	if f.ArrivalSlot() != 864*time.Second || f.Arrivals(time.Hour) != 5 {
		t.Errorf("slot %s arrivals %d", f.ArrivalSlot(), f.Arrivals(time.Hour))
	}
}

// TestScenarioBoundsInCode: a scenario built in code obeys the same bounds.
func TestScenarioBoundsInCode(t *testing.T) {
	t.Parallel()
	ok := func() Scenario {
		return Scenario{Duration: time.Hour, Provider: Provider{Profile: "groq", DefaultMaxTokens: 1000},
			Flows: []Flow{{Name: "a", Weight: 1, BatchMax: 1}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*Scenario)
		want string
	}{
		{"duration", func(s *Scenario) { s.Duration = 400 * 24 * time.Hour }, "duration: 9600h0m0s is more than the bound of 8784h (366 days)"},
		{"latency", func(s *Scenario) { s.Provider.Latency = math.MaxInt64 }, "provider.latency"},
		{"default max", func(s *Scenario) { s.Provider.DefaultMaxTokens = 1 << 40 }, "provider.default_max_tokens: 1099511627776 is more than the bound of 32,768"},
		{"limit", func(s *Scenario) { s.Provider.Limits[governor.TPD] = math.MaxInt64 }, "provider.limits.tpd"},
		{"backlog", func(s *Scenario) { s.Flows[0].Backlog = math.MaxInt32 }, "flows[0].backlog: 2147483647 is more than the bound of 1,000,000"},
		{"arrivals", func(s *Scenario) { s.Flows[0].ArrivalsPerDay = math.Inf(1) }, "flows[0].arrivals_per_day: +Inf is more than the bound"},
		{"arrivals NaN", func(s *Scenario) { s.Flows[0].ArrivalsPerDay = math.NaN() }, "flows[0].arrivals_per_day: NaN is not a number"},
		{"weight", func(s *Scenario) { s.Flows[0].Weight = math.NaN() }, "flows[0].weight"},
		{"batch", func(s *Scenario) { s.Flows[0].BatchMax = 1 << 30 }, "flows[0].batch_max"},
		{"within", func(s *Scenario) { s.Flows[0].Within = -time.Second }, "flows[0].within: -1s is not between 0 and"},
		{"tokens", func(s *Scenario) { s.Flows[0].ItemInputTokens = math.MaxInt64 }, "flows[0].item_input_tokens"},
		{"request", func(s *Scenario) { s.Flows[0].BatchMax, s.Flows[0].ItemMaxTokens = 100, 1000 }, "flows[0]: batch_max × item_max_tokens"},
		{"flows", func(s *Scenario) {
			for i := range 100 {
				s.Flows = append(s.Flows, Flow{Name: fmt.Sprint(i), Weight: 1, BatchMax: 1})
			}
		}, "flows: 101 flows is more than the bound of 100"},
		{"items", func(s *Scenario) { s.Flows[0].ArrivalsPerDay = 1e6; s.Duration = 48 * time.Hour }, "flows: the scenario makes up to 2,000,000 items"},
	} {
		s := ok()
		tc.edit(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
	s := ok()
	if err := s.Validate(); err != nil {
		t.Errorf("valid scenario: %v", err)
	}
}

func TestParseFaults(t *testing.T) {
	t.Parallel()
	f, err := ParseFaults(" error_5xx=0.1, timeout=0.05,reset=0,bad_json=0.02 ,")
	if err != nil || f != (Faults{Error5xx: 0.1, Timeout: 0.05, BadJSON: 0.02}) {
		t.Errorf("got %+v, %v", f, err)
	}
	for in, want := range map[string]string{
		"timeout":               `"timeout": want name=fraction, e.g. timeout=0.05`,
		"timeout=2":             `timeout: "2" is not a fraction in [0, 1]`,
		"timeout=NaN":           `timeout: "NaN" is not a fraction in [0, 1]`,
		"slow=0.1":              `unknown fault "slow" (want error_5xx, timeout, reset or bad_json)`,
		"timeout=0.6,reset=0.5": "the fractions add up to more than 1",
	} {
		if _, err := ParseFaults(in); err == nil || err.Error() != want {
			t.Errorf("ParseFaults(%q) = %v, want %q", in, err, want)
		}
	}
}
