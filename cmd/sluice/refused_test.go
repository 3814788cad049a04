package main

import (
	"net"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestCommandsExplainARefusedConnection: each command that reaches a
// server, pointed at a port where none listens, says which address it
// tried and how to start a server there, not a bare "connection refused".
func TestCommandsExplainARefusedConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr
	for _, args := range [][]string{
		{"send", "doc/uploaded", "--url", url},
		{"status", "--url", url},
		{"runs", "versions", "--url", url},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			var out, errOut testenv.Buffer
			e := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
			if code := runMain(t.Context(), e, args); code != 1 {
				t.Fatalf("exit %d, want 1; stderr %s", code, errOut.String())
			}
			for _, want := range []string{"no sluice server answers at " + url, "sluice serve --addr " + addr} {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr %q: want %q", errOut.String(), want)
				}
			}
		})
	}
}
