package benchcmd

import (
	"bytes"
	"context"

	"github.com/sluice-dev/sluice/internal/cli"
)

// runBench runs the command line "sluice bench NAME ARGS…" (args from
// "bench" on) as sluice does, and returns its exit code.
func runBench(ctx context.Context, env *cli.Env, args []string) int {
	if len(args) < 2 || args[0] != "bench" {
		panic("runBench: want bench NAME …")
	}
	c, ok := Commands(Config{})[args[1]]
	if !ok {
		panic("runBench: no bench " + args[1])
	}
	return cli.ExitCode(env, c.Run(ctx, env, args[2:]))
}

// runCLI runs "sluice args…" (a bench) with no environment and returns
// its exit code and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code = runBench(context.Background(), env, args)
	return code, out.String(), errOut.String()
}
