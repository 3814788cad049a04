package gateway

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// IdempotencyKeyHeader names a request for the gateway's kept places: a
// request sent again with the same key (and the same caller and flow) takes
// the place in line its earlier attempt kept. Without it, the same body
// names the request.
const IdempotencyKeyHeader = "Idempotency-Key"

// places keeps the places in line of requests answered 429 because their
// max wait ended, so that the same request sent again within
// Config.KeepPlace of its estimated admission goes back where it was instead
// of to the back of the line. A place is a parked governor reservation
// (governor.Governor.Await): it holds no body and no connection.
//
// A kept place counts ahead of the requests of its flow that came after it,
// so places are bounded per caller — a client key in a flow — as well as
// in all: at most perCaller for one caller, at most max in all.
// A place beyond either bound is not kept, and no kept place is given up
// for it: a caller that sends request after request it does not wait for
// neither takes another caller's place nor counts ahead of another caller
// by more than perCaller places. Its newest request is the one refused, not
// its oldest place: the oldest is the nearest to admission, and the
// refused request, sent again, goes to the back of the line behind the
// caller's kept ones, in the order it sent them.
type places struct {
	mu        sync.Mutex
	max       int
	perCaller int
	n         int // places kept
	byKey     map[placeKey][]*place
	held      map[caller]int // places kept by each caller
	order     []*place       // in the order kept, for pruning; given-up entries are skipped
}

type placeKey [sha256.Size]byte

// caller is who sends a request, and keeps its place: a client key, by its
// number (1 for Config.ClientKeys[0]; 0 for every caller when no keys are
// configured), in a flow.
type caller struct {
	client int
	flow   string
}

type place struct {
	key    placeKey
	caller caller
	t      *target // whose governor res is on
	res    *governor.Reservation
	until  time.Time
	gone   bool // taken back, lapsed or given up
}

func newPlaces(max, perCaller int) *places {
	return &places{max: max, perCaller: perCaller, byKey: map[placeKey][]*place{}, held: map[caller]int{}}
}

// keyOf names a request: its caller (the Authorization header, hashed with
// the rest), its flow, and its Idempotency-Key or else its body.
func keyOf(r *http.Request, flow string, body []byte) placeKey {
	h := sha256.New()
	h.Write([]byte(r.Header.Get("Authorization")))
	h.Write([]byte{0})
	h.Write([]byte(flow))
	h.Write([]byte{0})
	if k := r.Header.Get(IdempotencyKeyHeader); k != "" {
		h.Write([]byte("idempotency-key:"))
		h.Write([]byte(k))
	} else {
		h.Write([]byte("body:"))
		h.Write(body)
	}
	var k placeKey
	h.Sum(k[:0])
	return k
}

// empty reports whether no place is kept: a request then needs no key.
func (p *places) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byKey) == 0
}

// keep keeps res's place for key, held by who, until until. When who keeps
// perCaller places already, or max are kept in all, it keeps nothing and
// returns the bound that refused it, in words for the caller; res is then
// the caller's to cancel.
func (p *places) keep(key placeKey, who caller, res *governor.Reservation, until time.Time, now time.Time) string {
	return p.keepOn(key, who, nil, res, until, now)
}

// keepOn is keep for a place on target t's governor.
func (p *places) keepOn(key placeKey, who caller, t *target, res *governor.Reservation, until time.Time, now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune(now)
	switch {
	case p.held[who] >= p.perCaller:
		return fmt.Sprintf("this caller keeps %d places in line in flow %q already, the most one caller may", p.held[who], who.flow)
	case p.n >= p.max:
		return fmt.Sprintf("the gateway keeps %d places in line already, the most it may", p.n)
	}
	pl := &place{key: key, caller: who, t: t, res: res, until: until}
	p.byKey[key] = append(p.byKey[key], pl)
	p.order = append(p.order, pl)
	p.n++
	p.held[who]++
	return ""
}

// take returns the oldest place kept for key, if any is still kept, and
// forgets it: one request takes one place.
func (p *places) take(key placeKey, now time.Time) *governor.Reservation {
	res, _ := p.takeOn(key, now)
	return res
}

// takeOn is take, and says which target's governor the place is on (as
// keepOn was told).
func (p *places) takeOn(key placeKey, now time.Time) (*governor.Reservation, *target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.byKey[key]
	for len(list) > 0 {
		pl := list[0]
		list = list[1:]
		p.forget(pl)
		if now.Before(pl.until) {
			p.set(key, list)
			return pl.res, pl.t
		}
	}
	p.set(key, list)
	return nil, nil
}

func (p *places) set(key placeKey, list []*place) {
	if len(list) == 0 {
		delete(p.byKey, key)
	} else {
		p.byKey[key] = list
	}
}

// prune forgets lapsed places and compacts the order. p.mu is held.
func (p *places) prune(now time.Time) {
	live := p.order[:0]
	for _, pl := range p.order {
		if !pl.gone && !now.Before(pl.until) {
			p.drop(pl, now)
		}
		if !pl.gone {
			live = append(live, pl)
		}
	}
	clear(p.order[len(live):])
	p.order = live
}

// drop forgets pl and gives its place in line up. p.mu is held.
func (p *places) drop(pl *place, now time.Time) {
	p.forget(pl)
	pl.res.Cancel(now)
	list := p.byKey[pl.key]
	for i, q := range list {
		if q == pl {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	p.set(pl.key, list)
}

// forget counts pl as no longer kept. p.mu is held.
func (p *places) forget(pl *place) {
	pl.gone = true
	p.n--
	if p.held[pl.caller]--; p.held[pl.caller] <= 0 {
		delete(p.held, pl.caller)
	}
}
