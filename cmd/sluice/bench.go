package main

import (
	"context"
	"fmt"
)

// benches are the "sluice bench NAME" measurements. Each lives in its own
// file and registers itself from init with registerBench.
var benches = map[string]*command{}

func registerBench(b *command) {
	if _, dup := benches[b.name]; dup {
		panic("sluice: bench registered twice: " + b.name)
	}
	benches[b.name] = b
}

func init() {
	register(&command{
		name:    "bench",
		summary: "measure sluice side by side with the alternatives (run \"sluice bench\" for the list)",
		run:     runBench,
	})
}

func runBench(ctx context.Context, env *cmdEnv, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		w := env.stdout
		fmt.Fprintln(w, "Usage: sluice bench NAME [flags]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Measurements:")
		listCommands(w, benches)
		fmt.Fprintln(w)
		fmt.Fprintln(w, `Run "sluice bench NAME --help" for its flags.`)
		return nil
	}
	b, ok := benches[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "sluice bench: unknown measurement %q\n", args[0])
		return errUsage
	}
	return b.run(ctx, env, args[1:])
}
