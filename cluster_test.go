package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Two apps on one database, each with a governor of its own on one key of
// 6 requests a minute, share the key through leases: the provider never
// refuses a call, though each alone would spend the whole minute. The
// apps and the provider share the bubble's clock (see inBubble): the
// minutes the twelve calls take pass only while every party waits, so no
// delay of the machine's can make the provider count a call later than
// the governors did.
func TestAppsOnOneDatabaseShareTheKey(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + t.TempDir() + "/cluster.db"
	inBubble(t, func(t *testing.T) {
		limits := governor.Limits{governor.RPM: 6}
		const calls = 12
		answered := make(chan sim.Call, calls)
		model, pc := simInBubble(t, limits, sim.ServerConfig{OnFinish: func(c sim.Call) { answered <- c }})
		var apps []*sluice.App
		for _, node := range []string{"node-a", "node-b"} {
			app := newApp(t, sluice.Config{
				DatabaseURL: url, ExecutorID: node, Cluster: &sluice.Cluster{},
				PollInterval: time.Second, // each read of the queue takes real time while the clock waits
				Providers:    []sluice.Provider{{Name: "groq", Limits: limits, LLM: pc}},
			})
			registerAsk(t, app, run.Function{ID: "ask", Event: "ask"})
			if err := app.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			apps = append(apps, app)
		}
		began := time.Now()
		var ids []string
		for i := range calls {
			sent, err := apps[i%2].Send(context.Background(), "ask", fmt.Sprint("call-", i), ask{MaxTokens: 10})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sent[0].RunID)
		}
		// Wait for the calls at the provider first: App.Wait reads the
		// run's row every 20 ms of the clock, which over the minutes the
		// governors wait is thousands of reads.
		for range calls {
			<-answered
		}
		if took := time.Since(began); took < time.Minute {
			t.Fatalf("%d calls at 6 a minute took %v of the clock, want more than a minute", calls, took)
		}
		for _, id := range ids {
			st, err := apps[0].Wait(context.Background(), id)
			if err != nil || st.Status != "completed" {
				t.Fatalf("run %s: %+v, %v", id, st, err)
			}
		}
		st := model.Stats()
		if st.Succeeded != calls || st.Rejected != 0 {
			t.Fatalf("the provider answered %d and refused %d, want %d and 0", st.Succeeded, st.Rejected, calls)
		}
		// Each app's statistics show the cluster's use of the key, not
		// its own. The clock stands still while this goroutine reads, so
		// no lease ages out between the two reads.
		var used []int64
		for _, app := range apps {
			s, err := app.Stats(context.Background(), "groq")
			if err != nil {
				t.Fatal(err)
			}
			used = append(used, s.Limits[governor.RPM].Used)
		}
		if used[0] != used[1] || used[0] == 0 {
			t.Errorf("the apps see %v of rpm used, want the same cluster-wide figure", used)
		}
		// Every process lists the cluster's flows, wherever the runs ran:
		// each process's calls of "ask", as it last wrote them down, in
		// the API and in its metrics, which read what it last read.
		time.Sleep(10 * time.Second) // each writes its flows down and reads the others' every 2 s
		var lists []string
		for _, app := range apps {
			flows, err := app.ClusterFlows(context.Background(), "groq")
			if err != nil {
				t.Fatal(err)
			}
			// What each process said, not when: a process writes its
			// flows down again every lease, between the two reads.
			var said []string
			for _, f := range flows {
				said = append(said, fmt.Sprintf("%s/%s waiting %d admitted %d tokens %+v", f.Node, f.Flow, f.Waiting, f.Admitted, f.Tokens))
			}
			lists = append(lists, strings.Join(said, "; "))
			admitted, all := map[string]int64{}, int64(0)
			for _, f := range flows {
				if f.Flow == "ask" {
					admitted[f.Node] = f.Admitted
					all += f.Admitted
				}
			}
			if all != calls {
				t.Errorf("the cluster's flows as an app lists them: %+v; want the nodes' calls of ask, %d in all", flows, calls)
			}
			rec := httptest.NewRecorder()
			app.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			for node, n := range admitted {
				if want := fmt.Sprintf(`sluice_cluster_flow_admitted{flow="ask",key="groq",node=%q} %d`, node, n); !strings.Contains(rec.Body.String(), want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
		}
		if lists[0] != lists[1] {
			t.Errorf("the apps list the cluster's flows differently:\n%s\n%s", lists[0], lists[1])
		}
		// When the cluster's use cannot be read, Stats says so and gives
		// the process's own figures.
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		own, err := apps[0].Stats(cancelled, "groq")
		if !errors.Is(err, context.Canceled) || own.Limits[governor.RPM].Max == 0 {
			t.Errorf("Stats under a cancelled context: %v, rpm %+v; want context.Canceled and the process's own figures", err, own.Limits[governor.RPM])
		}
	})
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
// between them, not once per app. The backfill starts once both apps have
// taken the count their samples start from, so the samples must count
// exactly every item.
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
	var open atomic.Bool // no item is pending until both apps have sampled
	pending := db.pending("notes")
	var apps []*sluice.App
	for _, node := range []string{"node-a", "node-b"} {
		app := newApp(t, sluice.Config{
			DatabaseURL: url, ExecutorID: node, Cluster: &sluice.Cluster{},
			PollInterval: 20 * time.Millisecond, HealthEvery: 50 * time.Millisecond, HistoryEvery: 100 * time.Millisecond,
			Providers: []sluice.Provider{{Name: "groq", LLM: pc, Limits: limits}},
		})
		err := sluice.RegisterBackfill(app, sluice.Backfill[article]{
			Backfill: run.Backfill{ID: "notes", MaxBatch: 1, Poll: 50 * time.Millisecond, BatchesPerRun: 4, InFlight: 1},
			Pending: func(ctx context.Context, after string, limit int) ([]string, error) {
				if !open.Load() {
					return nil, nil
				}
				return pending(ctx, after, limit)
			},
			Load: db.load,
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
		apps = append(apps, app)
	}
	// An app's first health poll takes the count its samples start
	// from; GET /v1/flows names the job once that poll is done.
	for _, app := range apps {
		h := app.Handler(sluice.HandlerConfig{})
		waitUntil(t, "both apps' first health poll", func() bool {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/flows", nil))
			return strings.Contains(rec.Body.String(), `"name":"notes"`)
		})
	}
	open.Store(true)
	st := testenv.OpenStore(t, url)
	var done int64
	var samples []store.Sample
	// Until a sample finds nothing remaining: it counted up to the last
	// item, and no later one counts more.
	waitUntil(t, "a sample of the end", func() bool {
		var err error
		samples, err = st.Samples(context.Background(), time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "notes")
		if err != nil {
			t.Fatal(err)
		}
		done = 0
		end := false
		for _, s := range samples {
			done += s.Done
			end = end || s.Remaining == 0 && s.State == "done"
		}
		return end
	})
	if done != items {
		t.Fatalf("the samples of both apps count %d items done of %d, want each item once (%d samples)", done, items, len(samples))
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if n := len(db.saved["notes"]); n != items {
		t.Fatalf("%d of %d items saved", n, items)
	}
	t.Logf("%d samples count %d items done of %d", len(samples), done, items)
}

// waitUntil polls ok until it holds, failing the test if it does not
// within a minute: a budget for the whole test, not a measure of it.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(20 * time.Millisecond) { // poll interval: until ok (the loop's deadline bounds it)
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// Two apps on one database share a priced key with a budget per day
// through leases that carry money: the calls of both, wherever their runs
// land, never cost more than the budget, where each alone would spend it
// whole. The price is of output alone, so a call's worst case is exactly
// its max_tokens' price: once less than that is left, no call can be
// admitted on any process, and the test waits for that, not for a time.
func TestClusterHoldsABudgetInAggregate(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		model, client := simProvider(t, governor.Limits{})
		// $10 per million output tokens: 1,000 max_tokens is $0.01 at
		// worst, and costs $0.005 to $0.01 (the provider answers half to
		// all of it). A day's budget of $0.05: five to nine calls of the
		// sixteen sent.
		price := governor.Price{Output: 10}
		provider := sluice.Provider{Name: "groq", LLM: client, Price: price, Budget: sluice.Budget{Day: 0.05}, DayBurst: -1}
		const runs, maxTokens = 16, 1000
		budget := int64(0.05 * governor.Nano)
		worst := price.Of(governor.Cost{Output: maxTokens})
		var spent, done atomic.Int64
		var apps []*sluice.App
		for _, node := range []string{"node-a", "node-b"} {
			app := newApp(t, sluice.Config{DatabaseURL: url, ExecutorID: node, Cluster: &sluice.Cluster{}, Providers: []sluice.Provider{provider}})
			err := sluice.Register(app, run.Function{ID: "ask", Event: "ask"}, func(ctx *sluice.Context, ev sluice.Event[ask]) (llm.Usage, error) {
				resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{
					Model:     "sim-model",
					Messages:  []llm.Message{{Role: "user", Content: "Summarize the quarterly report."}},
					MaxTokens: ev.Data.MaxTokens,
				})
				if err != nil {
					return llm.Usage{}, err
				}
				spent.Add(price.Of(governor.Cost{Input: resp.Usage.PromptTokens, Output: resp.Usage.CompletionTokens}))
				done.Add(1)
				return resp.Usage, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := app.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			apps = append(apps, app)
		}
		for i := range runs {
			if _, err := apps[i%2].Send(context.Background(), "ask", fmt.Sprint("call-", i), ask{MaxTokens: maxTokens}); err != nil {
				t.Fatal(err)
			}
		}
		// Spent to less than one call's worst case from the budget, with
		// no call at the provider: nothing more fits anywhere.
		testenv.WaitUntil(t, 10*time.Millisecond, func() (bool, string) {
			s, n := spent.Load(), done.Load()
			return budget-s < worst && model.Stats().Requests == n,
				fmt.Sprintf("%d calls answered of %d at the provider, %d of the budget %d spent", n, model.Stats().Requests, s, budget)
		})
		s, n := spent.Load(), done.Load()
		if s > budget {
			t.Fatalf("%d calls cost %d billionths together, over the budget of %d", n, s, budget)
		}
		for _, app := range apps {
			stats, err := app.Stats(context.Background(), "groq")
			if err != nil {
				t.Fatal(err)
			}
			if mpd := stats.Limits[governor.MPD]; mpd.Max != budget || mpd.Used > budget || mpd.Used < s {
				t.Errorf("an app's stats of the day's budget: %+v, want the cluster's %d spent of %d", mpd, s, budget)
			}
		}
		for _, app := range apps {
			if err := app.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		// No call reached the provider after the budget was spent.
		if got := model.Stats().Requests; got != n {
			t.Fatalf("the provider had %d calls, %d of them answered before the budget was spent", got, n)
		}
		t.Logf("%d of %d calls cost %d of the budget %d", n, runs, s, budget)
	})
}

// Two apps on one database share a priced key, and flow "intern" has a
// budget per day of its own: the calls of its runs on both apps, wherever
// they land, never cost more than that budget (held by leases of it in the
// store), where each app alone would spend it whole, while flow "team",
// without one, finishes all its runs. The price is of output alone, so a
// call's worst case is its max_tokens' price: once less than that is left
// of the budget, no call of the flow can be admitted anywhere, and the
// test waits for that and for every team run, not for a time.
func TestClusterHoldsAFlowsBudgetInAggregate(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		model, client := simProvider(t, governor.Limits{})
		price := governor.Price{Output: 10}
		provider := sluice.Provider{Name: "groq", LLM: client, Price: price, DayBurst: -1}
		const runs, maxTokens = 12, 1000
		budget := int64(0.04 * governor.Nano)
		worst := price.Of(governor.Cost{Output: maxTokens})
		flows := []governor.FlowConfig{{Name: "intern", Budget: sluice.Budget{Day: 0.04}}, {Name: "team"}}
		var spent, done, teamDone atomic.Int64
		var apps []*sluice.App
		for _, node := range []string{"node-a", "node-b"} {
			app := newApp(t, sluice.Config{DatabaseURL: url, ExecutorID: node, Cluster: &sluice.Cluster{}, Providers: []sluice.Provider{provider}, Flows: flows})
			for _, flow := range []string{"intern", "team"} {
				err := sluice.Register(app, run.Function{ID: "ask-" + flow, Event: "ask-" + flow, Flow: flow}, func(ctx *sluice.Context, ev sluice.Event[ask]) (llm.Usage, error) {
					resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{
						Model:     "sim-model",
						Messages:  []llm.Message{{Role: "user", Content: "Summarize the quarterly report."}},
						MaxTokens: ev.Data.MaxTokens,
					})
					if err != nil {
						return llm.Usage{}, err
					}
					if flow == "intern" {
						spent.Add(price.Of(governor.Cost{Input: resp.Usage.PromptTokens, Output: resp.Usage.CompletionTokens}))
						done.Add(1)
					} else {
						teamDone.Add(1)
					}
					return resp.Usage, nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := app.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			apps = append(apps, app)
		}
		for i := range runs {
			for _, flow := range []string{"intern", "team"} {
				if _, err := apps[i%2].Send(context.Background(), "ask-"+flow, fmt.Sprint(flow, "-", i), ask{MaxTokens: maxTokens}); err != nil {
					t.Fatal(err)
				}
			}
		}
		testenv.WaitUntil(t, 10*time.Millisecond, func() (bool, string) {
			s, n, m := spent.Load(), done.Load(), teamDone.Load()
			return budget-s < worst && m == runs && model.Stats().Requests == n+m,
				fmt.Sprintf("intern: %d calls answered, %d of its budget %d spent; team: %d of %d; %d calls at the provider", n, s, budget, m, runs, model.Stats().Requests)
		})
		s, n := spent.Load(), done.Load()
		if s > budget {
			t.Fatalf("flow intern's %d calls cost %d billionths together, over its budget of %d", n, s, budget)
		}
		for _, app := range apps {
			if err := app.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if got := model.Stats().Requests; got != n+runs {
			t.Fatalf("the provider had %d calls, want the %d intern calls answered within the budget and the %d of team", got, n, runs)
		}
		t.Logf("intern: %d of %d calls cost %d of its budget %d; team: %d calls", n, runs, s, budget, runs)
	})
}
