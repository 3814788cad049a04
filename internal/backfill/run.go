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
// that handed on: where each share of the items was in the order of the
// pending items, and the parts still going, which the next run waits for
// as for its own, with the records of the runs that started them, which it
// adds what they did to.
type continuation struct {
	// Of is how many shares After is for (0: as many as it has).
	Of        int                 `json:"of,omitempty"`
	After     []store.Cursor      `json:"after,omitempty"`
	Exhausted []bool              `json:"exhausted,omitempty"`
	Next      int                 `json:"next,omitempty"`
	Going     []going             `json:"going,omitempty"`
	Runs      []store.BackfillRun `json:"runs,omitempty"`
}

// going is a part still going that a run hands on to the next.
type going struct {
	ID   string     `json:"id"`
	Lane store.Lane `json:"lane"`
	Run  string     `json:"run"` // the run that started it
}

// run is one run of the backfill: batches until nothing is eligible or
// its parts were given BatchesPerRun calls, as many going at once as the
// backfill's window allows.
//
// The items are spread over lanes (store.Lane), and the lanes over shares
// (lanes modulo a power of two, as many as calls may go at once): the run
// starts a part per share (runLane), a child workflow that selects, calls
// and saves its share's batches one after another, and starts the next as
// soon as one ends, never two on shares that hold the same item. A run that
// has given out its calls ends and hands the parts still going on to the
// next run, so that calls keep going across runs. When every share has run
// out of eligible items the run looks for new ones in the source once, and
// goes round again from the first item.
func (b *backfill) run(r *engine.Run, ev engine.Event) (any, error) {
	started, err := engine.Step(r, "start", func(context.Context) (time.Time, error) { return b.set.now().UTC(), nil })
	if err != nil {
		return nil, err
	}
	if len(ev.Data) == 0 {
		// Not a continuation: when a run is in line, which may be one an
		// earlier run handed its parts going on to, this one leaves the
		// items to it. Runs go one at a time, so a run in line has not
		// started; were this one to go, it would start parts on items those
		// parts hold.
		ahead, err := engine.Step(r, "in-line", func(ctx context.Context) (string, error) {
			runs, err := b.set.e.Runs(ctx, engine.RunFilter{Function: FunctionID(b.ID), Status: run.Queued, Limit: 1})
			if err != nil || len(runs) == 0 {
				return "", err
			}
			return runs[0].ID, nil
		})
		if err != nil {
			return nil, err
		}
		if ahead != "" {
			return store.BackfillRun{RunID: r.ID(), Backfill: b.ID, StartedAt: started, EndedAt: started, Stopped: "left to " + ahead}, nil
		}
	}
	limit, err := engine.Step(r, "in-flight", func(context.Context) (int, error) { return b.win.limit(), nil })
	if err != nil {
		return nil, err
	}
	p, err := b.newProgress(r, ev, started, limit)
	if err != nil {
		return nil, err
	}
	if _, err := b.bound(r, p, "eligible"); err != nil {
		return nil, err
	}
	for k := 0; ; k++ {
		more, err := b.advance(r, p, k)
		if err != nil {
			return nil, err
		}
		if !more {
			break
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

// progress is how far a run is: what it did so far, where each share of
// the items is, the parts going, and whether it is to stop.
type progress struct {
	rec       store.BackfillRun
	limit     int            // calls to keep going at once, as last recorded
	of        int            // shares of the items, a power of two
	after     []store.Cursor // each share's cursor
	exhausted []bool         // nothing more was eligible in the share, since the run last looked
	next      int            // the share to start first, next time
	bound     int            // calls the eligible items can keep going; 0: any number
	window    int            // calls the window would keep going, as last recorded
	going     []goingPart    // parts going, this run's and those handed on to it
	// origins are the records of the earlier runs whose parts were handed
	// on to this one: what those parts did counts in their runs' records,
	// not this one's, as it does in their items' records.
	origins  map[string]*store.BackfillRun
	credited map[string]bool // origins whose records this run adds to
	started  int             // parts this run started
	handed   int             // calls this run gave its parts
	sv       saved
	calls    int

	failure    error  // what the run stopped on
	abort      string // the run's stop reason it gives
	discovered bool   // this run has looked for new items
	done       bool   // nothing was eligible, even after looking for new items
}

// goingPart is a part going, the share it goes through, the run that
// started it, and the calls it was given.
type goingPart struct {
	part   *engine.Part
	lane   store.Lane
	run    string
	budget int
}

// newProgress is the progress of run runID, started at started by ev,
// keeping limit calls going: its shares start where the run before it
// left off, if ev says where, and it waits for the parts that run handed
// on.
func (b *backfill) newProgress(r *engine.Run, ev engine.Event, started time.Time, limit int) (*progress, error) {
	p := &progress{
		rec:      store.BackfillRun{RunID: r.ID(), Backfill: b.ID, StartedAt: started, Rejected: map[string]int{}, Stopped: "done"},
		limit:    limit,
		window:   limit,
		of:       shares(limit),
		origins:  map[string]*store.BackfillRun{},
		credited: map[string]bool{},
	}
	var cont continuation
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &cont) != nil {
		cont = continuation{}
	}
	if cont.Of == 0 {
		cont.Of = len(cont.After)
	}
	p.reset()
	if of := cont.Of; of > 0 && of <= store.MaxLanes && of&(of-1) == 0 && len(cont.After) == of {
		// It goes on in the split the run before it left off in, where
		// each share is, which shares ran out and which is next; the run
		// splits anew only if the calls it keeps going need (reshape).
		// Else (a split of an older version): from the first item.
		p.of, p.after, p.next = of, cont.After, cont.Next%of
		p.exhausted = make([]bool, of)
		if len(cont.Exhausted) == of {
			p.exhausted = cont.Exhausted
		}
	}
	for _, rec := range cont.Runs {
		p.origins[rec.RunID] = &rec
	}
	if len(ev.Data) == 0 {
		// No run handed on to this one, yet parts of earlier runs may go
		// on: those of a run that ended before it handed on (cancelled,
		// or replayed by a build whose steps differ). It takes them on.
		found, err := engine.PartsGoing(r, "parts-going")
		if err != nil {
			return nil, err
		}
		for _, g := range found {
			var in laneInput
			if json.Unmarshal(g.Input, &in) != nil {
				in.Lane = store.Lane{} // unknown: it may hold any item
			}
			cont.Going = append(cont.Going, going{ID: g.ID, Lane: in.Lane, Run: g.Run})
		}
	}
	for _, g := range cont.Going {
		part, err := engine.PartOf(r, g.ID)
		if err != nil {
			return nil, err
		}
		p.going = append(p.going, goingPart{part: part, lane: g.Lane, run: g.Run})
	}
	return p, nil
}

// shares is how many shares the items are split into for limit calls at
// once: a power of two, so that a share of one split is the union of
// shares of any finer one, and twice limit, at most store.MaxLanes, so
// that half the shares are free to start while the parts going hold the
// others: when limit grows, the finer split the run turns to has shares
// the parts started in the coarser one do not hold. One call at a time
// has one share.
func shares(limit int) int {
	if limit <= 1 {
		return 1
	}
	n := 1
	for n < 2*limit && n < store.MaxLanes {
		n *= 2
	}
	return n
}

// reset starts every share from the first item.
func (p *progress) reset() {
	p.after = make([]store.Cursor, p.of)
	p.exhausted = make([]bool, p.of)
	p.next = 0
}

// bound records, as step name, how many calls the items eligible now can
// keep going: one per MaxBatch of them, when they are fewer than the window
// would keep going in batches of MaxBatch. A run of a few items on a key
// that admits hundreds of calls at once then splits them into a few shares,
// not hundreds that are mostly empty, each of which a part would be started
// on to find out.
func (b *backfill) bound(r *engine.Run, p *progress, name string) (eligible int, err error) {
	want := min(p.window*b.MaxBatch, maxEligibleRead)
	eligible, err = engine.Step(r, name, func(ctx context.Context) (int, error) {
		items, err := b.set.rec.NextItems(ctx, b.ID, b.set.now(), want, store.Cursor{}, store.Lane{})
		return len(items), err
	})
	if err != nil {
		return 0, err
	}
	p.bound = 0 // enough for any split
	if eligible < want {
		p.bound = max(1, (eligible+b.MaxBatch-1)/b.MaxBatch)
	}
	p.reshape(p.window)
	return eligible, nil
}

// maxEligibleRead bounds the items a run reads to find how many calls its
// items can keep going: past it, they can keep any number going.
const maxEligibleRead = 4096

// reshape sets the calls to keep going to limit, held to what the items
// can keep going, and splits the items anew when the shares are too few for
// it, or four times as many as it needs (fewer, larger shares fill larger
// batches).
func (p *progress) reshape(limit int) {
	p.window = limit
	p.limit = p.held(limit)
	if of := shares(p.limit); of > p.of || of*4 <= p.of {
		p.of = of
		p.reset()
	}
}

// held is limit calls at once held to what the eligible items can keep
// going.
func (p *progress) held(limit int) int {
	if p.bound > 0 {
		return min(limit, p.bound)
	}
	return limit
}

// fail records err as what the run stops on.
func (p *progress) fail(err error) { p.failure, p.abort = err, abortReason(err) }

// add counts what the part run started going through lane l did, in the
// record of run. Where it stopped tells the shares of this run's split
// that lie within l where they are.
func (p *progress) add(run string, l store.Lane, d laneDone) {
	if o := p.origins[run]; o != nil && run != p.rec.RunID {
		o.Selected += d.Selected
		o.Retried += d.Retried
		sv := saved{Saved: o.Saved, Parked: o.Parked, Rejected: o.Rejected}
		sv.add(d.saved)
		o.Saved, o.Parked, o.Rejected = sv.Saved, sv.Parked, sv.Rejected
		p.credited[run] = true
	} else {
		p.rec.Selected += d.Selected
		p.rec.Retried += d.Retried
		p.sv.add(d.saved)
		p.calls += d.Calls
	}
	if l.Of > 0 && l.Of <= p.of && p.of%l.Of == 0 {
		// Its cursor holds for each of them: they hold some of its items.
		for j := l.Index; j < p.of; j += l.Of {
			p.after[j], p.exhausted[j] = d.After, d.Exhausted
		}
	}
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
	case !p.done && p.handed >= batchesPerRun:
		p.rec.Stopped = "continued"
	}
}

// advance takes the run one turn on, and reports whether there is more:
// it starts parts on the shares free to go, or, when every share has run
// out, looks for new items (once) or ends; then it waits for a part to
// end. A run that has given out its calls ends, its parts going handed on;
// one that fails or is done waits for them first.
func (b *backfill) advance(r *engine.Run, p *progress, k int) (bool, error) {
	stopping := p.failure != nil || p.done
	if !stopping && p.handed >= b.BatchesPerRun {
		return false, nil
	}
	if !stopping {
		if len(p.going) == 0 && p.fresh() && !b.peek(r, p, k) {
			return true, nil
		}
		if p.limit == 1 && p.of == 1 && len(p.going) == 0 && !p.exhausted[0] {
			// One share at a time needs no part: the run goes through it
			// itself, without a child workflow's writes.
			return true, b.inline(r, p, k)
		}
		if err := b.startParts(r, p); err != nil {
			return false, err
		}
		if len(p.going) == 0 {
			b.ranOut(r, p, k)
			return true, nil
		}
		if p.handed >= b.BatchesPerRun {
			return false, nil // the parts going are handed on
		}
	}
	if len(p.going) == 0 {
		return false, nil
	}
	return true, b.collect(r, p, k)
}

// fresh reports whether every share starts from the first item.
func (p *progress) fresh() bool {
	return !slices.ContainsFunc(p.after, func(c store.Cursor) bool { return !c.IsZero() })
}

// ranOut is what a run does when every share has run out of eligible
// items: it looks for new ones in the source, then goes round again from
// the first; if it looked already, what the source has now waits for the
// next run.
func (b *backfill) ranOut(r *engine.Run, p *progress, k int) {
	if p.discovered {
		p.done = true
		return
	}
	if eligible, ok := b.look(r, p, k); ok {
		p.reset()
		// With none eligible, the run is done without going through
		// every share again to find that out.
		p.done = eligible == 0
	}
}

// peek reports whether the run's shares are to go: when every share would
// start from the first item, it sees first whether there is any, so that
// a run with nothing to do starts no part, and looks for new items in the
// source (once) when there is none.
func (b *backfill) peek(r *engine.Run, p *progress, k int) bool {
	found, err := engine.Step(r, fmt.Sprintf("peek-%d", k), func(ctx context.Context) (bool, error) {
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
		b.look(r, p, k)
	}
	return false
}

// look looks for new items in the source, and sizes the run for the items
// eligible then, which it returns; false if that failed.
func (b *backfill) look(r *engine.Run, p *progress, k int) (int, bool) {
	p.discovered = true
	if err := b.discover(r, k); err != nil {
		p.fail(err)
		return 0, false
	}
	eligible, err := b.bound(r, p, fmt.Sprintf("eligible-%d", k))
	if err != nil {
		p.fail(err)
		return 0, false
	}
	return eligible, true
}

// inline goes through the run's one share in the run itself.
func (b *backfill) inline(r *engine.Run, p *progress, k int) error {
	l := store.Lane{Of: 1, Index: 0}
	in := laneInput{RunID: r.ID(), Lane: l, After: p.after[0], Budget: b.BatchesPerRun - p.handed}
	p.handed += in.Budget
	d, err := b.lane(r, fmt.Sprintf("r%d-", k), in)
	if err != nil {
		return err
	}
	p.add(r.ID(), l, d)
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
		for _, run := range slices.Sorted(maps.Keys(p.credited)) {
			if err := b.set.rec.RecordBackfillRun(ctx, *p.origins[run]); err != nil {
				return struct{}{}, err
			}
		}
		if err := b.set.rec.RecordJobRun(ctx, b.ID, rec.EndedAt, msg); err != nil {
			return struct{}{}, err
		}
		b.set.log.Info("backfill run", "backfill", b.ID, "run", rec.RunID, "selected", rec.Selected, "retried", rec.Retried,
			"saved", rec.Saved, "rejected", formatRejected(rec.Rejected), "parked", rec.Parked, "stopped", rec.Stopped)
		if rec.Stopped == "continued" {
			// The next run starts now rather than at the next Poll, where
			// this one left off, and waits for the parts still going.
			cont := p.continuation()
			data, err := json.Marshal(cont)
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

// continuation is what the run hands on to the next: where its shares
// are, its parts going, and the records of the runs that started them.
func (p *progress) continuation() continuation {
	cont := continuation{Of: p.of, After: p.after, Exhausted: p.exhausted, Next: p.next}
	runs := map[string]bool{}
	for _, g := range p.going {
		cont.Going = append(cont.Going, going{ID: g.part.ID(), Lane: g.lane, Run: g.run})
		runs[g.run] = true
	}
	for _, run := range slices.Sorted(maps.Keys(runs)) {
		switch o := p.origins[run]; {
		case run == p.rec.RunID:
			cont.Runs = append(cont.Runs, p.rec)
		case o != nil:
			cont.Runs = append(cont.Runs, *o)
		}
	}
	return cont
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
