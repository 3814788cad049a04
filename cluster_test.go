package sluice_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Two apps on one PostgreSQL database, each with a governor of its own on
// one key of 6 requests a minute, share the key through leases: the
// provider never refuses a call, though each alone would spend the whole
// minute.
func TestAppsOnOneDatabaseShareTheKey(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	const speed = 60
	clk := clock.New(speed)
	limits := governor.Limits{governor.RPM: 6}
	model, srv := simOn(t, clk, limits)
	var apps []*sluice.App
	for _, node := range []string{"node-a", "node-b"} {
		app := newApp(t, sluice.Config{
			DatabaseURL: url, ExecutorID: node, Cluster: &sluice.Cluster{},
			Now: clk.Now, Speed: speed,
			Providers: []sluice.Provider{{Name: "groq", Limits: limits, Lag: time.Minute,
				LLM: llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq}}},
		})
		registerAsk(t, app, run.Function{ID: "ask", Event: "ask"})
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		apps = append(apps, app)
	}
	var ids []string
	for i := range 12 {
		sent, err := apps[i%2].Send(context.Background(), "ask", fmt.Sprint("call-", i), ask{MaxTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sent[0].RunID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range ids {
		st, err := apps[0].Wait(ctx, id)
		if err != nil || st.Status != "completed" {
			t.Fatalf("run %s: %+v, %v", id, st, err)
		}
	}
	st := model.Stats()
	if st.Succeeded != 12 || st.Rejected != 0 {
		t.Fatalf("the provider answered %d and refused %d, want 12 and 0", st.Succeeded, st.Rejected)
	}
	// Each app's statistics show the cluster's use of the key, not its own.
	// (Read a few times: a lease may age out between the two reads.)
	var used []int64
	for range 5 {
		used = used[:0]
		for _, app := range apps {
			s, err := app.Stats("groq")
			if err != nil {
				t.Fatal(err)
			}
			used = append(used, s.Limits[governor.RPM].Used)
		}
		if used[0] == used[1] {
			break
		}
	}
	if used[0] != used[1] || used[0] == 0 {
		t.Errorf("the apps see %v of rpm used, want the same cluster-wide figure", used)
	}
}

func TestClusterLeaseTTLIsBounded(t *testing.T) {
	t.Parallel()
	_, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: "sqlite:" + t.TempDir() + "/c.db", Cluster: &sluice.Cluster{LeaseTTL: 2 * time.Hour}})
	if err == nil || !strings.Contains(err.Error(), "cluster lease TTL 2h0m0s: want from 1ms to 1h") {
		t.Fatalf("New with a lease TTL of 2h: %v", err)
	}
}

func TestClusterAdoptEveryIsBounded(t *testing.T) {
	t.Parallel()
	_, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: "sqlite:" + t.TempDir() + "/c.db", Cluster: &sluice.Cluster{AdoptEvery: 2 * time.Hour}})
	if err == nil || !strings.Contains(err.Error(), "cluster adoption period 2h0m0s: want at most 1h") {
		t.Fatalf("New with an adoption period of 2h: %v", err)
	}
}
