package forecast

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzScenarioParse: Parse never panics, and every scenario it accepts is within
// every documented bound (checked independently of Validate) and passes
// Validate again.
func FuzzScenarioParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("../bench/testdata/*.yaml")
	for _, name := range append(files, more...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		base,
		base + "    backlog: 1000000\n",
		base + "    arrivals_per_day: 1e12\n",
		base + "    arrivals_per_day: 1e300\n",
		base + "    backlog: 2147483647\n",
		base + "    batch_max: 8\n    item_max_tokens: 4096\n",
		base + "    after: a\n",
		base + "  - name: b\n    after: a\n    backlog: 5\n",
		"duration: 8784h\nflows:\n  - &f {name: a, backlog: 999999}\n  - *f\n",
		"duration: 1h\nprovider: {limits: {tpm: 1e300, rpm: .inf}}\nflows: [{name: x}]\n",
		"duration: 1h\nprovider: {unannounced: [otpm], limits: {otpm: 5}}\nflows: [{name: x}]\n",
		"duration: 1h\nseed: 0x7fffffffffffffff\nflows: [{name: x, weight: .nan}]\n",
		targetsBase,
		budgetBase,
		"duration: 1h\nprices: {m: {input: 1}}\nflows: [{name: x, budget: {day: 1e-9, month: 1e9}}]\n",
		"duration: 1h\ntargets: [{name: a, outages: [{start: 0s, duration: 1h, mode: down}]}]\nflows: [{name: x, targets: [a], max_wait: 1ns}]\n",
		"",
		"- a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if s != nil || err.Error() == "" {
				t.Fatalf("error %q with scenario %+v", err, s)
			}
			return
		}
		checkBounded(t, s)
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
	})
}
