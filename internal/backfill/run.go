package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/run"
)

// continuation is the data of the event that starts the run after one
// that handed on: where each of its lanes left off in the order of the
// pending items.
type continuation struct {
	After []store.Cursor `json:"after,omitempty"`
}

// run is one run of the backfill: batches until nothing is eligible or
// BatchesPerRun calls were made, InFlight of them going at once.
//
// The items are spread over lanes (store.Lane): the run goes through them
// in rounds, each of which starts a part per lane (runLane), a child
// workflow that selects, calls and saves its lane's batches one after
// another, and waits for them all. No two lanes ever hold the same item,
// so the batches going at once never share one, and each lane goes
// through its items in order with a cursor of its own. When every lane has
// run out of eligible items the run looks for new ones in the source once,
// and goes round again from the first item.
func (b *backfill) run(r *engine.Run, ev engine.Event) (any, error) {
	started, err := engine.Step(r, "start", func(context.Context) (time.Time, error) { return b.set.now().UTC(), nil })
	if err != nil {
		return nil, err
	}
	p := b.newProgress(r.ID(), ev, started)
	for round := 0; p.failure == nil && !p.done && p.calls < b.BatchesPerRun; round++ {
		if err := b.round(r, p, round); err != nil {
			return nil, err
		}
	}
	p.finish(b.BatchesPerRun)
	if err := b.record(r, ev, p); err != nil {
		return nil, err
	}
	if p.failure != nil {
		return p.rec, p.failure
	}
	return p.rec, nil
}

// progress is how far a run is: what it did so far, where each of its
// lanes is, and whether it is to stop.
type progress struct {
	rec       store.BackfillRun
	lanes     int
	after     []store.Cursor // each lane's cursor
	exhausted []bool         // nothing more was eligible in the lane, since the run last looked
	sv        saved
	calls     int

	failure    error  // what the run stopped on
	abort      string // the run's stop reason it gives
	discovered bool   // this run has looked for new items
	done       bool   // nothing was eligible, even after looking for new items
}

// newProgress is the progress of run runID, started at started by ev,
// before its first round: its lanes start where the run before it left
// off, if ev says where.
func (b *backfill) newProgress(runID string, ev engine.Event, started time.Time) *progress {
	p := &progress{
		rec: store.BackfillRun{RunID: runID, Backfill: b.ID, StartedAt: started, Rejected: map[string]int{}, Stopped: "done"},
		// As many lanes as batches may go at once, but no more than a
		// run's calls, so that each lane is given at least one call each
		// run.
		lanes: min(b.InFlight, b.BatchesPerRun),
	}
	var cont continuation
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &cont) != nil || len(cont.After) != p.lanes {
		cont = continuation{} // none, or another number of lanes: start from the first item
	}
	p.after = cont.After
	if p.after == nil {
		p.after = make([]store.Cursor, p.lanes)
	}
	p.exhausted = make([]bool, p.lanes)
	return p
}

// fail records err as what the run stops on.
func (p *progress) fail(err error) { p.failure, p.abort = err, abortReason(err) }

// add counts what lane j did in a round.
func (p *progress) add(j int, d laneDone) {
	p.after[j] = d.After
	p.rec.Selected += d.Selected
	p.rec.Retried += d.Retried
	p.sv.add(d.saved)
	p.calls += d.Calls
	p.exhausted[j] = d.Exhausted
	if d.Failed != "" && p.failure == nil {
		p.failure, p.abort = errors.New(d.Failed), d.Aborted
	}
}

// finish completes the run's record with what it did and why it stopped.
func (p *progress) finish(batchesPerRun int) {
	p.rec.Saved, p.rec.Parked = p.sv.Saved, p.sv.Parked
	maps.Copy(p.rec.Rejected, p.sv.Rejected)
	switch {
	case p.failure != nil:
		p.rec.Stopped = "aborted=" + p.abort
	case !p.done && p.calls >= batchesPerRun:
		p.rec.Stopped = "continued"
	}
}

// round is one round of the run: its lanes go through their items, and
// when every one has run out, the run looks for new items in the source
// (once) before the next round starts them from the first again.
func (b *backfill) round(r *engine.Run, p *progress, round int) error {
	if !b.peek(r, p, round) {
		return nil
	}
	if err := b.runLanes(r, p, round); err != nil {
		return err
	}
	if p.failure != nil || slices.Contains(p.exhausted, false) {
		return nil
	}
	if p.discovered {
		// Every lane ran out since the run looked: what the source has
		// now waits for the next run.
		p.done = true
		return nil
	}
	// Every lane ran out of the items known, or of those after its
	// cursor: look for new ones, then go round again from the first.
	if !b.look(r, p, round) {
		return nil
	}
	clear(p.after)
	clear(p.exhausted)
	return nil
}

