package store

import (
	"cmp"
	"errors"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Leases: several processes share one provider key through the store. Each
// takes leases of the key's capacity (TakeLease) and admits calls only on
// the leases it holds; the leases that count in any window of a limit's
// period never sum to more than the limit, so neither do the calls of all
// the processes together. Leases whose use changes no more are folded, a
// row per node and minute, once no minute's window sees them (see
// Store.TakeLease): the sums only grow by it.

// The bounds of a lease's TTL (LeaseRequest.TTL).
const (
	MinLeaseTTL = time.Millisecond
	MaxLeaseTTL = time.Hour
)

// MaxLeaseIDBytes bounds a lease's ID: a node name of at most MaxKeyBytes,
// "/" and 16 hex digits (see Lease).
const MaxLeaseIDBytes = MaxKeyBytes + 17

// MaxLeaseFlows bounds LeaseRequest.Flows.
const MaxLeaseFlows = 1000

// MaxBudgetLimit bounds a budget's allowance among LeaseRequest.Limits
// (MPD, MPM): governor.MaxBudget in billionths, as governor.Budget.Limits
// makes it. A lease's money, as its other parts, is at most
// governor.MaxCost.
const MaxBudgetLimit = int64(governor.MaxBudget * governor.Nano)

// ErrNoLease is the error, wrapped, of SettleLease on a lease that is not
// recorded: never taken, on another key, pruned, or folded once final.
var ErrNoLease = errors.New("store: no such lease")

// LeaseRequest asks for capacity on a key shared by several processes.
type LeaseRequest struct {
	// Key is the provider key's name, as charges' keys are: required, at
	// most MaxKeyBytes of UTF-8 without NUL.
	Key string
	// Node is the asking process, unique among the live ones: required,
	// at most MaxKeyBytes of UTF-8 without NUL.
	Node string
	// At is the time on the asker's clock; the lease starts then. It is
	// stored, like every time of the store, in UTC at millisecond
	// precision. The zero time is refused.
	At time.Time
	// TTL is how long the lease lasts: it ends at At+TTL, TTL cut to the
	// millisecond. From MinLeaseTTL to MaxLeaseTTL.
	TTL time.Duration
	// Want is what the node's waiting calls need: requests, input and
	// output tokens and, on a priced key, money (their worst-case price);
	// Cached is not read.
	Want governor.Cost
	// Min is the smallest grant worth having (the node's first waiting
	// call): no part above Want's.
	Min governor.Cost
	// Weight is the node's waiting weight, the sum of its waiting flows'
	// weights: finite and at least 0.
	Weight float64
	// Flows, when given, are the flows the node has calls waiting for,
	// with their weights (each finite and at least 0; at most
	// MaxLeaseFlows, names at most MaxKeyBytes): TakeLease then weighs the
	// node by its flows, each flow that also waits on other live nodes
	// shared among them, so that fairness across flows holds whatever node
	// their calls wait on. Without Flows, the node weighs Weight.
	Flows map[string]float64
	// Limits is each limit's allowance, indexed by governor.Limit; 0: the
	// limit does not apply. Each from 0 to governor.MaxCost, but a budget
	// (MPD, MPM), in billionths of the unit of money, from 0 to
	// MaxBudgetLimit.
	Limits [governor.NumLimits]int64
	// Pace, when set with a Burst, has the key's day limits paced across
	// its processes by shared pacers (see LeasePace): every process of the
	// key must set it alike.
	Pace *LeasePace
}

// Lease is capacity granted to one process on a key.
type Lease struct {
	// ID is unique on its key: the node's name, "/" and 16 random hex
	// digits.
	ID   string
	Node string
	// Cost is what was granted, its Money too (0 on a key without a
	// price); after SettleLease, what was used.
	Cost governor.Cost
	// At is when it was granted, and Until when it ends; after
	// SettleLease, Until is when the last call on it was made. Both are
	// UTC at millisecond precision.
	At    time.Time
	Until time.Time
}

// NodeFlow is what a node of a cluster said of one of its flows on a key:
// the calls waiting in its line, and the calls admitted since the node
// started with the tokens charged to them, as settled.
type NodeFlow struct {
	Node, Flow        string
	Waiting, Admitted int64
	Input, Output     int64
	// At is when the node said it.
	At time.Time
}

// unbounded is the room on a limit that does not apply.
const unbounded = math.MaxInt64

// Claim is what another node waiting on the key asks of it, as TakeLease
// reads it from the store: Grant caps the asking node at its fair share
// only while the others ask for theirs.
type Claim struct {
	// Weight is the node's waiting weight (see LeaseRequest.Weight and
	// Flows): a claim whose weight is not above 0 counts for nothing.
	Weight float64
	// Minute and Day are what its leases take in the windows of a minute
	// and of a day, as Grant's minute and day are summed; Month what they
	// take in the window of a month (MPM's 30 days), of which only Money
	// is read, and as at least Day's.
	Minute, Day, Month governor.Cost
	// Want is what its waiting calls asked for at its last TakeLease,
	// granted or not: a node below its share so keeps room for one more
	// ask like its last.
	Want governor.Cost
	// Pace is what its leases take in the pace window (see Paced), on a
	// paced key; PacedOut that its last grant was cut on a paced day
	// limit: it wants more of the pace than it gets, and so claims all its
	// share of it, where a node that got what it asked claims only its use
	// and its ask, and leaves the rest of the pace to the others.
	Pace     governor.Cost
	PacedOut bool
}

// Grant returns what of req.Want a lease may grant, given minute and day,
// the sums of the key's leases that still count at req.At in a window of a
// minute and of a day (those with Until after At less the window), own, the
// same sums of the asking node's leases alone, and others, what the key's
// other live waiting nodes claim.
//
// The room on each limit that applies (req.Limits of it above 0) is the
// limit less what the sums of its period (minute or day, by Period) use of
// it (Cost.On), never below 0; a limit that does not apply leaves unbounded
// room. The node's fair share of each limit is found by water-filling the
// window: each other node claims what its leases take of the limit in the
// window plus what it last asked for; a level λ is found such that every node
// gets the lesser of its claim and its weight times λ, and these sum to the
// limit. The asking node's share is its weight times λ (so, when every
// other node claims at least its share, req.Weight over all the weights
// times the limit), and, when every other claim is met below the level,
// all that those claims leave. The grant is as much of Want as fits, on
// every limit, both the room and what is left of the node's share: the
// share cut to a whole number less what its own leases take of it. Shares
// are of the window, not of the room of the moment: when the key is
// saturated, the room that frees as the window slides goes to the nodes
// below their share, so each node's leases over the window follow its
// weight, whoever asks first; and room another node does not ask for is
// not held for it. Alone, a node's share is the whole limit. A node whose
// weight is 0 gets only what the others' claims leave. Except that a node
// with nothing of its own counting on a limit may always take Min there
// when Min fits the room, so that a call larger than its share still goes
// instead of starving. When Min does not fit every limit's bound, the
// grant is zero: a lease too small for the first waiting call is of no
// use. A zero Want grants zero.
//
// Requests are bounded by RPM and RPD, input by ITPM, output by OTPM, and
// input and output together by TPM and TPD. Where TPM or TPD binds, input
// and output share what it leaves in proportion to Want's input and
// output, each kept within its own bound and never below Min's.
//
// So the grant never exceeds Want in any part, nor the room on any limit:
// the sums with the grant added stay within every limit. Grant expects req
// as TakeLease accepts it; of parts out of range, it reads Want's as the
// nearest of 0 and governor.MaxCost, Min's as the nearest of 0 and Want's,
// a weight that is not above 0 as 0, and a claim's negative parts as 0. It
// has no side effects and does no arithmetic that can overflow.
//
// Money is bounded by the budgets, MPD and MPM, and granted as Want's
// when no budget applies, so that a priced call has room on the lease
// whatever its price. On a budget, a node below its share may also take
// Min when Min fits the room, though it goes past its share: one call is
// a large part of a budget, and the window a day or a month, so shares
// each cut to less than a call would leave the rest of the budget unspent
// and every node waiting until the window slides; past its share by at
// most one call, a node waits for the others to reach theirs. Grant reads a month's window (MPM's) as the day's,
// the least a month's use can be: GrantIn is given the month's.
func Grant(req LeaseRequest, minute, day, ownMinute, ownDay governor.Cost, others []Claim) governor.Cost {
	return GrantIn(req, Windows{minute, day, day}, Windows{ownMinute, ownDay, ownDay}, others, nil)
}

// GrantPaced is Grant on a paced key (req.Pace with a Burst): each day
// limit's grant is also bounded by paceShare's (the room its shared pacer
// leaves, and the asking node's share of the pace window), beyond which only
// req.Pace.Ahead goes; when Min does not fit that, the grant is zero.
func GrantPaced(req LeaseRequest, minute, day, ownMinute, ownDay governor.Cost, others []Claim, p Paced) governor.Cost {
	return GrantIn(req, Windows{minute, day, day}, Windows{ownMinute, ownDay, ownDay}, others, &p)
}

// Windows are what leases take in the window of each limit's period: a
// minute, a day, and a month (MPM's 30 days; only its Money is read, as at
// least the day's).
type Windows struct {
	Minute, Day, Month governor.Cost
}

// GrantIn is Grant, and GrantPaced when p is set, given the sums of the
// month's window too: all, the key's leases that count at req.At in each
// window, and own, the asking node's alone. A budget per month, MPM, is
// bounded by the month's sums, a budget per day, MPD, by the day's, as
// the day limits are.
func GrantIn(req LeaseRequest, all, own Windows, others []Claim, p *Paced) governor.Cost {
	if req.Pace == nil || req.Pace.Burst <= 0 || !(req.Pace.DayPace > 0) {
		p = nil
	}
	return grant(req, all, own, others, p)
}

// inWindow returns what w's sums of the period of l use of it: the
// month's is at least the day's, as the day's window lies within it.
func (w Windows) inWindow(l governor.Limit) int64 {
	switch l.Period() {
	case time.Minute:
		return w.Minute.On(l)
	case governor.Month:
		return max(w.Month.On(l), w.Day.On(l))
	default:
		return w.Day.On(l)
	}
}

// most is the largest of each part a lease may ask for or be granted.
var most = governor.Cost{Requests: governor.MaxCost, Input: governor.MaxCost, Output: governor.MaxCost, Money: governor.MaxCost}

func grant(req LeaseRequest, all, mine Windows, others []Claim, paced *Paced) governor.Cost {
	want := clampCost(req.Want, most)
	least := clampCost(req.Min, want)
	if want == (governor.Cost{}) {
		return governor.Cost{}
	}
	self, weights := weighOf(req.Weight, others)
	var bound [governor.NumLimits]int64 // of each limit: what the grant may use of it
	for l := range governor.NumLimits {
		limit := req.Limits[l]
		if limit <= 0 {
			bound[l] = unbounded
			continue
		}
		used, own := all.inWindow(l), mine.inWindow(l)
		// Both are at least 0: no overflow. A room over 2^62 holds any
		// grant and converts to and from float64 exactly.
		room := min(max(limit-max(used, 0), 0), 1<<62)
		need := least.On(l)
		if need > room {
			return governor.Cost{}
		}
		left := room
		if share := fairShare(l, limit, self, weights, others); share < limit {
			left = min(room, max(share-max(own, 0), 0))
			if own <= 0 || (l.Budget() && own < share) {
				// need fits the room (above): see Grant on Min.
				left = max(left, need)
			}
		}
		if need > left {
			return governor.Cost{} // its share of the window is taken: it waits for its own leases to age out
		}
		if paced != nil && (l == governor.RPD || l == governor.TPD) {
			pace := paceShare(l, limit, req, *paced, self, weights, others, need)
			if need > pace {
				return governor.Cost{} // the pace holds it back
			}
			left = min(left, pace)
		}
		bound[l] = left
	}
	g := governor.Cost{
		Requests: min(want.Requests, bound[governor.RPM], bound[governor.RPD]),
		Input:    min(want.Input, bound[governor.ITPM]),
		Output:   min(want.Output, bound[governor.OTPM]),
		Money:    min(want.Money, bound[governor.MPD], bound[governor.MPM]),
	}
	// Each part is at most MaxCost: the sum cannot overflow.
	if tokens := min(bound[governor.TPM], bound[governor.TPD]); g.Input+g.Output > tokens {
		g.Input, g.Output = split(tokens, g.Input, g.Output, least, want)
	}
	return g
}

// fairShare returns the asking node's share of limit l, of limit units, by
// water-filling (see Grant): self is its weight and weights the others',
// as weighOf scales them; others their claims. It is at most limit.
func fairShare(l governor.Limit, limit int64, self float64, weights []float64, others []Claim) int64 {
	use := func(c Claim) int64 { return Windows{c.Minute, c.Day, c.Month}.inWindow(l) }
	return share(limit, self, weights, others, use, l)
}

// share is fairShare over a window in which use says what each other
// node's leases take.
func share(limit int64, self float64, weights []float64, others []Claim, use func(Claim) int64, l governor.Limit) int64 {
	type claim struct{ w, c, per float64 } // per: claim per weight
	var cs []claim
	for i, o := range others {
		if !(weights[i] > 0) {
			continue
		}
		use := use(o)
		// Each part is cut to the limit: the sum of two is below 2^42 and
		// exact in float64 (a budget's, below 2^61, to a part in 2^52: the
		// share is a little off, never the room it is cut to).
		c := float64(min(max(use, 0), limit) + min(max(o.Want.On(l), 0), limit))
		cs = append(cs, claim{weights[i], c, c / weights[i]})
	}
	if len(cs) == 0 {
		return limit
	}
	// The claims met below the level, in the order of claim per weight:
	// each takes its claim, and the rest is shared by the weights left.
	slices.SortFunc(cs, func(a, b claim) int { return cmp.Compare(a.per, b.per) })
	rest, w := float64(limit), self
	for _, c := range cs {
		w += c.w
	}
	for _, c := range cs {
		if w > 0 && c.per > rest/w {
			// c and those after it claim more than the level: the
			// asking node gets its weight's part of what is left.
			v := self / w * rest
			if !(v > 0) {
				return 0
			}
			return min(int64(min(v, float64(limit))), limit)
		}
		rest, w = rest-c.c, w-c.w
	}
	return min(max(int64(rest), 0), limit) // every other claim met
}

// weighOf returns the asking node's weight and the others' claims'
// weights, each read as 0 when not above 0. When they sum to more than
// float64 holds, each is divided by the largest (and of those infinite
// themselves, each is 1 and the rest 0), so that sums stay finite.
func weighOf(self float64, others []Claim) (float64, []float64) {
	all := make([]float64, len(others)+1)
	for i, o := range others {
		all[i] = o.Weight
	}
	all[len(others)] = self
	var sum, top float64
	for i, w := range all {
		if !(w > 0) {
			all[i] = 0
		}
		sum += all[i]
		top = max(top, all[i])
	}
	if math.IsInf(sum, 1) {
		for i, w := range all {
			switch {
			case math.IsInf(top, 1):
				all[i] = 0
				if math.IsInf(w, 1) {
					all[i] = 1
				}
			default:
				all[i] = w / top
			}
		}
	}
	return all[len(others)], all[:len(others)]
}

// split shares tokens, the bound on input plus output, between input and
// output, each at most its own bound (in, out, whose sum is over tokens)
// and at least least's: in proportion to want's input and output where
// those bounds allow. least's input and output sum to at most tokens, and
// are at most in and out.
func split(tokens, in, out int64, least, want governor.Cost) (int64, int64) {
	// tokens < in+out <= want.Input+want.Output, so the quotient is below
	// want.Input and the 128-bit product's high word below the divisor.
	hi, lo := bits.Mul64(uint64(tokens), uint64(want.Input))
	q, _ := bits.Div64(hi, lo, uint64(want.Input+want.Output))
	input := int64(q)
	// The input that leaves output within its bounds, and input within its
	// own: a range that is never empty (see above).
	input = max(input, least.Input, tokens-out)
	input = min(input, in, tokens-least.Output)
	return input, tokens - input
}

// clampCost returns c with each part between 0 and that part of most
// (Cached is not a lease's: 0).
func clampCost(c, most governor.Cost) governor.Cost {
	return governor.Cost{
		Requests: min(max(c.Requests, 0), most.Requests),
		Input:    min(max(c.Input, 0), most.Input),
		Output:   min(max(c.Output, 0), most.Output),
		Money:    min(max(c.Money, 0), most.Money),
	}
}
