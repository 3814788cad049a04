package forecast

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// benchScenario loads one of the quota bench's scenarios.
func benchScenario(t *testing.T, name string) *Scenario {
	t.Helper()
	sc, err := Load("../bench/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// replaySluice replays sc under sluice's governor.
func replaySluice(ctx context.Context, t *testing.T, sc *Scenario, opts Options) (Result, error) {
	t.Helper()
	pol, err := NewSluice(sc)
	if err != nil {
		t.Fatal(err)
	}
	return Replay(ctx, sc, Sluice, pol, opts)
}

// TestReplayUnannounced: a limit the scenario marks unannounced is enforced
// by the provider model and measured in the result, and left out of what
// the policy is told: the world's view of the scenario and the governor's
// configuration.
func TestReplayUnannounced(t *testing.T) {
	t.Parallel()
	sc := benchScenario(t, "devpick-otpm-unannounced.yaml")
	if !sc.Provider.Unannounced[governor.OTPM] || sc.Provider.Limits[governor.OTPM] != 1000 {
		t.Fatalf("scenario provider %+v, want otpm 1000 unannounced", sc.Provider)
	}
	pol, err := NewSluice(sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.(*sluicePolicy).g.Limits()[governor.OTPM]; got != 0 {
		t.Errorf("the governor is told otpm %d, want 0", got)
	}
	w, err := newWorld(sc, pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Scenario().Provider.Limits[governor.OTPM] != 0 || w.limits[governor.OTPM] != 1000 || w.prov.Config().Limits[governor.OTPM] != 1000 {
		t.Errorf("policies see otpm %d, the provider enforces %d and the result measures %d, want 0, 1000, 1000",
			w.Scenario().Provider.Limits[governor.OTPM], w.prov.Config().Limits[governor.OTPM], w.limits[governor.OTPM])
	}
	sc.Duration = 6 * time.Hour
	res, err := replaySluice(context.Background(), t, sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if lr, ok := res.Limits["otpm"]; !ok || lr.Used == 0 {
		t.Errorf("the result measures otpm as %+v (present %v), want its use", lr, ok)
	}
}

// TestReplayDeterministic: two replays of one scenario and seed, faults
// included, give the same result but for the wall time, and a trace does
// not change it.
func TestReplayDeterministic(t *testing.T) {
	t.Parallel()
	sc := benchScenario(t, "groq-faults.yaml")
	sc.Duration = 12 * time.Hour
	var lines, faults int
	a, err := replaySluice(context.Background(), t, sc, Options{Trace: func(r TraceRecord) {
		lines++
		if r.Fault != "" {
			faults++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := replaySluice(context.Background(), t, sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if faults == 0 || a.Flows["backfill"].Done == 0 {
		t.Fatalf("%d trace lines, %d faults, %d items of the backfill done: the test needs a replay that does work and meets faults",
			lines, faults, a.Flows["backfill"].Done)
	}
	a.WallSeconds, b.WallSeconds = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two replays of the same scenario and seed differ:\n%+v\n%+v", a, b)
	}
}

// TestReplayCancelled: a replay whose context has ended stops with an error
// that wraps the context's and says where it stopped.
func TestReplayCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := replaySluice(ctx, t, benchScenario(t, "devpick.yaml"), Options{})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "policy sluice stopped at 0s of 168h0m0s simulated") {
		t.Fatalf("error = %v, want context.Canceled naming the policy and where it stopped", err)
	}
}

// TestReplayFlowWithin: a flow's Within sizes its batches as a backfill's
// does. DevPick's titles at the default (15 minutes at their share) go
// several to a call; bounded to a minute of the day's even pace, where
// one title already takes longer, each call carries one.
func TestReplayFlowWithin(t *testing.T) {
	t.Parallel()
	perCall := func(within time.Duration) float64 {
		sc := benchScenario(t, "devpick.yaml")
		sc.Duration = 24 * time.Hour
		for i := range sc.Flows {
			sc.Flows[i].Within = within
		}
		res, err := replaySluice(context.Background(), t, sc, Options{})
		if err != nil {
			t.Fatal(err)
		}
		title := res.Flows["title"]
		if title.Done == 0 || title.Requests == 0 {
			t.Fatalf("within %v: titles %+v: want some done", within, title)
		}
		return float64(title.Done) / float64(title.Requests)
	}
	if n := perCall(time.Minute); n != 1 {
		t.Errorf("within a minute: %.2f titles a call, want 1", n)
	}
	if n := perCall(0); n < 2 {
		t.Errorf("within the default: %.2f titles a call, want several", n)
	}
}
