package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestJSONLogDurationsHaveUnits: serve's JSON logs write a duration as Go
// writes it, with its unit, whichever part of sluice logs it.
func TestJSONLogDurationsHaveUnits(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		lg, err := (&logFlags{level: "info", format: format}).logger(&buf, func(string, error) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		lg.Info("waited", "retry_after", 2*time.Minute+100*time.Millisecond)
		want := `"retry_after":"2m0.1s"`
		if format == "text" {
			want = "retry_after=2m0.1s"
		}
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%s log %q: want %s", format, buf.String(), want)
		}
	}
}
