package gateway

import (
	"crypto/sha256"
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
// (governor.Governor.Await): it holds no body and no connection. At most
// max places are kept; the oldest is given up for a new one.
type places struct {
	mu    sync.Mutex
	max   int
	n     int // places kept
	byKey map[placeKey][]*place
	order []*place // in the order kept, for eviction; given-up entries are skipped
}

type placeKey [sha256.Size]byte

type place struct {
	key   placeKey
	res   *governor.Reservation
	until time.Time
	gone  bool // taken back, lapsed or evicted
}

func newPlaces(max int) *places {
	return &places{max: max, byKey: map[placeKey][]*place{}}
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

// keep keeps res's place for key until until.
func (p *places) keep(key placeKey, res *governor.Reservation, until time.Time, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune(now)
	for p.n > 0 && p.n >= p.max {
		p.evictOldest(now)
	}
	pl := &place{key: key, res: res, until: until}
	p.byKey[key] = append(p.byKey[key], pl)
	p.order = append(p.order, pl)
	p.n++
}

// take returns the oldest place kept for key, if any is still kept, and
// forgets it: one request takes one place.
func (p *places) take(key placeKey, now time.Time) *governor.Reservation {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.byKey[key]
	for len(list) > 0 {
		pl := list[0]
		list = list[1:]
		pl.gone = true
		p.n--
		if now.Before(pl.until) {
			p.set(key, list)
			return pl.res
		}
	}
	p.set(key, list)
	return nil
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

// evictOldest gives up the oldest place kept. p.mu is held.
func (p *places) evictOldest(now time.Time) {
	for len(p.order) > 0 {
		pl := p.order[0]
		p.order = p.order[1:]
		if !pl.gone {
			p.drop(pl, now)
			return
		}
	}
}

// drop forgets pl and gives its place in line up. p.mu is held.
func (p *places) drop(pl *place, now time.Time) {
	pl.gone = true
	p.n--
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
