package store

import (
	"errors"
	"math"
	"math/bits"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Leases: several processes share one provider key through the store. Each
// takes leases of the key's capacity (TakeLease) and admits calls only on
// the leases it holds; the leases that count in any window of a limit's
// period never sum to more than the limit, so neither do the calls of all
// the processes together.

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

// ErrNoLease is the error, wrapped, of SettleLease on a lease that is not
// recorded: never taken, on another key, or pruned.
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
	// Want is what the node's waiting calls need.
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
	// limit does not apply. Each from 0 to governor.MaxCost.
	Limits [governor.NumLimits]int64
}

// Lease is capacity granted to one process on a key.
type Lease struct {
	// ID is unique on its key: the node's name, "/" and 16 random hex
	// digits.
	ID   string
	Node string
	// Cost is what was granted; after SettleLease, what was used.
	Cost governor.Cost
	// At is when it was granted, and Until when it ends; after
	// SettleLease, Until is when the last call on it was made. Both are
	// UTC at millisecond precision.
	At    time.Time
	Until time.Time
}

// unbounded is the room on a limit that does not apply.
const unbounded = math.MaxInt64

// Grant returns what of req.Want a lease may grant, given minute and day,
// the sums of the key's leases that still count at req.At in a window of a
// minute and of a day (those with Until after At less the window), own, the
// same sums of the asking node's leases alone, and others, the sum of the
// weights of the key's other live nodes.
//
// The room on each limit that applies (req.Limits of it above 0) is the
// limit less what the sums of its period (minute or day, by Period) use of
// it (Cost.On), never below 0; a limit that does not apply leaves unbounded
// room. The node's fair share is s = 1 when others is 0, else req.Weight /
// (req.Weight + others): a node whose weight is 0 gets no share while
// others wait. The grant is as much of Want as fits, on every limit, both
// the room and what is left of the node's share of the window: s times the
// limit (cut to a whole number) less what its own leases take of it. Shares
// are of the window, not of the room of the moment: when the key is
// saturated, the room that frees as the window slides goes to the nodes
// below their share, so each node's leases over the window follow its
// weight, whoever asks first. Alone, a node's share is the whole limit.
// Except that a node with nothing of its own counting on a limit may always
// take Min there when Min fits the room, so that a call larger than its
// share still goes instead of starving. When Min does not fit every
// limit's bound, the grant is zero: a lease too small for the first
// waiting call is of no use. A zero Want grants zero.
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
// and a weight or others that is not above 0 as 0. It has no side effects
// and does no arithmetic that can overflow.
func Grant(req LeaseRequest, minute, day, ownMinute, ownDay governor.Cost, others float64) governor.Cost {
	want := clampCost(req.Want, governor.Cost{Requests: governor.MaxCost, Input: governor.MaxCost, Output: governor.MaxCost})
	least := clampCost(req.Min, want)
	if want == (governor.Cost{}) {
		return governor.Cost{}
	}
	s := share(req.Weight, others)
	var bound [governor.NumLimits]int64 // of each limit: what the grant may use of it
	for _, l := range governor.AllLimits {
		limit := req.Limits[l]
		if limit <= 0 {
			bound[l] = unbounded
			continue
		}
		used, own := minute.On(l), ownMinute.On(l)
		if l.Period() > time.Minute {
			used, own = day.On(l), ownDay.On(l)
		}
		// Both are at least 0: no overflow. A room over 2^62 holds any
		// grant and converts to and from float64 exactly.
		room := min(max(limit-max(used, 0), 0), 1<<62)
		need := least.On(l)
		if need > room {
			return governor.Cost{}
		}
		left := room // alone: the whole room
		if s < 1 {
			left = min(room, max(int64(s*float64(limit))-max(own, 0), 0))
			if own <= 0 {
				left = max(left, need)
			}
		}
		if need > left {
			return governor.Cost{} // its share of the window is taken: it waits for its own leases to age out
		}
		bound[l] = left
	}
	g := governor.Cost{
		Requests: min(want.Requests, bound[governor.RPM], bound[governor.RPD]),
		Input:    min(want.Input, bound[governor.ITPM]),
		Output:   min(want.Output, bound[governor.OTPM]),
	}
	// Each part is at most MaxCost: the sum cannot overflow.
	if tokens := min(bound[governor.TPM], bound[governor.TPD]); g.Input+g.Output > tokens {
		g.Input, g.Output = split(tokens, g.Input, g.Output, least, want)
	}
	return g
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

// share returns the node's fair share of the room, s of Grant.
func share(weight, others float64) float64 {
	switch {
	case !(others > 0): // NaN too
		return 1
	case !(weight > 0):
		return 0
	}
	s := weight / (weight + others)
	if math.IsInf(weight+others, 1) {
		// Weights near the largest float64: the same ratio, without the
		// sum.
		s = 1 / (1 + others/weight)
	}
	if !(s >= 0) { // both infinite
		return 0
	}
	return min(s, 1)
}

// clampCost returns c with each part between 0 and that part of most.
func clampCost(c, most governor.Cost) governor.Cost {
	return governor.Cost{
		Requests: min(max(c.Requests, 0), most.Requests),
		Input:    min(max(c.Input, 0), most.Input),
		Output:   min(max(c.Output, 0), most.Output),
	}
}
