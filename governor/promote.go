package governor

import (
	"container/heap"
	"math"
	"time"
)

// The flow to promote (see Config.PromoteAfter) is asked for after every
// admission, so finding it must not cost a look at every waiting flow. A
// flow with calls waiting is in one of three places:
//
//   - fresh: a line, in time order, of the flows whose first call, or last
//     admission, is newer than PromoteAfter: most flows' calls are
//     admitted long before, and filing them costs an append. An entry whose
//     flow has changed since is skipped (its version is old), and the line
//     is compacted when such entries are half of it.
//   - early: flows that may not be promoted yet, by the time they may
//     (promoAt: their first call's wait since max(queued, last admission)
//     has reached both PromoteAfter and the time their share takes to earn
//     the call);
//   - due: flows that may be, by that since, then in fair order.
//
// A question moves the flows whose time has come from fresh to early and
// from early to due, and answers with due's first. The time a flow's share
// takes to earn its call grows with the sum of every flow's shares, which
// only grows (a flow, once known, stays), so a promoAt computed earlier is
// never later than the true one: a flow in early is never missed, and
// due's first is checked against the current sum before it is the answer
// (a flow no longer due goes back to early). Each flow is moved O(1) times
// per change of its line, each move costs O(log flows).

// promoIndex holds the flows with calls waiting for promoted.
type promoIndex struct {
	fresh []freshEntry // fresh[head:] are filed
	head  int
	stale int // entries of fresh[head:] whose flow changed since
	early earlyHeap
	due   dueHeap
}

// freshEntry is a flow filed in promoIndex.fresh at version ver, waiting
// for promotion since since.
type freshEntry struct {
	f     *flow
	ver   uint32
	since int64
}

// where a flow is in promoIndex.
const (
	promoNone uint8 = iota
	promoFresh
	promoEarly
	promoDue
)

// promoSince is when f's first waiting call started waiting for promotion:
// its queueing, or the flow's last admission if later.
func promoSince(f *flow) int64 { return max(f.queue[0].queued, f.lastAdmit) }

// promoReadyAt is the earliest time at which f may be promoted, as the sum
// of the flows' shares is now: never before PromoteAfter has passed since
// promoSince, nor before the flow's share has earned its first call.
func (g *Governor) promoReadyAt(f *flow) int64 {
	since := promoSince(f)
	earn := f.queue[0].size * g.shares / f.share * float64(time.Second)
	wait := int64(g.cfg.PromoteAfter)
	switch {
	case !(earn < 1<<62): // NaN too: never earned
		return never
	case earn > float64(wait):
		wait = int64(math.Ceil(earn))
	}
	return addSat(since, wait)
}

// mayPromote is promoted's test of one flow: its first call has waited
// PromoteAfter, and as long as its share takes to earn it.
func (g *Governor) mayPromote(now int64, f *flow) bool {
	since := promoSince(f)
	if since > now-int64(g.cfg.PromoteAfter) {
		return false
	}
	earn := f.queue[0].size * g.shares / f.share * float64(time.Second)
	return float64(now-since) >= earn
}

// promoUpdate files f again after its line or its last admission changed
// at now: out of the index when its line is empty. The usual case — a
// flow whose calls were all admitted soon after they were queued — only
// marks its entry in fresh as old.
func (g *Governor) promoUpdate(f *flow, now int64) {
	if len(f.queue) == 0 && f.promoIn == promoFresh {
		// Its entry is old from now on: promoRefile moves the version on
		// before it files the flow again.
		f.promoIn = promoNone
		g.promo.stale++
		return
	}
	g.promoRefile(f, now)
}

// promoRefile is promoUpdate's general case.
func (g *Governor) promoRefile(f *flow, now int64) {
	x := &g.promo
	switch f.promoIn {
	case promoFresh:
		x.stale++
	case promoEarly:
		heap.Remove(&x.early, int(f.promoPos))
	case promoDue:
		heap.Remove(&x.due, int(f.promoPos))
	}
	f.promoIn = promoNone
	f.promoVer++
	if len(f.queue) == 0 {
		x.compact()
		return
	}
	f.promoSince = promoSince(f)
	if f.promoSince >= now && (len(x.fresh) == x.head || x.fresh[len(x.fresh)-1].since <= f.promoSince) {
		// It waits from now on: in time order behind the other fresh ones.
		x.fresh = append(x.fresh, freshEntry{f: f, ver: f.promoVer, since: f.promoSince})
		f.promoIn = promoFresh
		x.compact()
		return
	}
	f.promoAt = g.promoReadyAt(f)
	heap.Push(&x.early, f)
}

