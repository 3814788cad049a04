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
	"github.com/sluice-dev/sluice/internal/testenv"
)

// clusterSim is a run of several processes sharing one key through the
// store, each on a handle of its own, every flow of each backlogged.
//
// The processes share one clock that the run moves on to the next event
// (a call may be admitted, a grant loop's tick, a node's death, the end)
// once every node is still: all its calls wait in line, its grant loop has
// turned if a call waits for a lease or at its tick, as Start turns it,
// and nothing more can be admitted. So what happens depends on what the
// nodes do, not on how fast the machine runs them.
type clusterSim struct {
	limits governor.Limits
	// price is each governor's Config.Price: zero, none.
	price governor.Price
	// dayBurst is each governor's DayBurst (-1: no day pacing).
	dayBurst      time.Duration
	reserve, used governor.Cost
	ttl           time.Duration
	// step is the least the clock moves: a call a lease holds back looks
	// again every 50 ms and wakes its grant loop each time, which answers
	// in a store transaction's time.
	step time.Duration
	run  time.Duration
	// nodes, each with a call of each of its flows always waiting.
	nodes []simNode
	// kill is the node that dies at a third of the run, without a word to
	// the store; -1: none.
	kill int
}

type simNode struct {
	name  string
	flows []string
}

// simulate runs sim on the database at url from began, and returns the
// calls admitted, in the order of their admission, and the clock's time
// at the end.
func (sim clusterSim) simulate(t *testing.T, url string, began time.Time) ([]call, time.Time) {
	t.Helper()
	clk := &stepClock{now: began}
	tick := sim.ttl / 4 // the grant loop's, as Start runs it
	var mu sync.Mutex
	var calls []call
	ctx := context.Background()
	type node struct {
		simNode
		l      *quota.Ledger
		cancel context.CancelFunc
		wg     sync.WaitGroup
	}
	nodes := make([]*node, len(sim.nodes))
	for i, sn := range sim.nodes {
		st := testenv.OpenStore(t, url)
		// Wait sleeps on no timer: the run admits what the clock allows
		// by calling Advance when it moves the clock.
		l, err := quota.Open(ctx, st, governor.Config{Key: "groq", Limits: sim.limits, Price: sim.price, SettleOutput: true,
			Now: clk.Now, After: func(time.Duration) <-chan time.Time { return nil }, DayBurst: sim.dayBurst},
			quota.Config{Now: clk.Now, Cluster: &quota.Cluster{Node: sn.name, LeaseTTL: sim.ttl}})
		if err != nil {
			t.Fatal(err)
		}
		if l.Node() != sn.name {
			t.Fatalf("node %q, want %q", l.Node(), sn.name)
		}
		nodes[i] = &node{simNode: sn, l: l}
	}
	for _, n := range nodes {
		nctx, cancel := context.WithCancel(ctx)
		n.cancel = cancel
		l := n.l
		for _, f := range n.flows {
			n.wg.Go(func() {
				for {
					r, err := l.Wait(nctx, f, sim.reserve)
					if err != nil {
						return // the node died, or the run is over
					}
					at, reserved := r.AdmittedAt(), r.Cost()
					r.Settle(clk.Now(), sim.used)
					mu.Lock()
					calls = append(calls, call{node: n.name, flow: f, at: at, reserved: reserved, cost: r.Cost()})
					mu.Unlock()
				}
			})
		}
	}
	// still waits until every call of the live nodes waits in line and
	// none of them can be admitted at the clock's time; it reports whether
	// any was.
	still := func(live []*node) bool {
		some := false
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
				return some
			}
			some = true
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
	death := began.Add(sim.run / 3)
	for {
		now := clk.Now()
		if !died && sim.kill >= 0 && !now.Before(death) {
			nodes[sim.kill].cancel()
			nodes[sim.kill].wg.Wait()
			live = slices.Delete(slices.Clone(nodes), sim.kill, sim.kill+1)
			died = true
		}
		if now.Sub(began) >= sim.run {
			break
		}
		still(live)
		ticked := !now.Before(nextTick)
		if ticked {
			nextTick = now.Add(tick)
		}
		turn(live, ticked)
		// The next event: a call may be admitted (a step on at least), a
		// tick, the death, the end.
		next := nextTick
		for _, n := range live {
			if at := n.l.Advance(now); !at.IsZero() && at.Before(next) {
				next = at
			}
		}
		if least := now.Add(sim.step); next.Before(least) {
			next = least
		}
		for _, at := range []time.Time{death, began.Add(sim.run)} {
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
	return calls, clk.Now()
}
