package main

import (
	"context"
	"fmt"
	"sort"
)

// benchCommand is one "sluice bench NAME" measurement. Each lives in its own
// file and registers itself from init with registerBench.
type benchCommand struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cmdEnv, args []string) error
}

var benches = map[string]*benchCommand{}

func registerBench(b *benchCommand) {
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
		names := make([]string, 0, len(benches))
		for n := range benches {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-8s %s\n", n, benches[n].summary)
		}
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
