package forecast

import (
	"reflect"
	"testing"
	"time"
)

// TestFormatRoundTrip: every scenario of the repository, formatted and read
// back, is the same scenario.
func TestFormatRoundTrip(t *testing.T) {
	for _, path := range []string{"../bench/testdata/devpick.yaml", "../bench/testdata/anthropic-settle.yaml", "../bench/testdata/groq-faults.yaml", "../bench/testdata/devpick-otpm-unannounced.yaml", "../plan/testdata/devpick-10-18.yaml",
		"../bench/testdata/groq-two-models-paid.yaml", "../bench/testdata/primary-outage.yaml", "../bench/testdata/flow-budget.yaml"} {
		sc, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		data, err := Format(sc)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v\n%s", path, err, data)
		}
		if !reflect.DeepEqual(back, sc) {
			t.Errorf("%s: read back %+v, want %+v", path, back, sc)
		}
	}
	// A flow's own batch time (none of the files sets one).
	sc, err := Load("../bench/testdata/devpick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Flows[1].Within = 90 * time.Second
	data, err := Format(sc)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := Parse(data); err != nil || !reflect.DeepEqual(back, sc) {
		t.Errorf("a flow's within: read back %+v (%v), want %+v\n%s", back, err, sc, data)
	}
}
