package main

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/internal/benchcmd"
	"github.com/sluice-dev/sluice/internal/cli"
)

// benches are the "sluice bench NAME" measurements (internal/benchcmd).
var benches = benchcmd.Commands(benchcmd.Config{BuildStamp: buildStamp})

func init() {
	register(&cli.Command{
		Name:    "bench",
		Summary: "measure sluice side by side with the alternatives (run \"sluice bench\" for the list)",
		Run:     runBench,
	})
}

// runBench lists the measurements, or runs the one named. A crash or
// backfill worker, which the bench starts as this binary with its variable
// set, is reached here too: "sluice bench crash" runs the worker then.
func runBench(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		w := env.Stdout
		fmt.Fprintln(w, "Usage: sluice bench NAME [flags]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Measurements:")
		cli.List(w, benches)
		fmt.Fprintln(w)
		fmt.Fprintln(w, `Run "sluice bench NAME --help" for its flags.`)
		return nil
	}
	b, ok := benches[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "sluice bench: unknown measurement %q\n", args[0])
		return cli.ErrUsage
	}
	return b.Run(ctx, env, args[1:])
}