// compact drops the entries of fresh taken or whose flows changed since,
// once they are half of it: fresh holds O(flows waiting) entries.
func (x *promoIndex) compact() {
	if x.stale+x.head <= 64 || 2*(x.stale+x.head) < len(x.fresh) {
		return
	}
	if x.stale == len(x.fresh)-x.head {
		// All changed since: no flow to look at (the usual case, where
		// calls are admitted soon after they are queued).
		clear(x.fresh)
		x.fresh, x.head, x.stale = x.fresh[:0], 0, 0
		return
	}
	kept := x.fresh[:0]
	for _, e := range x.fresh[x.head:] {
		if e.f.promoIn == promoFresh && e.f.promoVer == e.ver {
			kept = append(kept, e)
		}
	}
	clear(x.fresh[len(kept):])
	x.fresh = kept
	x.head = 0
	x.stale = 0
}

// promotedNow reports whether f is the flow promoted (see promoted) as of
// the governor's last question.
func (g *Governor) promotedNow(f *flow) bool {
	d := g.promo.due.flows
	return len(d) > 0 && d[0] == f
}

// promoted returns the flow whose first waiting call has gone longest
// without the flow getting a call admitted, if that is at least
// PromoteAfter and at least the time its share of the key takes to earn
// the call (its size ÷ its fraction of all flows' shares): a flow is never
// promoted to more than its share. Of flows that have waited as long, the
// first in fair order. nil if there is none.
func (g *Governor) promoted(now int64) *flow {
	if g.cfg.PromoteAfter < 0 {
		return nil
	}
	x := &g.promo
	limit := now - int64(g.cfg.PromoteAfter)
	for x.head < len(x.fresh) && x.fresh[x.head].since <= limit {
		e := x.fresh[x.head]
		x.fresh[x.head] = freshEntry{}
		x.head++
		if e.f.promoIn != promoFresh || e.f.promoVer != e.ver {
			x.stale--
			continue
		}
		e.f.promoAt = g.promoReadyAt(e.f)
		heap.Push(&x.early, e.f)
	}
	x.compact()
	for len(x.early.flows) > 0 && x.early.flows[0].promoAt <= now {
		f := heap.Pop(&x.early).(*flow)
		heap.Push(&x.due, f)
	}
	for len(x.due.flows) > 0 {
		f := x.due.flows[0]
		if g.mayPromote(now, f) {
			return f
		}
		// The sum of the shares grew since its time was computed.
		heap.Pop(&x.due)
		f.promoAt = max(g.promoReadyAt(f), now+1)
		heap.Push(&x.early, f)
	}
	return nil
}

// earlyHeap orders flows by promoAt.
type earlyHeap struct{ flows []*flow }

func (h *earlyHeap) Len() int           { return len(h.flows) }
func (h *earlyHeap) Less(i, j int) bool { return h.flows[i].promoAt < h.flows[j].promoAt }
func (h *earlyHeap) Swap(i, j int)      { swapPromo(h.flows, i, j) }
func (h *earlyHeap) Push(x any)         { h.flows = pushPromo(h.flows, x.(*flow), promoEarly) }
func (h *earlyHeap) Pop() any           { var f *flow; h.flows, f = popPromo(h.flows); return f }

// dueHeap orders flows by promoSince, then in fair order.
type dueHeap struct{ flows []*flow }

func (h *dueHeap) Len() int { return len(h.flows) }
func (h *dueHeap) Less(i, j int) bool {
	a, b := h.flows[i], h.flows[j]
	if a.promoSince != b.promoSince {
		return a.promoSince < b.promoSince
	}
	return (*flowHeap)(nil).less(a, b)
}
func (h *dueHeap) Swap(i, j int) { swapPromo(h.flows, i, j) }
func (h *dueHeap) Push(x any)    { h.flows = pushPromo(h.flows, x.(*flow), promoDue) }
func (h *dueHeap) Pop() any      { var f *flow; h.flows, f = popPromo(h.flows); return f }

func swapPromo(fs []*flow, i, j int) {
	fs[i], fs[j] = fs[j], fs[i]
	fs[i].promoPos = int32(i)
	fs[j].promoPos = int32(j)
}

func pushPromo(fs []*flow, f *flow, in uint8) []*flow {
	f.promoPos = int32(len(fs))
	f.promoIn = in
	return append(fs, f)
}

func popPromo(fs []*flow) ([]*flow, *flow) {
	n := len(fs) - 1
	f := fs[n]
	fs[n] = nil
	f.promoIn = promoNone
	f.promoPos = -1
	return fs[:n], f
}
