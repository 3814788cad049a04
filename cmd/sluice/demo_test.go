package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
)

func TestDemoRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--for", "-1s"},
		{"--speed", "0"},
		{"--speed", "5000"},
		{"--addr", ""},
		{"--articles", "-3"},
		{"--upstream", "http://127.0.0.1:1/v1", "--speed", "10"},
		{"--limits", "rpm=-1"},
	} {
		var errOut testenv.Buffer
		env := &cli.Env{Stdout: &testenv.Buffer{}, Stderr: &errOut, Getenv: func(string) string { return "" }}
		if code := runMain(context.Background(), env, append([]string{"demo"}, args...)); code != 2 {
			t.Errorf("demo %v exited %d, want 2 (usage): %s", args, code, errOut.String())
		}
	}
	// A real provider without a key is refused before anything starts.
	var errOut testenv.Buffer
	env := &cli.Env{Stdout: &testenv.Buffer{}, Stderr: &errOut, Getenv: func(string) string { return "" }}
	if code := runMain(context.Background(), env, []string{"demo", "--upstream", "http://127.0.0.1:1/v1"}); code != 1 || !strings.Contains(errOut.String(), "GROQ_API_KEY") {
		t.Errorf("--upstream without a key: exit %d, %s", code, errOut.String())
	}
}
