package quota

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govkey"
	"github.com/sluice-dev/sluice/internal/store"
)

// Lease defaults: a lease lasts two seconds and the grant loop looks four
// times a lease.
const (
	DefaultLeaseTTL = 2 * time.Second
	maxLeaseTTL     = time.Hour
)

// Cluster makes a Ledger one of several processes on one key: its governor
// admits a call only on room of a lease it took from the store (see
// store.Store's TakeLease), so that what all processes admit never sums to
// more than a limit. docs/multinode.md tells the design.
type Cluster struct {
	// Node names this process among those on the key; default: the host
	// name, the process id and a random suffix, new at every start.
	Node string
	// LeaseTTL is how long a lease lasts (default DefaultLeaseTTL, at most
	// an hour): the longest a dead process's room stays taken beyond what it
	// used, and the time between the store transactions of a busy process.
	LeaseTTL time.Duration
	// Speed divides the grant loop's wall-clock tick, as Config.Now runs
	// that many times as fast as the wall clock. Default 1.
	Speed float64
	// Logger receives a warning when the store cannot be reached. Default
	// slog.Default().
	Logger *slog.Logger
}

func (c *Cluster) withDefaults() (Cluster, error) {
	cc := *c
	if cc.Node == "" {
		host, _ := os.Hostname()
		var b [3]byte
		if _, err := rand.Read(b[:]); err != nil {
			return cc, fmt.Errorf("quota: %w", err)
		}
		cc.Node = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
		if len(cc.Node) > store.MaxKeyBytes {
			cc.Node = cc.Node[len(cc.Node)-store.MaxKeyBytes:]
		}
	}
	if cc.LeaseTTL == 0 {
		cc.LeaseTTL = DefaultLeaseTTL
	}
	if cc.LeaseTTL < time.Millisecond || cc.LeaseTTL > maxLeaseTTL {
		return cc, fmt.Errorf("quota: lease TTL %v: want from 1ms to %v", cc.LeaseTTL, maxLeaseTTL)
	}
	if !(cc.Speed >= 1) {
		cc.Speed = 1
	}
	if cc.Logger == nil {
		cc.Logger = slog.Default()
	}
	return cc, nil
}

// leaser takes and settles a Ledger's leases.
type leaser struct {
	cfg Cluster
	g   *governor.Governor
	st  store.Store
	key string
	now func() time.Time
	// lag is the governor's Lag: the provider may count a call that much
	// later than it was sent, so in the store a lease ends that much after
	// its last call could be sent, and after its last call was.
	lag time.Duration

	mu      sync.Mutex
	unsaved map[leaseID]leaseUse // uses the store did not take yet
	failing bool                 // the last transaction failed: warned once
	said    time.Time            // when the flows were last written down (see sayFlows)
	seen    []store.NodeFlow     // the cluster's flows as last read, after that write
}

// flowsEvery is how often a node writes down its flows for the others to
// show: every lease, from a second to five. What a node wrote more than
// three times that long ago is no longer shown (see ClusterFlows).
func (ls *leaser) flowsEvery() time.Duration {
	return min(max(ls.cfg.LeaseTTL, time.Second), 5*time.Second)
}

// leaseID names a lease of the key (flow empty) or of a flow's own budget.
type leaseID struct{ flow, id string }

// unitSeparator starts the part of a budget's lease key after its key's
// name: a key shared by a cluster has none in its own (see Open).
const unitSeparator = "\x1f"

// budgetKey is the name under which the store keeps the leases of flow's
// own budget on key: the key's name, a unit separator (which the name of
// a key shared by a cluster never holds: see Open), "budget", another and
// the flow's name; a unit separator, "budget" and a digest of key and flow
// when that is longer than a key's name may be. Its
// leases are of money only, bounded by the flow's budget (MPD, MPM), so
// that the flow's calls of all the processes never cost more than it.
func budgetKey(key, flow string) string {
	k := key + unitSeparator + "budget" + unitSeparator + flow
	if len(k) <= store.MaxKeyBytes {
		return k
	}
	sum := sha256.Sum256([]byte(key + "\x00" + flow))
	return unitSeparator + "budget" + unitSeparator + hex.EncodeToString(sum[:])
}

// storeKey is the store's key of a lease: the key's, or its flow's budget's.
func (ls *leaser) storeKey(flow string) string {
	if flow == "" {
		return ls.key
	}
	return budgetKey(ls.key, flow)
}

// leaseUse is what a lease was used for, as the governor last reported it.
type leaseUse struct {
	used  governor.Cost
	last  time.Time // when its last call was sent
	final bool      // used changes no more
}

// Node is the name the Ledger's process has among the key's, empty when it
// is not one of a cluster.
func (l *Ledger) Node() string {
	if l.lease == nil {
		return ""
	}
	return l.lease.cfg.Node
}

