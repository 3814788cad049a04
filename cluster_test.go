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

// Two apps on one PostgreSQL database run one backfill: each samples the
// job's progress for the history, and the samples count each item once
// between them, not once per app.
func TestAppsOnOneDatabaseCountABackfillsProgressOnce(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	limits := governor.Limits{governor.RPM: 600}
	_, pc := simProvider(t, limits)
	db := &articles{all: map[string]string{}, saved: map[string]map[string]string{"notes": {}}}
	const items = 40
	for i := range items {
		db.all[fmt.Sprintf("a-%03d", i)] = "an article about rivers"
	}
	for _, node := range []string{"node-a", "node-b"} {
		app := newApp(t, sluice.Config{
			DatabaseURL: url, ExecutorID: node, Cluster: &sluice.Cluster{},
			PollInterval: 20 * time.Millisecond, HealthEvery: 50 * time.Millisecond, HistoryEvery: 100 * time.Millisecond,
			Providers: []sluice.Provider{{Name: "groq", LLM: pc, Limits: limits}},
		})
		err := sluice.RegisterBackfill(app, sluice.Backfill[article]{
			Backfill: run.Backfill{ID: "notes", MaxBatch: 1, Poll: 50 * time.Millisecond, BatchesPerRun: 4, InFlight: 1},
			Pending:  db.pending("notes"),
			Load:     db.load,
			Request: func(its []sluice.Item[article]) (*llm.ChatRequest, error) {
				return &llm.ChatRequest{Model: "llama-3.1-8b-instant", MaxTokens: 10, Messages: []llm.Message{{Role: "user", Content: its[0].Data.Text}}}, nil
			},
			Parse: func(_ *llm.ChatResponse, its []sluice.Item[article]) ([]string, error) {
				return []string{"a note"}, nil
			},
			Save: func(_ context.Context, _ sluice.Tx, it sluice.Item[article], out string) error {
				db.mu.Lock()
				defer db.mu.Unlock()
				db.saved["notes"][it.Key] = out
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	st := testenv.OpenStore(t, url)
	deadline := time.Now().Add(time.Minute)
	for {
		db.mu.Lock()
		n := len(db.saved["notes"])
		db.mu.Unlock()
		if n == items {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d items saved after a minute", n, items)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // every app samples the end
	samples, err := st.Samples(context.Background(), time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "notes")
	if err != nil {
		t.Fatal(err)
	}
	var done int64
	for _, s := range samples {
		done += s.Done
	}
	// What was done before an app's first sample is not counted (the
	// first only takes the count to start from): at 10 calls a second,
	// a few items at most.
	if done > items || done < items-10 {
		t.Fatalf("the samples of both apps count %d items done of %d, want each item once (%d samples)", done, items, len(samples))
	}
	t.Logf("%d samples count %d items done of %d", len(samples), done, items)
}
