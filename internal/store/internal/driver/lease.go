package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// Leases is the part of store.Store on leases of a provider key's capacity
// (see store.LeaseRequest), the same for both drivers but for their
// statements and how they run them: what TakeLease grants is store.Grant's,
// and this is where it finds what Grant is given. Times are BIGINT Unix
// milliseconds, as in the engine's tables. A driver's Store embeds it, made
// by NewLeases.
type Leases struct {
	conn Conn
	sql  map[string]string // by file name without .sql
}

// leaseStatements are the files of a driver's sql folder that NewLeases
// reads, each in the driver's dialect, with the parameters listed.
var leaseStatements = []string{
	"lock_lease_key",     // key; keeps the key's other TakeLease calls out until the transaction ends
	"record_lease_node",  // key, node, weight, flows (JSON), seen at, what it asked for: requests, input, output; 1 if its grant was cut on a paced day limit, else 0; the money it asked for
	"lease_others",       // key, node, seen from (inclusive; a node seen later counts too: its clock, or its turn at the lock, was ahead); returns the node, weight, flows, wanted requests, input, output, whether it was paced out, and wanted money of each other node with a weight
	"lease_use_by_node",  // key, minute's start, day's start, pace window's start, month's start (all exclusive; the month's at or before the day's); returns of each node with leases in the month: the node, requests, input, output of the minute, then of the pace window, then requests, input, output, money of the day, then money of the month
	"take_final_leases",  // key, ended by (inclusive); deletes the final leases that ended by then and returns the node, end, grant time, requests, input, output, money of each
	"add_lease_fold",     // key, ID, node, at, until, requests, input, output, the most of each of those sums, money, the most of its sum; adds to the fold of that ID, made if there is none
	"insert_lease",       // key, ID, node, at, until, requests, input, output, money
	"settle_lease",       // key, ID, requests, input, output, last, 1 if final else 0, money; affects 1 row, or 0 for an unknown lease or a fold
	"prune_leases",       // key, before; affects the rows deleted
	"prune_lease_nodes",  // key, before
	"lease_pacers",       // key; returns the limit, TAT, start and nanoseconds per unit of each of the key's day pacers
	"record_lease_pacer", // key, limit, TAT, start, nanoseconds per unit; makes the pacer, or moves it on (its start stays)
	"give_back_pace",     // key, limit, nanoseconds; moves the pacer back
	"lease_granted",      // key, ID; returns the lease's requests, input, output, no row for an unknown lease or a fold
	"record_node_flow",   // key, node, flow, waiting, admitted, input, output, at; replaces the node's row of the flow
	"node_flows",         // key, seen from (inclusive); returns the node, flow, waiting, admitted, input, output, at of each row, by flow and node
	"prune_node_flows",   // key, before
}

// NewLeases returns the leases' tables on a driver's database: conn runs
// the statements in the sql folder of fsys (see leaseStatements).
func NewLeases(conn Conn, fsys fs.FS) (Leases, error) {
	q, err := readStatements(fsys, leaseStatements)
	if err != nil {
		return Leases{}, fmt.Errorf("read the leases' statements: %w", err)
	}
	return Leases{conn: conn, sql: q}, nil
}

// The windows the leases are summed over: the periods of the limits.
var (
	minuteMillis = governor.RPM.Period().Milliseconds()
	dayMillis    = governor.RPD.Period().Milliseconds()
	monthMillis  = governor.MPM.Period().Milliseconds()
)

// maxMoneySum bounds a fold's money: above any budget (MPD and MPM are at
// most store.MaxBudgetLimit), so that a fold's money, unlike its tokens,
// never stops short of what its leases used while a budget could still
// count it; and low enough that the sums of a month's rows stay far from
// the largest int64.
const maxMoneySum = store.MaxBudgetLimit + 1

