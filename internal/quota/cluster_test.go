package quota_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// call is one call admitted by a node of the cluster test.
type call struct {
	node, flow string
	at         time.Time
	reserved   governor.Cost // as admitted: on a priced key, with its worst-case money
	cost       governor.Cost // as settled
}

// Three processes share one key through the store (see clusterSim): flow
// a's calls wait on one node, flow b's on the two others. On both
// databases, what all three admit in any minute never exceeds a limit, the
// key is used near its bottleneck, and a and b get the same share, wherever
// their work waits; and a node that dies midway spends nothing twice: the
// two others go on under the limits with its charges counted.
func TestClusterHoldsTheLimitsInAggregate(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		limits := governor.Limits{governor.RPM: 120, governor.TPM: 12_000, governor.OTPM: 3_000}
		const run = 3 * time.Minute // of the clock
		sim := clusterSim{
			limits: limits, dayBurst: -1,
			reserve: governor.Cost{Requests: 1, Input: 60, Output: 40}, used: governor.Cost{Input: 60, Output: 20},
			ttl: 20 * time.Second, step: 500 * time.Millisecond, run: run,
			nodes: []simNode{{"n1", []string{"a", "a"}}, {"n2", []string{"b", "b"}}, {"n3", []string{"b", "b"}}},
			kill:  2,
		}
		calls, end := sim.simulate(t, url, time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC))
		ctx := context.Background()
		// Every window of a minute that ends at an admission.
		worst := [governor.NumLimits]float64{}
		for i, c := range calls {
			var sum governor.Cost
			for j := i; j >= 0 && calls[j].at.After(c.at.Add(-time.Minute)); j-- {
				sum.Requests += calls[j].cost.Requests
				sum.Input += calls[j].cost.Input
				sum.Output += calls[j].cost.Output
			}
			for l := range governor.NumLimits {
				if limits[l] > 0 {
					worst[l] = max(worst[l], float64(sum.On(l))/float64(limits[l]))
				}
			}
		}
		for l := range governor.NumLimits {
			if worst[l] > 1 {
				t.Errorf("%s: the nodes together charged %.3f × the limit in a minute", l, worst[l])
			}
		}
		// The bottleneck is rpm: 120 a minute over the run, less the
		// first minute's start.
		perFlow := map[string]int64{}
		for _, c := range calls {
			perFlow[c.flow] += c.cost.Requests
		}
		total := perFlow["a"] + perFlow["b"]
		const least = 0.85
		if min := int64(least * float64(limits[governor.RPM]) * run.Minutes()); total < min {
			t.Errorf("%d calls in %v, want at least %d (%.0f %% of rpm): the leases waste the key", total, run, min, least*100)
		}
		if d := float64(perFlow["a"]-perFlow["b"]) / float64(total); d > 0.15 || d < -0.15 {
			t.Errorf("flow a had %d calls, flow b %d: want them within 15 %% of the total, whatever node their calls wait on", perFlow["a"], perFlow["b"])
		}
		t.Logf("%d calls: %v; worst minute %.3f of rpm, %.3f of tpm", total, perFlow, worst[governor.RPM], worst[governor.TPM])

		// What the store holds agrees: the leases of the last minute sum to
		// at most the limits.
		st := testenv.OpenStore(t, url)
		minute, _, err := st.LeaseUse(ctx, "groq", end)
		if err != nil {
			t.Fatal(err)
		}
		for l := range governor.NumLimits {
			if limits[l] > 0 && minute.On(l) > limits[l] {
				t.Errorf("the store's leases of the last minute take %d of %s's %d", minute.On(l), l, limits[l])
			}
		}
	})
}

// A node whose calls go one at a time takes a lease for each. Its leaser
// writes each lease down final once the lease ended and its call settled,
// and the store folds the final leases a minute old: the key keeps about a
// row per minute, not one per call, and its sums are the calls' settled
// use. On both databases, on a clock the test moves.
func TestClusterLeasesFoldOnceFinal(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		var mu sync.Mutex
		start := time.Date(2026, 10, 18, 7, 1, 49, 123_000_000, time.UTC)
		now := start
		clk := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}
		set := func(t time.Time) {
			mu.Lock()
			defer mu.Unlock()
			now = t
		}
		st := testenv.OpenStore(t, url)
		l, err := quota.Open(ctx, st, governor.Config{Key: "groq", Limits: governor.Limits{governor.RPM: 1000, governor.TPM: 1_000_000},
			SettleOutput: true, Lag: 2 * time.Second, Now: clk, DayBurst: -1},
			quota.Config{Now: clk, Cluster: &quota.Cluster{Node: "n1", LeaseTTL: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		l.Start(ctx)
		// 120 calls, one every 10 s: 20 minutes.
		const calls, every = 120, 10 * time.Second
		reserve := governor.Cost{Requests: 1, Input: 60, Output: 40}
		for i := range calls {
			set(start.Add(time.Duration(i) * every))
			r, err := l.Wait(ctx, "a", reserve)
			if err != nil {
				t.Fatal(err)
			}
			r.Settle(clk(), governor.Cost{Input: 50, Output: 20})
		}
		// The last lease ends, and the leaser writes it down as it stops.
		end := start.Add(calls * every)
		set(end)
		if err := l.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, day, err := st.LeaseUse(ctx, "groq", end); err != nil || day != (governor.Cost{Requests: calls, Input: 50 * calls, Output: 20 * calls}) {
			t.Fatalf("LeaseUse of the day = %+v, %v; want the %d calls' settled use", day, err, calls)
		}
		// A fold for each of the 20 minutes (21 that the leases' ends fall
		// in), and the leases of the last minute and 2 s (the lag): 7. And
		// as many, at most, taken at one call's time but handed over after
		// the test moved the clock on, so written down unused.
		if rows := leaseRows(t, st, "groq"); rows > 21+7+7 {
			t.Fatalf("%d rows of leases after %d calls taken one at a time in %s; want at most %d", rows, calls, end.Sub(start), 21+7+7)
		}
	})
}