// ClusterUse returns what every process's leases on the key take at now in
// a minute's window and in a day's, as the store sums them for the next
// lease; ok is false when the Ledger is not one of a cluster.
func (l *Ledger) ClusterUse(ctx context.Context, now time.Time) (minute, day governor.Cost, ok bool, err error) {
	if l.lease == nil {
		return minute, day, false, nil
	}
	minute, day, err = l.lease.st.LeaseUse(ctx, l.lease.key, now)
	return minute, day, true, err
}

// run takes leases as the governor's waiting calls need them and reports
// their use, every quarter of a lease and whenever a call waits for one,
// until stop or ctx ends; then it reports what is left.
func (ls *leaser) run(ctx context.Context, stop <-chan struct{}) {
	tick := time.Duration(float64(ls.cfg.LeaseTTL/4) / ls.cfg.Speed)
	t := time.NewTicker(max(tick, time.Millisecond))
	defer t.Stop()
	wanted := ls.g.Inside(govkey.Key{}).LeaseWanted()
	for {
		select {
		case <-stop:
			// The process stops: its leases end now, and what they were
			// used for is written down, so their unused room is everyone's
			// at once.
			ls.g.Inside(govkey.Key{}).CloseLeases(ls.now())
			ls.settle(context.WithoutCancel(ctx))
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wanted:
		}
		ls.once(ctx)
	}
}

// once reports the leases' use and takes a lease for what waits.
func (ls *leaser) once(ctx context.Context) {
	ls.settle(ctx)
	now := ls.now()
	ls.sayFlows(ctx, now)
	d := ls.g.Inside(govkey.Key{}).Demand(now, ls.cfg.LeaseTTL/4)
	if d.Want != (governor.Cost{}) && !ls.takeKey(ctx, now, d) {
		return
	}
	ls.takeBudgets(ctx, now, d.Budgets)
}

// takeKey takes a lease of the key for d's waiting calls; it reports
// false when the store did not answer, or the process stops.
func (ls *leaser) takeKey(ctx context.Context, now time.Time, d governor.LeaseDemand) bool {
	// What waits may add up to more than a lease holds (money above all:
	// a few costly calls of many flows); a lease of the most is taken then.
	want := leasePart(d.Want)
	var pace *store.LeasePace
	if d.Burst > 0 {
		// The day limits are paced for the whole cluster, by the store.
		pace = &store.LeasePace{DayPace: d.DayPace, Burst: d.Burst, Ahead: lessOf(leasePart(d.Ahead), want)}
	}
	got, err := ls.st.TakeLease(ctx, store.LeaseRequest{
		Key: ls.key, Node: ls.cfg.Node, At: now, TTL: min(ls.cfg.LeaseTTL+ls.lag, store.MaxLeaseTTL),
		Want: want, Min: lessOf(leasePart(d.Min), want), Weight: d.Weight, Flows: d.Flows, Limits: ls.g.Limits(), Pace: pace,
	})
	if ctx.Err() != nil {
		return false // stopping: the lease, if any, goes unused
	}
	ls.failed(err, "take a lease")
	if err != nil {
		return false
	}
	if got.ID != "" {
		ls.hold(ctx, "", got)
	}
	return true
}

// takeBudgets takes a lease of each flow's own budget for what its
// waiting calls need (see governor's GrantBudget), in flows' name order.
func (ls *leaser) takeBudgets(ctx context.Context, now time.Time, budgets map[string]governor.BudgetDemand) {
	for _, flow := range slices.Sorted(maps.Keys(budgets)) {
		b := budgets[flow]
		var limits [governor.NumLimits]int64
		limits[governor.MPD], limits[governor.MPM] = b.Limits[governor.MPD], b.Limits[governor.MPM]
		got, err := ls.st.TakeLease(ctx, store.LeaseRequest{
			Key: ls.storeKey(flow), Node: ls.cfg.Node, At: now, TTL: min(ls.cfg.LeaseTTL+ls.lag, store.MaxLeaseTTL),
			Want: governor.Cost{Money: b.Want}, Min: governor.Cost{Money: b.Min}, Weight: 1, Limits: limits,
		})
		if ctx.Err() != nil {
			return
		}
		ls.failed(err, "take a lease of a flow's budget")
		if err != nil {
			return
		}
		if got.ID != "" {
			ls.hold(ctx, flow, got)
		}
	}
}

// hold gives the governor lease got, of the key (flow empty) or of flow's
// budget.
func (ls *leaser) hold(ctx context.Context, flow string, got store.Lease) {
	// The lease ends on this clock when the store has it end (At+TTL, to
	// the millisecond; At was read before the transaction began), less the
	// lag its last call may take to reach the provider.
	if until, at := got.Until.Add(-ls.lag), ls.now(); until.After(at) {
		if flow == "" {
			ls.g.Inside(govkey.Key{}).Grant(at, got.ID, got.Cost, until)
		} else {
			ls.g.Inside(govkey.Key{}).GrantBudget(at, flow, got.ID, got.Cost.Money, until)
		}
		return
	}
	// The transaction outlasted the lease: nothing can be admitted on it.
	// Written down unused and final, it frees its room at once, and folds.
	ls.failed(ls.st.SettleLease(ctx, ls.storeKey(flow), got.ID, governor.Cost{}, got.At, true), "settle a lease")
}

