package quota_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govkey"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// call is one call admitted by a node of the cluster test.
type call struct {
	node, flow string
	at         time.Time
	cost       governor.Cost // as settled
}

// Three processes share one key through the store, each on a handle of its
// own: flow a's calls wait on one node, flow b's on the two others. On both
// databases, what all three admit in any minute never exceeds a limit, the
// key is used near its bottleneck, and a and b get the same share, wherever
// their work waits; and a node that dies midway spends nothing twice: the
// two others go on under the limits with its charges counted.
//
// The three share one clock that the test moves on to the next event (a
// call may be admitted, a grant loop's tick, the node's death, the end)
// once every node is still: all its calls wait in line, its grant loop has
// turned if a call waits for a lease or at its tick, as Start turns it, and
// nothing more can be admitted. So what happens depends on what the nodes
// do, not on how fast the machine runs them.
func TestClusterHoldsTheLimitsInAggregate(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		clk := &stepClock{now: time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)}
		limits := governor.Limits{governor.RPM: 120, governor.TPM: 12_000, governor.OTPM: 3_000}
		reserve := governor.Cost{Requests: 1, Input: 60, Output: 40}
		used := governor.Cost{Input: 60, Output: 20}
		const ttl = 20 * time.Second
		tick := ttl / 4 // the grant loop's, as Start runs it
		// The clock moves half a second at least: a call a lease holds back
		// looks again every 50 ms and wakes its grant loop each time, which
		// answers in a store transaction's time.
		const step = 500 * time.Millisecond

		var mu sync.Mutex
		var calls []call
		ctx := context.Background()
		run := 3 * time.Minute // of the clock
		type node struct {
			name   string
			flows  []string
			l      *quota.Ledger
			cancel context.CancelFunc
			wg     sync.WaitGroup
		}
		nodes := []*node{{name: "n1", flows: []string{"a", "a"}}, {name: "n2", flows: []string{"b", "b"}}, {name: "n3", flows: []string{"b", "b"}}}
		for _, n := range nodes {
			st := testenv.OpenStore(t, url)
			// Wait sleeps on no timer: the test admits what the clock
			// allows by calling Advance when it moves the clock.
			l, err := quota.Open(ctx, st, governor.Config{Key: "groq", Limits: limits, SettleOutput: true,
				Now: clk.Now, After: func(time.Duration) <-chan time.Time { return nil }, DayBurst: -1},
				quota.Config{Now: clk.Now, Cluster: &quota.Cluster{Node: n.name, LeaseTTL: ttl}})
			if err != nil {
				t.Fatal(err)
			}
			if l.Node() != n.name {
				t.Fatalf("node %q, want %q", l.Node(), n.name)
			}
			n.l = l
		}
		began := clk.Now()
		for _, n := range nodes {
			nctx, cancel := context.WithCancel(ctx)
			n.cancel = cancel
			l := n.l
			for _, f := range n.flows {
				n.wg.Go(func() {
					for {
						r, err := l.Wait(nctx, f, reserve)
						if err != nil {
							return // the node died, or the run is over
						}
						at := r.AdmittedAt()
						r.Settle(clk.Now(), used)
						mu.Lock()
						calls = append(calls, call{node: n.name, flow: f, at: at, cost: r.Cost()})
						mu.Unlock()
					}
				})
			}
		}
		// still waits until every call of the live nodes waits in line
		// and none of them can be admitted at the clock's time; it reports
		// whether any was.
		still := func(live []*node) bool {
			any := false
			for {
				now := clk.Now()
				for _, n := range live {
					waitUntil(t, func() (bool, string) {
						w := waitingOf(n.l, now)
						return w == len(n.flows), fmt.Sprintf("%s: %d of its %d calls wait in line", n.name, w, len(n.flows))
					})
				}
				admitted := false
				for _, n := range live {
					n.l.Advance(now)
					admitted = admitted || waitingOf(n.l, now) < len(n.flows)
				}
				if !admitted {
					return any
				}
				any = true
			}
		}
		// turn runs the grant loops of the live nodes that a call waits a
		// lease on, or all at a tick, at once as their processes would, and
		// admits what the leases allow, until the nodes are still.
		turn := func(live []*node, tick bool) {
			for {
				var wg sync.WaitGroup
				for _, n := range live {
					select {
					case <-n.l.Inside(govkey.Key{}).LeaseWanted():
					default:
						if !tick {
							continue
						}
					}
					wg.Go(func() { n.l.LeaseOnce(ctx) })
				}
				wg.Wait()
				if !still(live) {
					return
				}
				tick = false
			}
		}
		live := nodes
		died := false
		nextTick := began
		for {
			now := clk.Now()
			if !died && now.Sub(began) >= run/3 {
				// n3 dies at a third of the run, without a word to the store.
				nodes[2].cancel()
				nodes[2].wg.Wait()
				live, died = nodes[:2], true
			}
			if now.Sub(began) >= run {
				break
			}
			still(live)
			ticked := !now.Before(nextTick)
			if ticked {
				nextTick = now.Add(tick)
			}
			turn(live, ticked)
			// The next event: a call may be admitted (a step on at least),
			// a tick, the death, the end.
			next := nextTick
			for _, n := range live {
				if at := n.l.Advance(now); !at.IsZero() && at.Before(next) {
					next = at
				}
			}
			if least := now.Add(step); next.Before(least) {
				next = least
			}
			for _, at := range []time.Time{began.Add(run / 3), began.Add(run)} {
				if at.After(now) && at.Before(next) {
					next = at
				}
			}
			clk.set(next)
		}
		for _, n := range live {
			n.cancel()
			n.wg.Wait()
			n.l.LeaseOnce(ctx) // the leases' last use, as Stop writes it down
			if err := n.l.Stop(ctx); err != nil {
				t.Error(err)
			}
		}

		mu.Lock()
		defer mu.Unlock()
		slices.SortFunc(calls, func(a, b call) int { return a.at.Compare(b.at) })
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
		minute, _, err := st.LeaseUse(ctx, "groq", clk.Now())
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
