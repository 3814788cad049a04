package backfill

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/store"
)

// startParts starts a part on each share free to go, taking turns from
// where the last start left off, until limit parts are going or the run has
// given out its calls. A share is free when items remain eligible in it and
// no part going holds an item of it, whichever split the part was started
// in. Each part is given an even part of the run's calls: enough that the
// run's calls last while limit parts go through them.
func (b *backfill) startParts(r *engine.Run, p *progress) error {
	per := min(max(1, (b.BatchesPerRun+p.limit-1)/p.limit), maxPartCalls)
	first := p.next
	for tried := 0; tried < p.of && len(p.going) < p.limit && p.handed < b.BatchesPerRun; tried++ {
		j := (first + tried) % p.of
		l := store.Lane{Of: p.of, Index: j}
		if !p.free(j) {
			continue
		}
		in := laneInput{RunID: r.ID(), Lane: l, After: p.after[j], Budget: min(per, b.BatchesPerRun-p.handed), Held: p.bound}
		part, err := engine.StartPart(r, lanePart, fmt.Sprintf("p%d-lane-%d", p.started, j), in)
		if err != nil {
			return err
		}
		p.started++
		p.handed += in.Budget
		p.going = append(p.going, goingPart{part: part, lane: l, run: r.ID(), budget: in.Budget})
		p.next = (j + 1) % p.of
	}
	b.win.shortOfItems(len(p.going) < p.limit && p.handed < b.BatchesPerRun || p.limit < p.window)
	return nil
}

// maxPartCalls bounds the calls one part is given, so that parts end, and
// the run sees how many calls to keep going, every few calls.
const maxPartCalls = 10

// free reports whether share j of the run's split may start: items remain
// eligible in it, and no part going holds an item of it.
func (p *progress) free(j int) bool {
	l := store.Lane{Of: p.of, Index: j}
	return !p.exhausted[j] && !slices.ContainsFunc(p.going, func(g goingPart) bool { return overlap(g.lane, l) })
}

// wantsMore reports whether the run would start another part now: it
// keeps fewer going than limit allows and has calls to give and a share
// free to go.
func (p *progress) wantsMore(limit, batchesPerRun int) bool {
	if len(p.going) >= limit || p.handed >= batchesPerRun {
		return false
	}
	if shares(limit) > p.of {
		return true // a finer split, with shares free
	}
	for j := range p.of {
		if p.free(j) {
			return true
		}
	}
	return false
}

// overlap reports whether shares a and b may hold the same item: an item
// whose lane is a.Index modulo a.Of and b.Index modulo b.Of. The zero Lane
// holds every item.
func overlap(a, b store.Lane) bool {
	if a.Of <= 0 || b.Of <= 0 {
		return true
	}
	g := gcd(a.Of, b.Of)
	return (a.Index-b.Index)%g == 0
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// collect waits for one or more of the parts going to end, as one step
// that also records how many calls to keep going from now on, and counts
// what each that ended did.
func (b *backfill) collect(r *engine.Run, p *progress, k int) error {
	ids := make([]string, len(p.going))
	for i, g := range p.going {
		ids[i] = g.part.ID()
	}
	// The wait also ends when the window has grown past the parts going,
	// so that a run whose parts each have calls to go grows with it.
	stopping := p.failure != nil || p.done
	sooner := func() bool { return !stopping && p.wantsMore(p.held(b.win.limit()), b.BatchesPerRun) }
	ended, limit, err := engine.PartsEnded(r, fmt.Sprintf("wait-%d", k), ids, b.win.limit, sooner)
	if err != nil {
		return err
	}
	p.reshape(limit)
	for _, id := range ended {
		i := slices.IndexFunc(p.going, func(g goingPart) bool { return g.part.ID() == id })
		if i < 0 {
			return fmt.Errorf("part %s ended, but it is not one of the run's", id)
		}
		g := p.going[i]
		out, err := g.part.Wait()
		if err != nil {
			// The run was cancelled, timed out, or lost: it stops here,
			// and a replay takes it from its last step.
			return err
		}
		var d laneDone
		if err := json.Unmarshal(out, &d); err != nil {
			return fmt.Errorf("read the result of part %s: %w", id, err)
		}
		p.going = slices.Delete(p.going, i, i+1)
		if g.run == r.ID() {
			// Batches it was given but did not go through go to the
			// next parts (a part recorded before Batches counts its
			// calls only).
			p.handed -= max(g.budget-max(d.Batches, d.Calls), 0)
		}
		p.add(g.run, g.lane, d)
	}
	return nil
}
