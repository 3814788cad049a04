package gateway

import (
	"container/heap"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/metrics"
)

// retries follows the requests the gateway answered 429 itself (their max
// wait ended, or the line was full) to tell, per flow and client key,
// whether each came back — the same caller sent the same request again,
// named as a kept place names it (keyOf) — within the window, or gave up.
// A batch client whose retry budget is shorter than the line burns its
// tries on 429s and then drops the request; its gave-up count says so.
//
// Memory is bounded: at most max refusals are followed at once. A refusal
// past that bound is counted as untracked — neither came back nor gave
// up — and nothing followed is dropped for it. Each followed refusal is a
// key, a caller and a time, about 100 bytes; the counts are one row per
// caller and flow, which are configured, so bounded too.
type retries struct {
	mu     sync.Mutex
	window time.Duration
	max    int
	byKey  map[placeKey][]*refusal // oldest first
	due    refusalHeap             // by until
	counts map[caller]*metrics.ClientRetries
}

// refusal is a request answered 429, followed until it comes back or until.
type refusal struct {
	key   placeKey
	who   caller
	until time.Time
	i     int // its index in due
}

func newRetries(window time.Duration, max int) *retries {
	return &retries{window: window, max: max, byKey: map[placeKey][]*refusal{}, counts: map[caller]*metrics.ClientRetries{}}
}

func (r *retries) row(who caller) *metrics.ClientRetries {
	c := r.counts[who]
	if c == nil {
		c = &metrics.ClientRetries{Flow: who.flow, Client: who.client}
		r.counts[who] = c
	}
	return c
}

// refused follows a request named key of caller who, answered 429 at now
// with retry-after after: it has the window from when it was told to come
// back. after is bounded by the window, so that a retry-after of hours
// does not hold the entry for hours.
func (r *retries) refused(key placeKey, who caller, after time.Duration, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	c := r.row(who)
	c.Refused++
	if len(r.due) >= r.max {
		c.Untracked++
		return
	}
	f := &refusal{key: key, who: who, until: now.Add(min(max(after, 0), r.window) + r.window)}
	r.byKey[key] = append(r.byKey[key], f)
	heap.Push(&r.due, f)
	c.Pending++
}

// arrived notes a request named key at now: if a refusal of the same
// request is followed, its oldest came back.
func (r *retries) arrived(key placeKey, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	list := r.byKey[key]
	if len(list) == 0 {
		return
	}
	f := list[0]
	r.forget(f)
	heap.Remove(&r.due, f.i)
	c := r.row(f.who)
	c.Pending--
	c.CameBack++
}

// expire counts the refusals whose window closed by now as given up.
// r.mu is held.
func (r *retries) expire(now time.Time) {
	for len(r.due) > 0 && !now.Before(r.due[0].until) {
		f := heap.Pop(&r.due).(*refusal)
		r.forget(f)
		c := r.row(f.who)
		c.Pending--
		c.GaveUp++
	}
}

// forget takes f out of byKey. r.mu is held.
func (r *retries) forget(f *refusal) {
	list := r.byKey[f.key]
	if i := slices.Index(list, f); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(r.byKey, f.key)
	} else {
		r.byKey[f.key] = list
	}
}

// snapshot returns every caller's counts at now, by flow, then client.
func (r *retries) snapshot(now time.Time) []metrics.ClientRetries {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	out := make([]metrics.ClientRetries, 0, len(r.counts))
	for _, c := range r.counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b metrics.ClientRetries) int {
		if c := strings.Compare(a.Flow, b.Flow); c != 0 {
			return c
		}
		return a.Client - b.Client
	})
	return out
}

// refusalHeap orders followed refusals by the end of their window.
type refusalHeap []*refusal

func (h refusalHeap) Len() int           { return len(h) }
func (h refusalHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h refusalHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *refusalHeap) Push(x any) {
	f := x.(*refusal)
	f.i = len(*h)
	*h = append(*h, f)
}
func (h *refusalHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return f
}
