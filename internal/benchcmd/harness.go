// Package benchcmd holds the measurements of "sluice bench": each is a
// command that cmd/sluice dispatches to by name (sluice bench crash …),
// with its flags, its report and its checks. What the benches share is
// written once here: bounded flags, temporary folders, the provider
// simulator (internal/sim) started and stopped, the report printed as JSON
// or as text, and in db.go the bench's own reads and writes of a database.
//
// The crash and backfill benches run their workers, and the multinode
// bench its nodes, as the binary that runs the bench (os.Executable):
// sluice itself, which reaches a worker through "sluice bench crash" (or
// backfill) with the worker's variable set. Under go test that binary is
// the test binary, whose TestMain dispatches a worker the same way.
package benchcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
)

// Config is what the benches take from the binary that runs them.
type Config struct {
	// BuildStamp marks this build of the binary (sluice's
	// main.buildStamp): a crash worker prints it, for the bench to check
	// which build runs.
	BuildStamp string
}

// Commands returns the benches by name, for "sluice bench NAME".
func Commands(cfg Config) map[string]*cli.Command {
	cs := map[string]*cli.Command{}
	for _, newCommand := range []func(Config) *cli.Command{newBackfillCommand, newCrashCommand, newDashboardCommand,
		newEngineCommand, newGatewayCommand, newMultinodeCommand, newQuotaCommand, newSoakCommand} {
		c := newCommand(cfg)
		cs[c.Name] = c
	}
	return cs
}

// benchPoll is the queue polling of every side a bench compares.
const benchPoll = 20 * time.Millisecond

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// between refuses v outside [lo, hi], naming the flag: "--events must be
// between 0 and 1000000", "--first-byte must be between 1ms and 1h".
func between[T int | time.Duration](name string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s must be between %s and %s", name, bound(lo), bound(hi))
	}
	return nil
}

// bound writes a flag's bound: a number as it is, a duration without its
// zero units (1h, 10m, 1ms, 0).
func bound[T int | time.Duration](v T) string {
	d, ok := any(v).(time.Duration)
	if !ok {
		return fmt.Sprint(v)
	}
	if d == 0 {
		return "0"
	}
	s := d.String() // 1h0m0s, 10m0s, 1ms
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// refuseIf returns the error format and args write when refused; nil
// otherwise. With between, a bench's bounds read as one list, checked in
// order (cmp.Or returns the first refusal).
func refuseIf(refused bool, format string, args ...any) error {
	if refused {
		return fmt.Errorf(format, args...)
	}
	return nil
}

// wrapIf returns err, if any, after what names the flag it is about.
func wrapIf(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// tempDir makes a new temporary folder; remove deletes it and all it holds.
func tempDir(prefix string) (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// startSim serves a new provider model of mc on loopback. The caller stops
// the server; the model keeps its figures (Stats) after.
func startSim(ctx context.Context, mc forecast.ModelConfig, sc sim.ServerConfig) (*forecast.Model, *sim.Server, error) {
	m, err := forecast.NewModel(mc)
	if err != nil {
		return nil, nil, err
	}
	s := sim.NewServer(m, sc)
	if err := s.Start(ctx); err != nil {
		return nil, nil, err
	}
	return m, s, nil
}

// simURL is the base URL of the simulator's OpenAI-compatible API.
func simURL(s *sim.Server) string { return "http://" + s.Addr() + "/v1" }

// printReport prints a bench's report on w: with asJSON as JSON, one line,
// or indented by indent when it is not empty; otherwise as text writes it.
func printReport(w io.Writer, asJSON bool, indent string, rep any, text func(io.Writer)) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", indent)
		return enc.Encode(rep)
	}
	text(w)
	return nil
}

// startCPUProfile starts a CPU profile written to path, if path is set;
// stop ends it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// percentile returns the q-quantile of ds in microseconds (nearest rank).
func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / float64(time.Microsecond)
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// median returns the middle of xs, the mean of the two middle ones when
// their number is even; 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }
