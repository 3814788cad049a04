// Package cli is the plumbing of sluice's commands: what a command may touch
// of the outside world, its flags' usage text and errors, its exit code, and
// the few ways the terminal views draw figures. cmd/sluice wires the
// commands; the packages that hold the larger ones (internal/benchcmd,
// internal/demo) take the same Env and write the same usage.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Env is what a command may touch of the outside world, so tests can run
// commands in-process. Output goes to Stdout; diagnostics to Stderr.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string // one line for the list of commands
	// Run parses args with its own flag set and does the work.
	Run func(ctx context.Context, env *Env, args []string) error
}

// ErrUsage marks an error whose message the flag package, or the command,
// already printed: the exit code is 2 and nothing more is said.
var ErrUsage = errors.New("usage error")

// ExitCode returns the process exit code for a command's error: 0 on
// success or help, 2 on a usage error, 1 on any other failure, whose
// message it prints to env.Stderr.
func ExitCode(env *Env, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	default:
		fmt.Fprintf(env.Stderr, "sluice: %v\n", err)
		return 1
	}
}

// List prints each command's name and summary, in name order.
func List(w io.Writer, cs map[string]*Command) {
	names := make([]string, 0, len(cs))
	width := 0
	for n := range cs {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, cs[n].Summary)
	}
}

// NewFlagSet returns a flag set whose usage text starts with the command's
// one-line summary and whose errors come back to the caller instead of
// exiting.
func NewFlagSet(env *Env, name, synopsis, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice %s %s\n\n%s\n\nFlags:\n", name, synopsis, summary)
		fs.PrintDefaults()
	}
	return fs
}

// ParseFlags parses args and maps flag errors to ErrUsage (already printed)
// and -h to flag.ErrHelp. Help goes to stdout so it can be piped.
func ParseFlags(fs *flag.FlagSet, env *Env, args []string) error {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(env.Stdout)
			fs.Usage()
			return flag.ErrHelp
		}
		if a == "--" {
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		return ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "sluice %s: unexpected argument %q\n", strings.TrimPrefix(fs.Name(), "sluice "), fs.Arg(0))
		return ErrUsage
	}
	return nil
}

// Given returns the names of the flags set on the command line.
func Given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// IsPostgresURL reports whether a --db value names a PostgreSQL database
// (postgres:// or postgresql://) rather than an SQLite file.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// WriteFile creates the file at path and fills it.
func WriteFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// IsTerminal reports whether w is a character device, such as a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
