package main

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
)

// FuzzParseFlow: --flow accepts only flows the governor and gateway can
// take — a name, a finite positive weight, a bounded priority, a bounded
// max_tokens — and refuses the rest with an error naming the flag's value.
func FuzzParseFlow(f *testing.F) {
	for _, s := range []string{"analysis=1:1", "a=1", "a=0", "a=-1", "a=NaN", "a=Inf", "a=1e309", "a=1:1000", "a=1:-4", "a=1:0:0",
		"a=1:0:9223372036854775807", "=1", "a", "a=1:2:3:4", " a =2", "a=1::5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		fl, err := parseFlow(v)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "flow ") && err.Error() != "a flow has no name" {
				t.Fatalf("error %q does not say which flow", err)
			}
			return
		}
		if fl.Name == "" || strings.Contains(fl.Name, "=") {
			t.Fatalf("flow %q from %q", fl.Name, v)
		}
		if !(fl.Weight >= governor.MinWeight && fl.Weight <= governor.MaxWeight) {
			t.Fatalf("weight %v accepted from %q", fl.Weight, v)
		}
		if fl.Priority < governor.MinPriority || fl.Priority > governor.MaxPriority {
			t.Fatalf("priority %d accepted from %q", fl.Priority, v)
		}
		if fl.DefaultMaxTokens < 0 || fl.DefaultMaxTokens > llm.MaxOutputTokens {
			t.Fatalf("max_tokens %d accepted from %q", fl.DefaultMaxTokens, v)
		}
	})
}

// FuzzParseClientKeys: every key read from KEY[=FLOW],… is trimmed and
// holds no separator; nothing is lost between the commas.
func FuzzParseClientKeys(f *testing.F) {
	for _, s := range []string{"k1=title,k2", "", ",,", " k = f ", "k=a=b", "k,k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys := parseClientKeys(s)
		nonEmpty := 0
		for _, part := range strings.Split(s, ",") {
			if strings.TrimSpace(part) != "" {
				nonEmpty++
			}
		}
		if len(keys) != nonEmpty {
			t.Fatalf("%d keys from %q, which has %d", len(keys), s, nonEmpty)
		}
		for _, k := range keys {
			if strings.Contains(k.Key, ",") || strings.Contains(k.Key, "=") || k.Key != strings.TrimSpace(k.Key) {
				t.Fatalf("key %q from %q", k.Key, s)
			}
		}
	})
}