// TakeLease implements store.Store. The driver's lock_lease_key keeps the
// key's other TakeLease calls out from before the sums are read until the
// lease is inserted and committed.
func (l Leases) TakeLease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	op, err := named("take lease", " on ", "key", req.Key, store.MaxKeyBytes)
	if err != nil {
		return store.Lease{}, err
	}
	if err := checkLease(req); err != nil {
		return store.Lease{}, fmt.Errorf("%s: %w", op, err)
	}
	at := req.At.UnixMilli()
	ttl := req.TTL.Milliseconds()
	flowsJSON := ""
	if len(req.Flows) > 0 {
		b, err := json.Marshal(req.Flows)
		if err != nil {
			return store.Lease{}, fmt.Errorf("%s: %w", op, err)
		}
		flowsJSON = string(b)
	}
	// Without a daily limit the day's sums play no part in the grant:
	// read the minute's twice rather than a day of leases. A month's are
	// read only under a budget per month.
	dayFrom := at - dayMillis
	if req.Limits[governor.RPD] == 0 && req.Limits[governor.TPD] == 0 && req.Limits[governor.MPD] == 0 {
		dayFrom = at - minuteMillis
	}
	monthFrom := dayFrom
	if req.Limits[governor.MPM] > 0 {
		monthFrom = at - monthMillis
	}
	paceFrom := at - minuteMillis
	if paced(req) {
		paceFrom = at - store.PaceWindow(req.Pace.Burst).Milliseconds()
	}
	var lease store.Lease
	err = l.conn.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.Exec(ctx, l.sql["lock_lease_key"], req.Key); err != nil {
			return err
		}
		if err := l.fold(ctx, tx, req.Key, at-minuteMillis); err != nil {
			return err
		}
		var nodes []nodeWeight
		err := txQuery(tx)(ctx, l.sql["lease_others"], []any{req.Key, req.Node, at - 2*ttl}, func(r Row) error {
			var n nodeWeight
			var flows string
			if err := r.Scan(&n.node, &n.weight, &flows, &n.want.Requests, &n.want.Input, &n.want.Output, &n.pacedOut, &n.want.Money); err != nil {
				return err
			}
			if flows != "" {
				// Written by this code from a map of finite weights: a
				// row that does not read counts by its weight alone.
				_ = json.Unmarshal([]byte(flows), &n.flows)
			}
			nodes = append(nodes, n)
			return nil
		})
		if err != nil {
			return err
		}
		uses, err := l.useByNode(ctx, txQuery(tx), req.Key, at-minuteMillis, dayFrom, paceFrom, monthFrom)
		if err != nil {
			return err
		}
		pacers, err := l.pacers(ctx, tx, req)
		if err != nil {
			return err
		}
		asked := req // as given: recorded for the others
		req := req
		var weights []float64
		req.Weight, weights = shares(nodeWeight{weight: req.Weight, flows: req.Flows}, nodes)
		claims := make([]store.Claim, len(nodes))
		for i, n := range nodes {
			u := uses.of[n.node]
			claims[i] = store.Claim{Weight: weights[i], Minute: u.minute, Day: u.day, Month: u.month, Want: n.want, Pace: u.pace, PacedOut: n.pacedOut != 0}
		}
		own := uses.of[req.Node]
		grant := store.GrantIn(req, uses.windows(), own.windows(), claims,
			&store.Paced{Window: uses.pace, Own: own.pace, Room: pacers.room(req)})
		// What the node asked for, for the others' claims of it: granted
		// or not, it holds room for one more ask like this one while it
		// is below its share.
		if _, err := tx.Exec(ctx, l.sql["record_lease_node"], asked.Key, asked.Node, asked.Weight, flowsJSON, at,
			asked.Want.Requests, asked.Want.Input, asked.Want.Output, pacedOut(req, grant), asked.Want.Money); err != nil {
			return err
		}
		if grant == (governor.Cost{}) {
			return nil
		}
		if err := l.chargePacers(ctx, tx, req, pacers, grant); err != nil {
			return err
		}
		id := leaseID(req.Node)
		if _, err := tx.Exec(ctx, l.sql["insert_lease"], req.Key, id, req.Node, at, at+ttl, grant.Requests, grant.Input, grant.Output, grant.Money); err != nil {
			return err
		}
		lease = store.Lease{ID: id, Node: req.Node, Cost: grant, At: time.UnixMilli(at).UTC(), Until: time.UnixMilli(at + ttl).UTC()}
		return nil
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("%s: %w", op, err)
	}
	return lease, nil
}

// foldMillis is the span of the ends of the leases one fold takes: a
// minute, the shortest window, so that a fold counts in a day's window at
// most a minute longer than its earliest lease would have.
var foldMillis = minuteMillis

