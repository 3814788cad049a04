package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// openVersion opens an engine on url recording its runs under version,
// with functions fns, launched; the test shuts it down unless it did.
func openVersion(t *testing.T, url, version string, fns ...*Function) *Engine {
	t.Helper()
	return launch(context.Background(), t, url, Config{AppVersion: version, StopGrace: time.Hour}, fns...)
}

// Runs left unfinished by a process of version a — one paused after its
// first step, one queued behind it, one of a function the next process
// lacks — are shown by a process of version b as other_version with their
// version, never as running or queued, and counted by function. b resumes
// them: they complete there without calling the finished step again, and
// the run of the function b lacks is skipped with why; then cancelled.
func TestRunsOfAnotherVersion(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		var calls, afters, goneCalls atomic.Int32
		entered := make(chan struct{}, 2)
		release := make(chan struct{})
		var hold atomic.Bool
		hold.Store(true)
		// call blocks, the first time, until the engine stops: the step in
		// flight finishes during the stop, and no step begins after it.
		call := func(n *atomic.Int32) func(context.Context) (int, error) {
			return func(context.Context) (int, error) {
				v := n.Add(1)
				if hold.Load() {
					entered <- struct{}{}
					<-release
				}
				return int(v), nil
			}
		}
		pause := func() *Function {
			return &Function{Function: run.Function{ID: "pause", Event: "go", Concurrency: []run.Concurrency{{Limit: 1}}},
				Handler: func(r *Run, ev Event) (any, error) {
					if _, err := Step(r, "call", call(&calls)); err != nil {
						return nil, err
					}
					return Step(r, "after", func(context.Context) (int, error) { return int(afters.Add(1)), nil })
				}}
		}
		gone := &Function{Function: run.Function{ID: "gone", Event: "went"}, Handler: func(r *Run, ev Event) (any, error) {
			if _, err := Step(r, "call", call(&goneCalls)); err != nil {
				return nil, err
			}
			return Step(r, "after", func(context.Context) (int, error) { return 0, nil })
		}}

		a := openVersion(t, url, "a", pause(), gone)
		first := send(t, a, "go", "1", nil)
		<-entered
		second := send(t, a, "go", "2", nil) // queued behind the first: concurrency 1
		lost := send(t, a, "went", "1", nil)
		<-entered
		stopped := make(chan error, 1)
		go func() { stopped <- a.Shutdown(2 * time.Hour) }()
		<-a.Draining()
		hold.Store(false)
		close(release)
		if err := <-stopped; err != nil {
			t.Fatalf("shutdown of a: %v", err)
		}

		b := openVersion(t, url, "b", pause()) // the same executor ID, now free
		if v := b.AppVersion(); v != "b" {
			t.Fatalf("AppVersion %q, want b", v)
		}
		all, err := b.Runs(ctx, RunFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 {
			t.Fatalf("runs %+v, want the 2 of pause", all)
		}
		for _, s := range all {
			if s.Status != run.OtherVersion || s.Version != "a" {
				t.Errorf("run %s: %s of version %q, want other_version of a", s.ID, s.Status, s.Version)
			}
		}
		for _, st := range []run.State{run.Running, run.Queued} {
			if got, err := b.Runs(ctx, RunFilter{Status: st}); err != nil || len(got) != 0 {
				t.Errorf("runs %s: %+v, %v; want none: they are a's", st, got, err)
			}
		}
		others, err := b.Runs(ctx, RunFilter{Status: run.OtherVersion, Function: "pause"})
		if err != nil || len(others) != 2 || others[0].ID != second.RunID || others[1].ID != first.RunID {
			t.Fatalf("runs other_version: %+v, %v; want the second then the first", others, err)
		}
		if d := detail(t, b, first.RunID); d.Status != run.OtherVersion || d.Version != "a" || len(d.Steps) != 1 {
			t.Fatalf("first run: %s of %q with steps %+v, want other_version of a after its call", d.Status, d.Version, d.Steps)
		}
		vs, err := b.OtherVersions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 1 || vs[0].Version != "a" || vs[0].Total != 3 || vs[0].Runs["pause"] != 2 || vs[0].Runs["gone"] != 1 ||
			!slices.Equal(vs[0].Unknown, []string{"gone"}) {
			t.Fatalf("other versions %+v, want a: pause 2, gone 1 (unknown)", vs)
		}

		if _, err := b.ResumeVersion(ctx, "b"); !errors.Is(err, ErrSameVersion) {
			t.Errorf("resume of b's own version: %v, want ErrSameVersion", err)
		}
		if _, err := b.ResumeVersion(ctx, "-a"); err == nil || !strings.Contains(err.Error(), "version") {
			t.Errorf("resume of a bad name: %v, want an error naming the version", err)
		}
		rep, err := b.ResumeVersion(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(rep.Done)
		if !slices.Equal(rep.Done, []string{first.RunID, second.RunID}) || len(rep.Skipped) != 1 || rep.Skipped[0].ID != lost.RunID ||
			!strings.Contains(rep.Skipped[0].Reason, `"gone" is not a function of this process`) {
			t.Fatalf("resume of a: %+v, want both runs of pause done and gone's skipped with why", rep)
		}
		for _, id := range []string{first.RunID, second.RunID} {
			if got := wait(t, b, id); got.Status != run.Completed || got.Version != "b" {
				t.Fatalf("run %s after the resume: %s of %q (%s), want completed on b", id, got.Status, got.Version, got.Error)
			}
		}
		if calls.Load() != 2 || afters.Load() != 2 {
			t.Fatalf("call ran %d times for 2 runs (want 2: the finished one is not called again), after %d (want 2)", calls.Load(), afters.Load())
		}
		if d := detail(t, b, first.RunID); len(d.Steps) != 2 || d.Steps[0].Attempts != 1 {
			t.Fatalf("first run's steps %+v, want call (1 attempt) then after", d.Steps)
		}

		rep, err = b.CancelVersion(ctx, "a")
		if err != nil || !slices.Equal(rep.Done, []string{lost.RunID}) || len(rep.Skipped) != 0 {
			t.Fatalf("cancel of a: %+v, %v; want gone's run cancelled", rep, err)
		}
		if vs, err := b.OtherVersions(ctx); err != nil || len(vs) != 0 {
			t.Fatalf("other versions after the cancel: %+v, %v; want none", vs, err)
		}
		if got, err := b.Runs(ctx, RunFilter{Status: run.OtherVersion}); err != nil || len(got) != 0 {
			t.Errorf("runs other_version after it all: %+v, %v", got, err)
		}
		if goneCalls.Load() != 1 {
			t.Errorf("gone's call ran %d times, want 1", goneCalls.Load())
		}
	})
}
