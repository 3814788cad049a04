//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCommandsReadOnlyBoundedRegularFiles: every file a command reads at
// start — serve's, the gateway's and plan's --config, and the scenarios
// of plan, bench quota and sim-provider — is refused at once when it is a
// device, a pipe with no writer, a directory or larger than the bound,
// naming the file and what it is. Once, /dev/zero grew past 2 GB and a
// pipe held the command for ever, deaf to SIGTERM; here a pipe that still
// blocked would hang the test until its own timeout.
func TestCommandsReadOnlyBoundedRegularFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", 1<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"/dev/zero": "read /dev/zero: not a regular file: a character device",
		fifo:        "read " + fifo + ": not a regular file: a named pipe (FIFO)",
		dir:         "read " + dir + ": not a regular file: a directory",
		big:         "read " + big + ": too large: more than the bound of 1,048,576 bytes",
	}
	db := filepath.Join(dir, "s.db")
	for _, cmd := range [][]string{
		{"plan", "--config"},
		{"plan", "--scenario"},
		{"serve", "--addr", "127.0.0.1:0", "--db", db, "--config"},
		{"gateway", "--addr", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1/v1", "--config"},
		{"bench", "quota", "--scenario"},
		{"sim-provider", "--addr", "127.0.0.1:0", "--scenario"},
	} {
		for file, want := range files {
			args := append(append([]string{}, cmd...), file)
			code, _, errOut := runCLI(args...)
			if code != 1 || !strings.Contains(errOut, want) {
				t.Errorf("sluice %s: exit %d, stderr %q; want 1 and %q", strings.Join(args, " "), code, errOut, want)
			}
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("serve opened its database with a config it could not read")
	}
}
