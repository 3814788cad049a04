// Command sluice runs LLM pipelines and long backfills durably under a
// provider's rate limits. Run "sluice help" for the list of commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// command is one subcommand. Each lives in its own file and registers itself
// from init, so a command that is not built yet simply does not exist.
type command struct {
	name    string
	summary string // one line for "sluice help"
	// run parses args with its own flag set and does the work. Output goes to
	// env.stdout; diagnostics to env.stderr.
	run func(ctx context.Context, env *cmdEnv, args []string) error
}

// cmdEnv is what a command may touch of the outside world, so tests can run
// commands in-process.
type cmdEnv struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("sluice: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal stops the command gracefully; a second one, with
	// the signals' default handling back, ends the process at once.
	context.AfterFunc(ctx, stop)
	env := &cmdEnv{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(runMain(ctx, env, os.Args[1:]))
}

// runMain dispatches to a command and returns the process exit code:
// 0 on success, 2 on a usage error, 1 on any other failure.
func runMain(ctx context.Context, env *cmdEnv, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return exitCode(env, c.run(ctx, env, []string{"--help"}))
			}
		}
		usage(env.stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "sluice: unknown command %q\n\n", args[0])
		usage(env.stderr)
		return 2
	}
	return exitCode(env, c.run(ctx, env, args[1:]))
}

func exitCode(env *cmdEnv, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(env.stderr, "sluice: %v\n", err)
		return 1
	}
}

// errUsage marks an error whose message the flag package already printed.
var errUsage = errors.New("usage error")

func usage(w io.Writer) {
	fmt.Fprintln(w, "sluice runs LLM pipelines and long backfills durably under a provider's rate limits.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: sluice COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	listCommands(w, commands)
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "sluice COMMAND --help" for a command's flags.`)
}

// listCommands prints each command's name and summary, in name order.
func listCommands(w io.Writer, cs map[string]*command) {
	names := make([]string, 0, len(cs))
	width := 0
	for n := range cs {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, cs[n].summary)
	}
}

// newFlagSet returns a flag set whose usage text starts with the command's
// one-line summary and whose errors come back to runMain instead of exiting.
func newFlagSet(env *cmdEnv, name, synopsis, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice %s %s\n\n%s\n\nFlags:\n", name, synopsis, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and maps flag errors to errUsage (already printed)
// and -h to flag.ErrHelp. Help goes to stdout so it can be piped.
func parseFlags(fs *flag.FlagSet, env *cmdEnv, args []string) error {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(env.stdout)
			fs.Usage()
			return flag.ErrHelp
		}
		if a == "--" {
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "sluice %s: unexpected argument %q\n", strings.TrimPrefix(fs.Name(), "sluice "), fs.Arg(0))
		return errUsage
	}
	return nil
}

// serveUntilDone serves srv on ln until ctx ends, then stops it: requests
// in flight get up to grace to finish, after which their connections are
// closed. also, if set, runs at the same time (an app's own graceful stop);
// serveUntilDone returns once both are done.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration, also func()) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	var wg sync.WaitGroup
	if also != nil {
		wg.Go(also)
	}
	defer wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), max(grace, time.Millisecond))
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// The grace is over: what still runs is cut, as a kill would.
		_ = srv.Close()
	}
	return nil
}
