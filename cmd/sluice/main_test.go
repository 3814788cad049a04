package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code = runMain(context.Background(), env, args)
	return code, out.String(), errOut.String()
}

func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI("help")
	if code != 0 {
		t.Fatalf("help exited %d", code)
	}
	for name, c := range commands {
		if !strings.Contains(out, "  "+name+" ") || !strings.Contains(out, c.Summary) {
			t.Errorf("help does not list %s with its summary:\n%s", name, out)
		}
	}
	code, out, _ = runCLI("bench")
	if code != 0 {
		t.Fatalf("bench exited %d", code)
	}
	for name, b := range benches {
		if !strings.Contains(out, "  "+name+" ") || !strings.Contains(out, b.Summary) {
			t.Errorf("bench does not list %s:\n%s", name, out)
		}
	}
	// Every command answers --help on stdout with exit 0.
	for name := range commands {
		if code, out, _ := runCLI(name, "--help"); code != 0 || !strings.Contains(out, "Usage: sluice "+name) {
			t.Errorf("%s --help: exit %d, output %q", name, code, out)
		}
	}
}

func TestUnknownCommandAndMeasurement(t *testing.T) {
	t.Parallel()
	if code, _, errOut := runCLI("frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLI("bench", "fifo"); code != 2 || !strings.Contains(errOut, `unknown measurement "fifo"`) {
		t.Errorf("unknown measurement: exit %d, stderr %q", code, errOut)
	}
}