// stepClock is a clock the test moves.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// waitingOf is how many calls wait in l's line at now.
func waitingOf(l *quota.Ledger, now time.Time) int {
	n := 0
	for _, f := range l.Stats(now).Flows {
		n += f.Waiting
	}
	return n
}

// waitUntil polls cond until it holds, failing the test with what cond
// last said if it does not within testenv.Budget.
func waitUntil(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	testenv.WaitUntil(t, time.Millisecond, cond)
}

// leaseRows counts the rows of key's leases, through the store's handle.
func leaseRows(t *testing.T, st store.Store, key string) int64 {
	t.Helper()
	h, err := st.Handle()
	if err != nil {
		t.Fatal(err)
	}
	const q = `SELECT count(*) FROM sluice_leases WHERE key = $1`
	var n int64
	if h.SQLite != nil {
		err = h.SQLite.QueryRowContext(context.Background(), q, key).Scan(&n)
	} else {
		err = h.Postgres.QueryRow(context.Background(), q, key).Scan(&n)
	}
	if err != nil {
		t.Fatalf("count the leases of %s: %v", key, err)
	}
	return n
}

// TestStopHandsBackTheRoom: a node that stops gracefully ends its open
// leases and writes down what they were used for, so the room it was
// granted and did not use is the other nodes' at once — not when its
// leases would have ended, and for a day limit not a day after that.
func TestStopHandsBackTheRoom(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		clk := &stepClock{now: time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)}
		st := testenv.OpenStore(t, url)
		l, err := quota.Open(ctx, st, governor.Config{Key: "groq", Limits: governor.Limits{governor.TPM: 100_000, governor.TPD: 1_000_000},
			SettleOutput: true, Now: clk.Now, DayBurst: -1},
			quota.Config{Now: clk.Now, Cluster: &quota.Cluster{Node: "n1", LeaseTTL: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		l.Start(ctx)
		r, err := l.Wait(ctx, "a", governor.Cost{Requests: 1, Input: 600, Output: 4000})
		if err != nil {
			t.Fatal(err)
		}
		r.Settle(clk.Now(), governor.Cost{Input: 500, Output: 200})
		// The lease, granted for the call's reservation, is open for an
		// hour more; the node stops now.
		if err := l.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		minute, day, err := st.LeaseUse(ctx, "groq", clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := governor.Cost{Requests: 1, Input: 500, Output: 200}
		if minute != want || day != want {
			t.Errorf("after the stop the leases take %+v of the minute and %+v of the day, want the call's use %+v", minute, day, want)
		}
	})
}

// TestClusterPacesTheDayAsOne: three processes pace a day limit together
// at the pace one process would, through the store's shared pacer; alone
// each would pace it at the full even rate, and three would spend the day
// three times as fast. Flows a (on one node) and b (on two) share the pace
// evenly. On both databases, on a clock the run moves.
func TestClusterPacesTheDayAsOne(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		// 2,880 calls a day: the even pace is a call each 30 s. Leases of
		// a minute: the grant loops turn every 15 s of the clock.
		limits := governor.Limits{governor.RPM: 100, governor.RPD: 2_880}
		const run, burst = 2 * time.Hour, 5 * time.Minute
		sim := clusterSim{
			limits: limits, dayBurst: burst,
			reserve: governor.Cost{Requests: 1, Input: 10, Output: 10}, used: governor.Cost{Input: 10, Output: 5},
			ttl: time.Minute, step: 5 * time.Second, run: run, kill: -1,
		}
		began := time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)
		sim.nodes = []simNode{{"solo", []string{"a", "b"}}}
		one, _ := sim.simulate(t, url, began)
		// The same on a key of its own, three nodes.
		sim.limits[governor.RPM]++ // another key's leases: the name is the same, so the day is apart by a day
		began = began.Add(72 * time.Hour)
		sim.nodes = []simNode{{"n1", []string{"a", "a"}}, {"n2", []string{"b"}}, {"n3", []string{"b"}}}
		three, _ := sim.simulate(t, url, began)

		// The even pace of the run and the burst, paid back over the day.
		day := 24 * time.Hour
		pace := float64(limits[governor.RPD]) * 0.995 * run.Seconds() / day.Seconds() * float64(day) / float64(day+burst)
		most := pace + float64(limits[governor.RPD])*0.995*burst.Seconds()/day.Seconds() + 1
		perFlow := map[string]int{}
		for _, c := range three {
			perFlow[c.flow]++
		}
		t.Logf("one node: %d calls in %s; three nodes: %d (%v); the pace allows %.0f", len(one), run, len(three), perFlow, most)
		for name, n := range map[string]int{"one node": len(one), "three nodes": len(three)} {
			if float64(n) > most {
				t.Errorf("%s made %d calls in %s, over the day's pace and burst, %.0f", name, n, run, most)
			}
		}
		if r := float64(len(three)) / float64(len(one)); r < 0.9 || r > 1.1 {
			t.Errorf("three nodes made %d calls, one %d: %.2f × one node's pace, want within 10 %%", len(three), len(one), r)
		}
		if d := float64(perFlow["a"]-perFlow["b"]) / float64(len(three)); d > 0.15 || d < -0.15 {
			t.Errorf("flow a had %d calls, flow b %d: want them within 15 %% of the total, whatever node their calls wait on", perFlow["a"], perFlow["b"])
		}
	})
}