// leasePart returns c as a lease may hold it: each part at most
// governor.MaxCost, and no Cached (a lease grants none).
func leasePart(c governor.Cost) governor.Cost {
	return governor.Cost{Requests: min(c.Requests, governor.MaxCost), Input: min(c.Input, governor.MaxCost),
		Output: min(c.Output, governor.MaxCost), Money: min(c.Money, governor.MaxCost)}
}

// lessOf returns c with each part at most that of most.
func lessOf(c, most governor.Cost) governor.Cost {
	return governor.Cost{Requests: min(c.Requests, most.Requests), Input: min(c.Input, most.Input),
		Output: min(c.Output, most.Output), Money: min(c.Money, most.Money)}
}

// sayFlows writes down this node's flows on the key (what waits, what
// was admitted and its tokens), at most every flowsEvery, for every node
// to show the cluster's (ClusterFlows).
func (ls *leaser) sayFlows(ctx context.Context, now time.Time) {
	if !ls.said.IsZero() && now.Sub(ls.said) < ls.flowsEvery() && !now.Before(ls.said) {
		return
	}
	ls.said = now
	st := ls.g.Stats(now)
	flows := make([]store.NodeFlow, 0, min(len(st.Flows), store.MaxLeaseFlows))
	for _, f := range st.Flows[:min(len(st.Flows), store.MaxLeaseFlows)] {
		flows = append(flows, store.NodeFlow{Flow: f.Name, Waiting: int64(f.Waiting), Admitted: min(f.Admitted, governor.MaxCost),
			Input: min(f.Tokens.Input, governor.MaxCost), Output: min(f.Tokens.Output, governor.MaxCost)})
	}
	err := ls.st.RecordNodeFlows(ctx, ls.key, ls.cfg.Node, now, flows)
	ls.failed(err, "write down the flows")
	if err != nil {
		return
	}
	seen, err := ls.st.NodeFlows(ctx, ls.key, now.Add(-3*ls.flowsEvery()))
	ls.failed(err, "read the cluster's flows")
	if err == nil {
		ls.mu.Lock()
		ls.seen = seen
		ls.mu.Unlock()
	}
}

// SeenClusterFlows returns the cluster's flows as the Ledger last read them
// (see ClusterFlows), every few seconds, from memory: what metrics show
// without reading the store at each scrape. Nil when the Ledger is not one
// of a cluster, or has not read them yet.
func (l *Ledger) SeenClusterFlows() []store.NodeFlow {
	if l.lease == nil {
		return nil
	}
	l.lease.mu.Lock()
	defer l.lease.mu.Unlock()
	return l.lease.seen
}

// ClusterFlows returns what every node of the Ledger's cluster, this one
// too, last wrote down of its flows on the key, as long as it is fresh
// (written within three times the time between two writes), by flow and
// node; ok is false when the Ledger is not one of a cluster.
func (l *Ledger) ClusterFlows(ctx context.Context, now time.Time) (flows []store.NodeFlow, ok bool, err error) {
	if l.lease == nil {
		return nil, false, nil
	}
	flows, err = l.lease.st.NodeFlows(ctx, l.lease.key, now.Add(-3*l.lease.flowsEvery()))
	return flows, true, err
}

// settle writes what the leases were used for; what cannot be written is
// kept for the next time (the store then holds a use higher than the truth,
// which only holds back room).
func (ls *leaser) settle(ctx context.Context) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, u := range ls.g.Inside(govkey.Key{}).LeaseUses(ls.now()) {
		if ls.unsaved == nil {
			ls.unsaved = map[leaseID]leaseUse{}
		}
		// Used may be above a lease's bound only if its calls settled for
		// more than the lease held: the store keeps a lease's use at most
		// what it granted either way.
		ls.unsaved[leaseID{u.Flow, u.ID}] = leaseUse{used: leasePart(u.Used), last: u.Last, final: u.Final}
	}
	for id, u := range ls.unsaved {
		err := ls.st.SettleLease(ctx, ls.storeKey(id.flow), id.id, u.used, u.last.Add(ls.lag), u.final)
		if err != nil && ctx.Err() != nil {
			return
		}
		if err != nil && !isNoLease(err) {
			ls.failed(err, "settle a lease")
			return
		}
		delete(ls.unsaved, id)
	}
}

// failed logs the first of a run of failures, and the recovery.
func (ls *leaser) failed(err error, what string) {
	switch {
	case err != nil && !ls.failing:
		ls.failing = true
		ls.cfg.Logger.Warn("sluice: cannot "+what+" in the store; calls on the key wait until it answers", "key", ls.key, "node", ls.cfg.Node, "err", err)
	case err == nil && ls.failing:
		ls.failing = false
		ls.cfg.Logger.Info("sluice: the store answers again; leases resume", "key", ls.key, "node", ls.cfg.Node)
	}
}

func isNoLease(err error) bool { return errors.Is(err, store.ErrNoLease) }
