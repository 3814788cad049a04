package scenario

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
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
	if p.Profile != "groq" || p.Window != Rolling || p.Accounting != Reserve ||
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
		if s.Flows[i] != wantFlows[i] {
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
	if p.Profile != "openai" || p.Window != Rolling || p.Accounting != Reserve || p.DefaultMaxTokens != 1000 || p.Limits != (governor.Limits{}) {
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
	want := Provider{Profile: "anthropic", Window: Fixed, Accounting: Settle, Latency: 150 * time.Millisecond,
		DefaultMaxTokens: 4096, Faults: Faults{0.1, 0.05, 0.01, 0.01},
		Limits: governor.Limits{50, 5000, 90000, 1000000, 40000, 8000}}
	if p != want {
		t.Errorf("provider = %+v\nwant %+v", p, want)
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
		{"unknown limit", strings.Replace(base, "tpm: 8000", "tpx: 8000", 1), []string{"provider.limits.tpx: unknown limit"}},
		{"limit upper case", strings.Replace(base, "tpm: 8000", "TPM: 8000", 1), []string{"provider.limits.TPM: unknown limit"}},
		{"limit zero", strings.Replace(base, "tpm: 8000", "tpm: 0", 1), []string{"provider.limits.tpm", `"0"`, "not positive"}},
		{"limit negative", strings.Replace(base, "tpm: 8000", "tpm: -5", 1), []string{"provider.limits.tpm", `"-5"`}},
		{"limit not a number", strings.Replace(base, "tpm: 8000", "tpm: lots", 1), []string{"provider.limits.tpm", `"lots"`, "whole number"}},
		{"limit fraction", strings.Replace(base, "tpm: 8000", "tpm: 1.5", 1), []string{"provider.limits.tpm", `"1.5"`}},
		{"window", strings.Replace(base, "profile: groq", "profile: groq\n  window: sliding", 1), []string{`provider.window: "sliding" is not rolling or fixed`}},
		{"accounting", strings.Replace(base, "profile: groq", "profile: groq\n  accounting: later", 1), []string{`provider.accounting: "later" is not reserve or settle`}},
		{"profile", strings.Replace(base, "profile: groq", "profile: mistral", 1), []string{`provider.profile: "mistral"`, "groq, openai or anthropic"}},
		{"latency", strings.Replace(base, "profile: groq", "profile: groq\n  latency: fast", 1), []string{`provider.latency: "fast"`}},
		{"latency negative", strings.Replace(base, "profile: groq", "profile: groq\n  latency: -1s", 1), []string{`provider.latency: "-1s" is negative`}},
		{"default max tokens", strings.Replace(base, "profile: groq", "profile: groq\n  default_max_tokens: 0", 1), []string{`provider.default_max_tokens: "0"`}},
		{"fault above 1", strings.Replace(base, "limits:", "faults: {timeout: 1.5}\n  limits:", 1), []string{`provider.faults.timeout: "1.5"`}},
		{"fault negative", strings.Replace(base, "limits:", "faults: {reset: -0.1}\n  limits:", 1), []string{`provider.faults.reset: "-0.1"`}},
		{"fault not a number", strings.Replace(base, "limits:", "faults: {bad_json: often}\n  limits:", 1), []string{`provider.faults.bad_json: "often"`}},
		{"fault sum", strings.Replace(base, "limits:", "faults: {error_5xx: 0.6, timeout: 0.5}\n  limits:", 1), []string{"provider.faults", "more than 1"}},
		{"duration missing", strings.Replace(base, "duration: 1h\n", "", 1), []string{"duration: missing"}},
		{"duration bad", strings.Replace(base, "duration: 1h", "duration: a week", 1), []string{`duration: "a week"`}},
		{"duration zero", strings.Replace(base, "duration: 1h", "duration: 0s", 1), []string{"duration: 0s is not positive"}},
		{"duration negative", strings.Replace(base, "duration: 1h", "duration: -1h", 1), []string{"duration: -1h0m0s is not positive"}},
		{"seed", strings.Replace(base, "name: t", "name: t\nseed: abc", 1), []string{`seed: "abc"`}},
		{"no flows", strings.Replace(base, "flows:\n  - name: a\n", "", 1), []string{"flows: at least one"}},
		{"flows not a list", strings.Replace(base, "  - name: a\n", "  name: a\n", 1), []string{"flows: want a list"}},
		{"flow name missing", base + "  - weight: 2\n", []string{"flows[1].name: missing"}},
		{"flow name empty", base + "  - name: \"\"\n", []string{"flows[1].name: empty"}},
		{"flow name duplicate", base + "  - name: a\n", []string{`flows[1].name: "a" is already the name of flows[0]`}},
		{"weight zero", base + "    weight: 0\n", []string{`flows[0].weight: "0" is not positive`}},
		{"weight negative", base + "    weight: -1\n", []string{`flows[0].weight: "-1"`}},
		{"batch_max zero", base + "    batch_max: 0\n", []string{`flows[0].batch_max: "0"`}},
		{"batch_max fraction", base + "    batch_max: 2.5\n", []string{`flows[0].batch_max: "2.5"`}},
		{"backlog negative", base + "    backlog: -3\n", []string{`flows[0].backlog: "-3" is negative`}},
		{"arrivals negative", base + "    arrivals_per_day: -1\n", []string{`flows[0].arrivals_per_day: "-1" is negative`}},
		{"priority", base + "    priority: high\n", []string{`flows[0].priority: "high"`}},
		{"prompt_tokens", base + "    prompt_tokens: -1\n", []string{`flows[0].prompt_tokens: "-1"`}},
		{"item_input_tokens", base + "    item_input_tokens: -1\n", []string{`flows[0].item_input_tokens: "-1"`}},
		{"item_output_tokens", base + "    item_output_tokens: x\n", []string{`flows[0].item_output_tokens: "x"`}},
		{"item_max_tokens", base + "    item_max_tokens: -60\n", []string{`flows[0].item_max_tokens: "-60"`}},
		{"after unknown", base + "    after: ghost\n", []string{`flows[0].after: "ghost" names no flow`}},
		{"after self", base + "    after: a\n", []string{"flows[0].after: cycle a → a"}},
		{"after cycle", base + "    after: c\n  - name: b\n    after: a\n  - name: c\n    after: b\n", []string{"flows[0].after: cycle a → c → b → a"}},
		{"key twice", base + "    backlog: 1\n    backlog: 2\n", []string{"flows[0].backlog: given twice"}},
		{"provider not a mapping", strings.Replace(base, "provider:\n  profile: groq\n  limits: {tpm: 8000}\n", "provider: groq\n", 1), []string{"provider: want a mapping"}},
		{"name not a string", strings.Replace(base, "name: t", "name: [x]", 1), []string{"name: want a single value"}},
		{"not yaml", "flows: [\n", []string{"not valid YAML"}},
		{"empty", "", []string{"empty"}},
		{"top level list", "- a\n", []string{"the scenario: want a mapping"}},
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

func TestEnums(t *testing.T) {
	t.Parallel()
	for _, w := range []Window{Rolling, Fixed} {
		if got, err := ParseWindow(w.String()); err != nil || got != w {
			t.Errorf("ParseWindow(%q) = %v, %v", w, got, err)
		}
	}
	for _, a := range []Accounting{Reserve, Settle} {
		if got, err := ParseAccounting(a.String()); err != nil || got != a {
			t.Errorf("ParseAccounting(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseWindow("Rolling"); err == nil {
		t.Error("ParseWindow accepted a capitalised name")
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
}
