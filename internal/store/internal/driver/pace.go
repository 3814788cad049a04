package driver

import (
	"context"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// dayLimits are the limits a shared pacer paces.
var dayLimits = [...]governor.Limit{governor.RPD, governor.TPD}

// paced reports whether req has its key's day limits paced by shared
// pacers (see store.LeasePace): a Burst, and a day limit to pace.
func paced(req store.LeaseRequest) bool {
	return req.Pace != nil && req.Pace.Burst > 0 && req.Pace.DayPace > 0 &&
		(req.Limits[governor.RPD] > 0 || req.Limits[governor.TPD] > 0)
}

// dayPacer is a day limit's shared pacer as a TakeLease finds it.
type dayPacer struct {
	store.Pacer
	found bool
	every float64 // nanoseconds per unit at the grant
}

// keyPacers are a key's shared pacers at a grant's time now (Unix
// nanoseconds), indexed by limit.
type keyPacers struct {
	now int64
	of  [governor.NumLimits]dayPacer
}

// pacers reads req.Key's shared pacers, in the transaction of a grant: a
// pacer not made yet starts now, with the burst in hand. Without pacing,
// none.
func (l Leases) pacers(ctx context.Context, tx store.Tx, req store.LeaseRequest) (keyPacers, error) {
	k := keyPacers{now: req.At.UnixNano()}
	if !paced(req) {
		return k, nil
	}
	var err error
	if k.of, err = l.readPacers(ctx, tx, req.Key); err != nil {
		return k, err
	}
	for _, lim := range dayLimits {
		p := &k.of[lim]
		if !p.found {
			p.TAT, p.Start = k.now, k.now
		}
		p.every = store.PaceEvery(req.Limits[lim], *req.Pace, p.Start, k.now)
	}
	return k, nil
}

// readPacers reads key's shared pacers in tx, by limit: those not made
// yet are not found.
func (l Leases) readPacers(ctx context.Context, tx store.Tx, key string) ([governor.NumLimits]dayPacer, error) {
	var of [governor.NumLimits]dayPacer
	err := txQuery(tx)(ctx, l.sql["lease_pacers"], []any{key}, func(r Row) error {
		var lim int64
		var p dayPacer
		if err := r.Scan(&lim, &p.TAT, &p.Start, &p.every); err != nil {
			return err
		}
		if lim == int64(governor.RPD) || lim == int64(governor.TPD) {
			p.found = true
			of[lim] = p
		}
		return nil
	})
	return of, err
}

// room returns the room each day limit's shared pacer leaves, by limit:
// unbounded where there is no pacer.
func (k keyPacers) room(req store.LeaseRequest) [governor.NumLimits]int64 {
	var room [governor.NumLimits]int64
	for l := range governor.NumLimits {
		room[l] = 1 << 62
	}
	if !paced(req) {
		return room
	}
	for _, lim := range dayLimits {
		if req.Limits[lim] > 0 {
			p := k.of[lim]
			room[lim] = store.PaceRoom(p.TAT, k.now, p.every, req.Pace.Burst)
		}
	}
	return room
}

// chargePacers charges grant to req.Key's shared pacers, in the
// transaction of the grant, and writes down those made by it.
func (l Leases) chargePacers(ctx context.Context, tx store.Tx, req store.LeaseRequest, k keyPacers, grant governor.Cost) error {
	if !paced(req) {
		return nil
	}
	for _, lim := range dayLimits {
		p := k.of[lim]
		n := grant.On(lim)
		if req.Limits[lim] <= 0 || (n == 0 && p.found) {
			continue
		}
		tat := store.PaceCharge(p.TAT, k.now, n, p.every)
		if _, err := tx.Exec(ctx, l.sql["record_lease_pacer"], req.Key, int64(lim), tat, p.Start, p.every); err != nil {
			return err
		}
	}
	return nil
}

// giveBackPace moves key's shared pacers back for what a lease that held
// was gives back by being settled at now, in the settling transaction.
func (l Leases) giveBackPace(ctx context.Context, tx store.Tx, key string, was, now governor.Cost) error {
	var back [governor.NumLimits]int64
	some := false
	for _, lim := range dayLimits {
		back[lim] = max(was.On(lim)-now.On(lim), 0)
		some = some || back[lim] > 0
	}
	if !some {
		return nil
	}
	pacers, err := l.readPacers(ctx, tx, key)
	if err != nil {
		return err
	}
	for _, lim := range dayLimits {
		if p := pacers[lim]; back[lim] > 0 && p.found && p.every > 0 {
			if _, err := tx.Exec(ctx, l.sql["give_back_pace"], key, int64(lim), store.PaceGiveBack(back[lim], p.every)); err != nil {
				return err
			}
		}
	}
	return nil
}

// pacedOut is 1 when grant, of req, is less than req wanted on a day limit
// the shared pacers pace, else 0 (see store.Claim's PacedOut).
func pacedOut(req store.LeaseRequest, grant governor.Cost) int64 {
	if !paced(req) {
		return 0
	}
	for _, lim := range dayLimits {
		if req.Limits[lim] > 0 && grant.On(lim) < req.Want.On(lim) {
			return 1
		}
	}
	return 0
}