// fold folds key's final leases that ended by endedBy (see
// store.Store.TakeLease): those of one node whose ends fall in one minute of
// Unix time are added to that node's fold of the minute, a row whose use is
// their sum (each part at most governor.MaxCost) and whose end is the latest
// of theirs. A fold counts in every window that any of its leases counted
// in, so the sums never drop.
func (l Leases) fold(ctx context.Context, tx store.Tx, key string, endedBy int64) error {
	type fold struct {
		id, node  string
		at, until int64
		use       governor.Cost
	}
	var folds []*fold
	byID := map[string]*fold{}
	err := txQuery(tx)(ctx, l.sql["take_final_leases"], []any{key, endedBy}, func(r Row) error {
		var node string
		var until, at int64
		var use governor.Cost
		if err := r.Scan(&node, &until, &at, &use.Requests, &use.Input, &use.Output, &use.Money); err != nil {
			return err
		}
		minute := until / foldMillis
		if until%foldMillis < 0 {
			minute-- // the minute that holds until, before 1970 too
		}
		id := foldID(node, minute)
		f := byID[id]
		if f == nil {
			f = &fold{id: id, node: node, at: at, until: until}
			byID[id] = f
			folds = append(folds, f)
		}
		f.at, f.until = min(f.at, at), max(f.until, until)
		f.use = atMost(saturatingAdd(f.use, use))
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range folds {
		_, err := tx.Exec(ctx, l.sql["add_lease_fold"], key, f.id, f.node, f.at, f.until,
			f.use.Requests, f.use.Input, f.use.Output, int64(governor.MaxCost), f.use.Money, maxMoneySum)
		if err != nil {
			return err
		}
	}
	return nil
}

// foldID is the ID of node's fold of a minute: the node, "/m" and the
// minute's number since 1970. No lease has it: a lease's ID ends in "/" and
// hex digits, without "m".
func foldID(node string, minute int64) string {
	return node + "/m" + strconv.FormatInt(minute, 10)
}

// atMost returns c with each part at most a fold's: governor.MaxCost,
// and maxMoneySum for its money.
func atMost(c governor.Cost) governor.Cost {
	return governor.Cost{Requests: min(c.Requests, governor.MaxCost), Input: min(c.Input, governor.MaxCost),
		Output: min(c.Output, governor.MaxCost), Money: min(c.Money, maxMoneySum)}
}

// checkLease returns an error naming what of req, whose Key is checked,
// must not be stored or granted on.
func checkLease(req store.LeaseRequest) error {
	if err := checkName("node", req.Node, store.MaxKeyBytes); err != nil {
		return err
	}
	if err := checkTime("time", req.At); err != nil {
		return err
	}
	if req.TTL < store.MinLeaseTTL || req.TTL > store.MaxLeaseTTL {
		return fmt.Errorf("TTL %s is out of range: want %s to %s", req.TTL, store.MinLeaseTTL, store.MaxLeaseTTL)
	}
	if err := checkCost("Want", req.Want); err != nil {
		return err
	}
	if err := checkCost("Min", req.Min); err != nil {
		return err
	}
	want, least := costParts(req.Want), costParts(req.Min)
	for i, p := range least {
		if p.n > want[i].n {
			return fmt.Errorf("%s.%s %d is over Want.%s %d", "Min", p.name, p.n, p.name, want[i].n)
		}
	}
	if err := checkPace(req); err != nil {
		return err
	}
	switch w := req.Weight; {
	case math.IsNaN(w) || math.IsInf(w, 0):
		return fmt.Errorf("weight %v is not a finite number", w)
	case w < 0:
		return fmt.Errorf("weight %v is negative", w)
	}
	if len(req.Flows) > store.MaxLeaseFlows {
		return fmt.Errorf("%d flows: at most %d", len(req.Flows), store.MaxLeaseFlows)
	}
	names := make([]string, 0, len(req.Flows))
	for f := range req.Flows {
		names = append(names, f)
	}
	sort.Strings(names) // the first bad one, the same on every run
	for _, f := range names {
		if err := checkName("flow", f, store.MaxKeyBytes); err != nil {
			return err
		}
		switch w := req.Flows[f]; {
		case math.IsNaN(w) || math.IsInf(w, 0) || w < 0:
			return fmt.Errorf("flow %q has weight %v: want a finite number ≥ 0", f, w)
		}
	}
	for lim := range governor.NumLimits {
		switch n := req.Limits[lim]; {
		case n < 0:
			return fmt.Errorf("limit %s %d is negative", lim, n)
		case lim.Budget() && n > store.MaxBudgetLimit:
			return fmt.Errorf("limit %s %d is over the bound of %d (store.MaxBudgetLimit)", lim, n, store.MaxBudgetLimit)
		case !lim.Budget() && n > governor.MaxCost:
			return fmt.Errorf("limit %s %d is over the bound of %d (governor.MaxCost)", lim, n, int64(governor.MaxCost))
		}
	}
	return nil
}

// checkPace returns an error naming what of req.Pace is out of range.
func checkPace(req store.LeaseRequest) error {
	p := req.Pace
	if p == nil {
		return nil
	}
	switch {
	case !(p.DayPace > 0 && p.DayPace <= 1):
		return fmt.Errorf("pace: day pace %v: want a number in (0, 1]", p.DayPace)
	case p.Burst < 0 || p.Burst > store.MaxDayBurst:
		return fmt.Errorf("pace: burst %s: want 0 to %s", p.Burst, store.MaxDayBurst)
	}
	if err := checkCost("Pace.Ahead", p.Ahead); err != nil {
		return err
	}
	ahead, want := costParts(p.Ahead), costParts(req.Want)
	for i, a := range ahead {
		if a.n > want[i].n {
			return fmt.Errorf("%s.%s %d is over Want.%s %d", "Pace.Ahead", a.name, a.n, a.name, want[i].n)
		}
	}
	return nil
}

// part is one part of a governor.Cost, by its field's name.
type part struct {
	name string
	n    int64
}

func costParts(c governor.Cost) [4]part {
	return [4]part{{"Requests", c.Requests}, {"Input", c.Input}, {"Output", c.Output}, {"Money", c.Money}}
}

// checkCost returns an error naming the first part of c, the cost what,
// that is negative or over governor.MaxCost.
func checkCost(what string, c governor.Cost) error {
	for _, p := range costParts(c) {
		switch {
		case p.n < 0:
			return fmt.Errorf("%s.%s %d is negative", what, p.name, p.n)
		case p.n > governor.MaxCost:
			return fmt.Errorf("%s.%s %d is over the bound of %d (governor.MaxCost)", what, p.name, p.n, int64(governor.MaxCost))
		}
	}
	return nil
}

// leaseID returns a new lease ID of node: node, "/" and 16 random hex
// digits. The node's name keeps the IDs of different nodes apart; of n
// leases of one node kept at once, two draw the same 64 bits by a chance
// of about n²/2^65, and then the primary key refuses the second: its
// TakeLease fails rather than lose a lease.
func leaseID(node string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return node + "/" + hex.EncodeToString(b[:])
}

// SettleLease implements store.Store.
func (l Leases) SettleLease(ctx context.Context, key, id string, used governor.Cost, last time.Time, final bool) error {
	op, err := named("settle lease", " on ", "key", key, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	if err := checkName("lease ID", id, store.MaxLeaseIDBytes); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	op = "settle lease " + id + " on " + key
	if err := checkCost("used", used); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := checkTime("time", last); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var n int64
	err = l.conn.InTx(ctx, func(tx store.Tx) error {
		state := 0 // as it was: open, or final if it was
		if final {
			state = 1
		}
		var was governor.Cost
		err := txQuery(tx)(ctx, l.sql["lease_granted"], []any{key, id}, func(r Row) error {
			return r.Scan(&was.Requests, &was.Input, &was.Output)
		})
		if err != nil {
			return err
		}
		res, err := tx.Exec(ctx, l.sql["settle_lease"], key, id, used.Requests, used.Input, used.Output, last.UnixMilli(), state, used.Money)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		// Each part only goes down: the room it gives back is the pace's.
		now := governor.Cost{Requests: min(was.Requests, used.Requests), Input: min(was.Input, used.Input), Output: min(was.Output, used.Output)}
		return l.giveBackPace(ctx, tx, key, was, now)
	})
	if err == nil && n == 0 {
		err = store.ErrNoLease
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// LeaseUse implements store.Store.
func (l Leases) LeaseUse(ctx context.Context, key string, at time.Time) (minute, day governor.Cost, err error) {
	op, err := named("read lease use", " of ", "key", key, store.MaxKeyBytes)
	if err != nil {
		return minute, day, err
	}
	if err := checkTime("time", at); err != nil {
		return minute, day, fmt.Errorf("%s: %w", op, err)
	}
	ms := at.UnixMilli()
	u, err := l.useByNode(ctx, l.conn.Query, key, ms-minuteMillis, ms-dayMillis, ms-minuteMillis, ms-dayMillis)
	if err != nil {
		return governor.Cost{}, governor.Cost{}, fmt.Errorf("%s: %w", op, err)
	}
	return u.minute, u.day, nil
}

// windowUse is what leases take in the windows of a minute, of the pace
// (see store.Paced), of a day and, of money only, of a month (as far back
// as useByNode was asked to read: no further than the day's without a
// budget per month).
type windowUse struct{ minute, pace, day, month governor.Cost }

// windows is u as store.GrantIn reads it.
func (u windowUse) windows() store.Windows {
	return store.Windows{Minute: u.minute, Day: u.day, Month: u.month}
}

// keyUse is what a key's leases take: all of them, and each node's.
type keyUse struct {
	windowUse
	of map[string]windowUse
}

// useByNode returns the sums of key's leases that count in the minute from
// minuteFrom, the day from dayFrom, the pace window from paceFrom (at or
// after dayFrom) and the month from monthFrom (at or before dayFrom; its
// money only), all of them and each node's. The sums of all saturate at
// the largest int64, which holds back every limit.
func (l Leases) useByNode(ctx context.Context, query queryFunc, key string, minuteFrom, dayFrom, paceFrom, monthFrom int64) (keyUse, error) {
	u := keyUse{of: map[string]windowUse{}}
	err := query(ctx, l.sql["lease_use_by_node"], []any{key, minuteFrom, dayFrom, paceFrom, monthFrom}, func(r Row) error {
		var node string
		var n windowUse
		if err := r.Scan(&node, &n.minute.Requests, &n.minute.Input, &n.minute.Output,
			&n.pace.Requests, &n.pace.Input, &n.pace.Output, &n.day.Requests, &n.day.Input, &n.day.Output, &n.day.Money,
			&n.month.Money); err != nil {
			return err
		}
		u.of[node] = n
		u.minute, u.day = saturatingAdd(u.minute, n.minute), saturatingAdd(u.day, n.day)
		u.pace, u.month = saturatingAdd(u.pace, n.pace), saturatingAdd(u.month, n.month)
		return nil
	})
	return u, err
}

// saturatingAdd returns a+b, each part at most the largest int64; the
// parts are at least 0.
func saturatingAdd(a, b governor.Cost) governor.Cost {
	sum := func(x, y int64) int64 {
		if x > math.MaxInt64-y {
			return math.MaxInt64
		}
		return x + y
	}
	return governor.Cost{Requests: sum(a.Requests, b.Requests), Input: sum(a.Input, b.Input), Output: sum(a.Output, b.Output), Money: sum(a.Money, b.Money)}
}

// PruneLeases implements store.Store.
func (l Leases) PruneLeases(ctx context.Context, key string, before time.Time) (int64, error) {
	op, err := named("prune leases", " of ", "key", key, store.MaxKeyBytes)
	if err != nil {
		return 0, err
	}
	var n int64
	err = l.conn.InTx(ctx, func(tx store.Tx) error {
		res, err := tx.Exec(ctx, l.sql["prune_leases"], key, before.UnixMilli())
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, l.sql["prune_lease_nodes"], key, before.UnixMilli()); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, l.sql["prune_node_flows"], key, before.UnixMilli())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return n, nil
}

// nodeWeight is a node's waiting weight as it gave it, the flows it has
// calls waiting for with their weights (nil when it did not say), and what
// it still wanted when it last asked.
type nodeWeight struct {
	node   string
	weight float64
	flows  map[string]float64
	want   governor.Cost
	// pacedOut is 1 when its last grant was cut on a paced day limit.
	pacedOut int64
}

// shares returns self's weight and each of the others', a flow that waits
// on several of the nodes counted in each of them at its weight divided by
// their number: so a flow whose calls wait on three nodes weighs what it
// would on one, and fairness across flows holds whatever node their calls
// wait on. A node that gave no flows counts at its weight.
func shares(self nodeWeight, others []nodeWeight) (own float64, rest []float64) {
	on := map[string]int{} // nodes a flow waits on
	for _, n := range append([]nodeWeight{self}, others...) {
		for f := range n.flows {
			on[f]++
		}
	}
	weight := func(n nodeWeight) float64 {
		if len(n.flows) == 0 {
			return n.weight
		}
		var w float64
		for f, fw := range n.flows {
			w += fw / float64(on[f])
		}
		return w
	}
	rest = make([]float64, len(others))
	for i, n := range others {
		rest[i] = weight(n)
	}
	return weight(self), rest
}