// peek reports whether the round's lanes are to go: when every lane would
// start from the first item, it sees first whether there is any, so that
// a run with nothing to do starts no lane, and looks for new items in the
// source (once) when there is none.
func (b *backfill) peek(r *engine.Run, p *progress, round int) bool {
	if slices.ContainsFunc(p.after, func(c store.Cursor) bool { return !c.IsZero() }) {
		return true
	}
	found, err := engine.Step(r, fmt.Sprintf("peek-%d", round), func(ctx context.Context) (bool, error) {
		items, err := b.set.rec.NextItems(ctx, b.ID, b.set.now(), 1, store.Cursor{}, store.Lane{})
		return len(items) > 0, err
	})
	switch {
	case err != nil:
		p.fail(err)
	case found:
		return true
	case p.discovered:
		p.done = true
	default:
		b.look(r, p, round)
	}
	return false
}

// look looks for new items in the source; false if that failed.
func (b *backfill) look(r *engine.Run, p *progress, round int) bool {
	p.discovered = true
	if err := b.discover(r, round); err != nil {
		p.fail(err)
		return false
	}
	return true
}

// runLanes goes through the lanes not exhausted, what is left of the
// run's calls shared out among them, and counts what each did.
func (b *backfill) runLanes(r *engine.Run, p *progress, round int) error {
	var active []int // the lanes not exhausted
	for j := range p.lanes {
		if !p.exhausted[j] {
			active = append(active, j)
		}
	}
	budget := b.BatchesPerRun - p.calls
	var parts []*engine.Part
	var which []int // the lane of each of parts
	for k, j := range active {
		// The budget is shared out among them; a lane given none waits
		// for the next run, which gives each lane some.
		n := budget/len(active) + min(max(budget%len(active)-k, 0), 1)
		if n == 0 {
			continue
		}
		in := laneInput{RunID: r.ID(), Lane: store.Lane{Of: p.lanes, Index: j}, After: p.after[j], Budget: n}
		if p.lanes == 1 {
			// One lane needs no part: the run goes through it itself,
			// without a child workflow's writes.
			d, err := b.lane(r, fmt.Sprintf("r%d-", round), in)
			if err != nil {
				return err
			}
			p.add(j, d)
			return nil
		}
		part, err := engine.StartPart(r, lanePart, fmt.Sprintf("r%d-lane-%d", round, j), in)
		if err != nil {
			return err
		}
		parts, which = append(parts, part), append(which, j)
	}
	for k, part := range parts {
		out, err := part.Wait()
		if err != nil {
			// The run was cancelled, timed out, or lost: it stops here,
			// and a replay takes it from its last step.
			return err
		}
		var d laneDone
		if err := json.Unmarshal(out, &d); err != nil {
			return fmt.Errorf("read the result of lane %d: %w", which[k], err)
		}
		p.add(which[k], d)
	}
	return nil
}

// record records the run and its job's run, and starts the next run at
// once when this one handed on.
func (b *backfill) record(r *engine.Run, ev engine.Event, p *progress) error {
	rec := &p.rec
	_, err := engine.Step(r, "record", func(ctx context.Context) (struct{}, error) {
		rec.EndedAt = b.set.now().UTC()
		msg := ""
		if p.failure != nil {
			msg = p.failure.Error()
		}
		if err := b.set.rec.RecordBackfillRun(ctx, *rec); err != nil {
			return struct{}{}, err
		}
		if err := b.set.rec.RecordJobRun(ctx, b.ID, rec.EndedAt, msg); err != nil {
			return struct{}{}, err
		}
		b.set.log.Info("backfill run", "backfill", b.ID, "run", rec.RunID, "selected", rec.Selected, "retried", rec.Retried,
			"saved", rec.Saved, "rejected", formatRejected(rec.Rejected), "parked", rec.Parked, "stopped", rec.Stopped)
		if rec.Stopped == "continued" {
			// The next run starts now rather than at the next Poll, where
			// this one left off.
			data, err := json.Marshal(continuation{After: p.after})
			if err != nil {
				return struct{}{}, err
			}
			if _, err := b.set.e.Send(ctx, engine.Event{Name: EventName(b.ID), ID: nextEventID(ev.ID), Data: data}); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

// nextEventID names the event that starts the run after the one event id
// started: the first event of the chain and how many runs followed it
// ("titles@1700000000000/next-3"), so that run IDs stay as short as the
// first however long a backfill goes on. Named after the run's own ID, each
// continuation's ID grew by the run ID's prefix, and past about 25 runs
// (2,500 batches) it outgrew what the store records of a run.
func nextEventID(id string) string {
	n := 0
	if i := strings.LastIndex(id, "/next-"); i >= 0 {
		if k, err := strconv.Atoi(id[i+len("/next-"):]); err == nil && k > 0 {
			id, n = id[:i], k
		}
	}
	return id + "/next-" + strconv.Itoa(n+1)
}

// abortReason names why a run stopped early: the limit of a refusal, or
// the error.
func abortReason(err error) string {
	var se *run.StepError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s(%s)", se.Class, se.Message)
	}
	return err.Error()
}

// formatRejected prints rejections by reason as the run's log line shows
// them: {empty=2 not English=1}, reasons in order.
func formatRejected(m map[string]int) string {
	reasons := make([]string, 0, len(m))
	for r := range m {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s=%d", r, m[r])
	}
	return "{" + strings.Join(parts, " ") + "}"
}
