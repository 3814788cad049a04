package governor

// The wait estimate counts the calls ahead of a call in fair order — every
// reservation waiting or parked, of every flow, with a start tag not after
// its own — so it must not look at every one of them. The governor keeps
// them in a treap ordered by (start tag, id), each node holding the sum of
// the costs under it: the sum of the calls ahead is one walk down the tree,
// and the first of them, in order, a walk along it. Each costs O(log n)
// expected for n reservations waiting. It is built at the first estimate
// and kept from then on: a governor no one asks for one, as the engine's
// and the bench's, keeps none, and its reservations carry a nil pointer
// where the node would be.

// aheadNode is a reservation's place in the treap (Governor.ahead): it is
// in it while it is waiting or parked.
type aheadNode struct {
	left, right *Reservation
	sum         Cost // of this subtree's costs
}

// aheadPrio is r's priority in the treap's heap order: its id mixed
// (splitmix64's finalizer), so that the tree's shape owes nothing to the
// order of the tags, and needs no room in the reservation.
func aheadPrio(r *Reservation) uint64 {
	z := r.id + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// aheadLess orders reservations by start tag, then by id.
func aheadLess(a, b *Reservation) bool {
	if a.start != b.start {
		return a.start < b.start
	}
	return a.id < b.id
}

func aheadSum(r *Reservation) Cost {
	if r == nil {
		return Cost{}
	}
	return r.node.sum
}

func (r *Reservation) fixSum() {
	r.node.sum = aheadSum(r.node.left).add(r.cost).add(aheadSum(r.node.right))
}

// aheadAdd puts waiting or parked r in the index, under its tags.
func (g *Governor) aheadAdd(r *Reservation) {
	if g.aheadOn {
		g.aheadPut(r)
	}
}

func (g *Governor) aheadPut(r *Reservation) {
	if r.node == nil {
		r.node = &aheadNode{}
	}
	*r.node = aheadNode{sum: r.cost}
	g.ahead = aheadInsert(g.ahead, r)
}

// aheadRemove takes r, which is in the index (waiting or parked), out of
// it: before its tags change, or when it leaves the line for good.
func (g *Governor) aheadRemove(r *Reservation) {
	if !g.aheadOn {
		return
	}
	g.ahead = aheadDelete(g.ahead, r)
	*r.node = aheadNode{}
}

func aheadInsert(t, x *Reservation) *Reservation {
	if t == nil {
		return x
	}
	if aheadPrio(x) > aheadPrio(t) {
		x.node.left, x.node.right = aheadSplit(t, x)
		x.fixSum()
		return x
	}
	if aheadLess(x, t) {
		t.node.left = aheadInsert(t.node.left, x)
	} else {
		t.node.right = aheadInsert(t.node.right, x)
	}
	t.fixSum()
	return t
}

// aheadSplit splits t into what orders before x and what orders after.
func aheadSplit(t, x *Reservation) (*Reservation, *Reservation) {
	if t == nil {
		return nil, nil
	}
	if aheadLess(t, x) {
		l, r := aheadSplit(t.node.right, x)
		t.node.right = l
		t.fixSum()
		return t, r
	}
	l, r := aheadSplit(t.node.left, x)
	t.node.left = r
	t.fixSum()
	return l, t
}

func aheadMerge(a, b *Reservation) *Reservation {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case aheadPrio(a) > aheadPrio(b):
		a.node.right = aheadMerge(a.node.right, b)
		a.fixSum()
		return a
	default:
		b.node.left = aheadMerge(a, b.node.left)
		b.fixSum()
		return b
	}
}

func aheadDelete(t, x *Reservation) *Reservation {
	if t == nil {
		return nil
	}
	if t == x {
		return aheadMerge(t.node.left, t.node.right)
	}
	if aheadLess(x, t) {
		t.node.left = aheadDelete(t.node.left, x)
	} else {
		t.node.right = aheadDelete(t.node.right, x)
	}
	t.fixSum()
	return t
}

// aheadStart builds the index, if it is not kept yet, of the reservations
// waiting or parked.
func (g *Governor) aheadStart() {
	if g.aheadOn {
		return
	}
	g.aheadOn = true
	for _, f := range g.flows {
		for _, list := range [2][]*Reservation{f.queue, f.parked} {
			for _, r := range list {
				g.aheadAdd(r)
			}
		}
	}
}

// aheadUpTo returns the sum of the costs of the reservations with a start
// tag not after start.
func (g *Governor) aheadUpTo(start float64) Cost {
	var c Cost
	for t := g.ahead; t != nil; {
		if t.start <= start {
			c = c.add(aheadSum(t.node.left)).add(t.cost)
			t = t.node.right
		} else {
			t = t.node.left
		}
	}
	return c
}

// aheadFirst appends to out, in order, the costs of the first reservations
// but skip with a start tag not after start, until out holds aheadWhole.
func aheadFirst(t *Reservation, start float64, skip *Reservation, out []Cost) []Cost {
	for t != nil && len(out) < aheadWhole {
		if t.start > start {
			t = t.node.left // nothing at or right of t is wanted
			continue
		}
		out = aheadFirst(t.node.left, start, skip, out)
		if len(out) == aheadWhole {
			break
		}
		if t != skip {
			out = append(out, t.cost)
		}
		t = t.node.right
	}
	return out
}
