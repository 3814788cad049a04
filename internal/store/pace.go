package store

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Day pacing across processes. One process paces each day limit (RPD,
// TPD) itself, spending it at an even rate with a burst ahead (see
// governor.Config.DayBurst); N processes pacing each on its own would spend
// a day N times as fast. So a key several processes share has one pacer
// per day limit in the store, which every lease of the limit is charged to
// as it is granted, and given back to as its unused room is settled: the
// processes together spend the day at the pace one would. The pacer is the
// governor's (GCRA): a theoretical arrival time (TAT) that each unit
// granted moves on by the limit's period over limit × DayPace, and a grant
// may take what keeps the TAT at most the burst ahead of now. A pacer made
// now starts with the burst in hand and, as the governor's does, pays it
// back over its first day, running at day/(day+burst) of the even pace.
// Shares of the pace between the processes follow their weights as the
// windows' shares do (see Grant), over a window of an hour and the burst.

// MaxDayBurst bounds LeasePace.Burst: a day, as the governor's DayBurst.
const MaxDayBurst = 24 * time.Hour

// LeasePace is how a key's day limits are paced (LeaseRequest.Pace).
type LeasePace struct {
	// DayPace is the fraction of each day limit's even rate that pacing
	// aims at: in (0, 1].
	DayPace float64
	// Burst is how far ahead of the even pace the key may run, from 0 to
	// MaxDayBurst; 0: the day limits are not paced.
	Burst time.Duration
	// Ahead is the part of Want whose calls may run ahead of the pace: a
	// priority flow's calls on its credit and the retries of failed calls
	// (see governor.Config.DayBurst). It is granted beyond the pacers'
	// room, and charged to them. No part above Want's.
	Ahead governor.Cost
}

// Pacer is a day limit's shared pacer as the store keeps it: its TAT and
// when it was made, both Unix nanoseconds.
type Pacer struct {
	TAT, Start int64
}

// Paced is what a grant on a paced key (LeaseRequest.Pace with a Burst)
// also weighs: what the key's leases take in the hour and the burst before
// it, all of them and the asking node's, and the room each day limit's
// shared pacer leaves (indexed by governor.Limit; see PaceRoom).
type Paced struct {
	Window, Own governor.Cost
	Room        [governor.NumLimits]int64
}

// PaceWindow is the window over which a paced key's processes share the
// pace: an hour and the burst.
func PaceWindow(burst time.Duration) time.Duration { return time.Hour + burst }

// PaceEvery returns the nanoseconds each unit of a day limit of limit
// units adds to its shared pacer made at start, at now: the day over
// limit × DayPace, and, in the pacer's first day, (day+burst)/day of that
// while it pays back the burst it started with.
func PaceEvery(limit int64, p LeasePace, start, now int64) float64 {
	day := float64(24 * time.Hour)
	every := day / (float64(max(limit, 1)) * p.DayPace)
	if now-start < int64(24*time.Hour) {
		every *= (day + float64(p.Burst)) / day
	}
	return every
}

// PaceRoom returns how many units a pacer at tat, each worth every
// nanoseconds, lets be granted at now with a burst: what keeps its TAT at
// most the burst ahead of now, at least 0.
func PaceRoom(tat, now int64, every float64, burst time.Duration) int64 {
	ahead := float64(max(tat, now)-now) - float64(burst)
	if ahead >= 0 || !(every > 0) {
		return 0
	}
	return int64(min(-ahead/every, 1<<62))
}

// PaceCharge returns tat moved on by n units worth every nanoseconds each,
// from now at the earliest; it saturates at the largest int64.
func PaceCharge(tat, now int64, n int64, every float64) int64 {
	d := float64(n) * every
	from := max(tat, now)
	if d >= float64(math.MaxInt64-from) {
		return math.MaxInt64
	}
	return from + int64(d)
}

// PaceGiveBack returns how many nanoseconds a pacer moves back for n units
// worth every nanoseconds each, given back: at most two days, more than
// any pacer runs ahead.
func PaceGiveBack(n int64, every float64) int64 {
	return int64(min(float64(max(n, 0))*every, float64(48*time.Hour)))
}

// paceShare returns what the asking node may take of paced day limit l
// (limit units): the lesser of the shared pacer's room and what is left
// of its share of the pace window, by water-filling as Grant's windows,
// each node's use the sum of its leases in the window (all its share for
// a node paced out, see Claim); and beyond that,
// what its calls that may run ahead need. need is the smallest grant worth
// having (Min's part): a node with nothing of its own in the window may
// always take it, as in a window.
func paceShare(l governor.Limit, limit int64, req LeaseRequest, p Paced, self float64, weights []float64, others []Claim, need int64) int64 {
	pace := req.Pace
	budget := max(int64(float64(limit)*pace.DayPace*float64(PaceWindow(pace.Burst))/float64(24*time.Hour)), 1)
	left := p.Room[l]
	use := func(c Claim) int64 {
		if c.PacedOut {
			return budget
		}
		return c.Pace.On(l)
	}
	if share := share(budget, self, weights, others, use, l); share < budget {
		own := max(p.Own.On(l), 0)
		fair := max(share-own, 0)
		if own <= 0 {
			fair = max(fair, need)
		}
		left = min(left, fair)
	}
	return min(left+min(max(pace.Ahead.On(l), 0), limit), 1<<62)
}
