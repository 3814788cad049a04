package benchcmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
)

// TestBenchQuotaInterrupted: an interrupt (the context main cancels on
// SIGINT or SIGTERM) ends the bench with a message that says so.
func TestBenchQuotaInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := runBench(ctx, env, []string{"bench", "quota", "--scenario", "../bench/testdata/devpick.yaml", "--json"})
	if code != 1 || !strings.Contains(stderr.String(), "sluice: bench quota interrupted, no report: policy sluice stopped at 0s of 168h0m0s simulated: context canceled") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("a report was printed: %s", stdout.String())
	}
}

// TestBenchQuotaBounds: a scenario beyond a bound is refused before any run,
// naming the file, the key, its line and the bound.
func TestBenchQuotaBounds(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "huge.yaml")
	err := os.WriteFile(path, []byte("duration: 168h\nflows:\n  - name: a\n    arrivals_per_day: 1e12\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := runBench(context.Background(), env, []string{"bench", "quota", "--scenario", path})
	want := path + `: flows[0].arrivals_per_day: 1e+12 is more than the bound of 1,000,000 (line 4)`
	if code != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stderr %q, want %q", code, stderr.String(), want)
	}
}

// TestBenchQuotaVsGreedy: the table has a "vs greedy" column when the greedy
// reference ran, and none otherwise.
func TestBenchQuotaVsGreedy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policies string
		want     bool
	}{{"sluice,greedy", true}, {"sluice", false}} {
		var stdout, stderr bytes.Buffer
		env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
		code := runBench(context.Background(), env, []string{"bench", "quota", "--scenario", "../bench/testdata/openai-fixed.yaml", "--policy", tc.policies})
		if code != 0 {
			t.Fatalf("--policy %s: exit %d, stderr %q", tc.policies, code, stderr.String())
		}
		if got := strings.Contains(stdout.String(), "vs greedy"); got != tc.want {
			t.Errorf("--policy %s: column vs greedy shown %v, want %v:\n%s", tc.policies, got, tc.want, stdout.String())
		}
		if tc.want && !regexp.MustCompile(`(?m)^\s*greedy\s+\S+\s+[0-9.]+\s+1\.0000\s`).MatchString(stdout.String()) {
			t.Errorf("greedy's row does not show 1.0000 vs itself:\n%s", stdout.String())
		}
	}
}

// TestBenchQuotaTargets: on a scenario with targets, "all" runs the
// policies that route, the text report has each policy's money, each
// target's part and each outage's times, and the JSON the same fields.
func TestBenchQuotaTargets(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := runBench(context.Background(), env, []string{"bench", "quota", "--scenario", "../bench/testdata/primary-outage.yaml"})
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"work_per_dollar", "double_runs", "max_day_spend", "outage_failures", "fallback_after_s", "back_after_s",
		"sluice-one-key", "fixed-fallback", "litellm-shuffle", "litellm-usage"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q:\n%s", want, out)
		}
	}
	stdout.Reset()
	code = runBench(context.Background(), env, []string{"bench", "quota", "--scenario", "../bench/testdata/primary-outage.yaml", "--policy", "sluice", "--json"})
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	for _, want := range []string{`"targets":`, `"spend":`, `"work_per_dollar":`, `"double_runs": 0`, `"lost": 0`, `"fallback_after_seconds":`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the JSON has no %s", want)
		}
	}
	stderr.Reset()
	code = runBench(context.Background(), env, []string{"bench", "quota", "--scenario", "../bench/testdata/primary-outage.yaml", "--policy", "cookbook"})
	if code != 1 || !strings.Contains(stderr.String(), "policy cookbook models one provider key, and the scenario lists targets") {
		t.Errorf("cookbook on targets: exit %d, stderr %q", code, stderr.String())
	}
}
