// Command sluice runs LLM pipelines and long backfills durably under a
// provider's rate limits. Run "sluice help" for the list of commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
)

var commands = map[string]*cli.Command{}

// register adds a command. Each lives in its own file and registers itself
// from init, so a command that is not built yet simply does not exist.
func register(c *cli.Command) {
	if _, dup := commands[c.Name]; dup {
		panic("sluice: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal stops the command gracefully; a second one, with
	// the signals' default handling back, ends the process at once.
	context.AfterFunc(ctx, stop)
	env := &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	os.Exit(runMain(ctx, env, os.Args[1:]))
}

// runMain dispatches to a command and returns the process exit code:
// 0 on success, 2 on a usage error, 1 on any other failure.
func runMain(ctx context.Context, env *cli.Env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return cli.ExitCode(env, c.Run(ctx, env, []string{"--help"}))
			}
		}
		usage(env.Stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "sluice: unknown command %q\n\n", args[0])
		usage(env.Stderr)
		return 2
	}
	return cli.ExitCode(env, c.Run(ctx, env, args[1:]))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "sluice runs LLM pipelines and long backfills durably under a provider's rate limits.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: sluice COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	cli.List(w, commands)
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "sluice COMMAND --help" for a command's flags.`)
}

// serveUntilDone serves srv on ln until ctx ends, then stops it: first
// also, if set (an app's own graceful stop), while srv still serves — its
// handler answers that the process stops, so that /readyz says so to a
// load balancer instead of the port closing — then srv: requests in flight
// get what remains of grace (at least a second) to finish, after which
// their connections are closed.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration, also func()) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	began := time.Now()
	if also != nil {
		also()
	}
	sctx, cancel := context.WithTimeout(context.Background(), max(grace-time.Since(began), time.Second))
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// The grace is over: what still runs is cut, as a kill would.
		_ = srv.Close()
	}
	return nil
}
