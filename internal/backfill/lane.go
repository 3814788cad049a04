package backfill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// lanePart is the engine part that goes through one lane's items.
const lanePart = "lane"

// laneInput is what a lane's part receives: the run it belongs to, which
// lane it goes through, where it starts, and how many batches it may go
// through (Budget): one call each, or none for a batch of items parked or
// rejected without one, so that a part ends however its batches go.
type laneInput struct {
	RunID  string       `json:"run_id"`
	Lane   store.Lane   `json:"lane"`
	After  store.Cursor `json:"after,omitzero"`
	Budget int          `json:"budget"`
	// Held is the calls at once the run's eligible items held it to when
	// it started the part (0: none): a window grown past it splits the
	// run's items no finer.
	Held int `json:"held,omitempty"`
}

// laneDone is what a lane's part returns: what it did, where it stopped,
// and why.
type laneDone struct {
	saved
	Selected int `json:"selected"`
	Retried  int `json:"retried"`
	Calls    int `json:"calls"`
	// Batches counts the batches it went through, with a call or not:
	// what its budget counts.
	Batches int          `json:"batches,omitempty"`
	After   store.Cursor `json:"after,omitzero"`
	// Exhausted: nothing more in the lane was eligible.
	Exhausted bool   `json:"exhausted,omitempty"`
	Failed    string `json:"failed,omitempty"`  // the error the lane stopped on
	Aborted   string `json:"aborted,omitempty"` // the run's stop reason it gives
}

// notSent ends the request recorded for items no call was made for: those
// parked because their request alone can never fit a limit, and those gone
// from the source. The rest is unique to the save step (callID), so that
// an item rejected as gone twice in one run counts both times.
const notSent = "not sent"

// saved is what a batch's save step did.
type saved struct {
	Saved    int            `json:"saved"`
	Parked   int            `json:"parked"`
	Rejected map[string]int `json:"rejected,omitempty"`
}

func (sv *saved) add(o saved) {
	sv.Saved += o.Saved
	sv.Parked += o.Parked
	for reason, n := range o.Rejected {
		if sv.Rejected == nil {
			sv.Rejected = map[string]int{}
		}
		sv.Rejected[reason] += n
	}
}

// runLane is the part that goes through one lane's items: batch after
// batch, it selects the next eligible items of its lane, calls the
// provider as one governed LLM step, and saves the outputs in one
// transaction step that also records each item's outcome, until nothing
// is eligible or it has made its budget of calls. A lane that fails for
// good says why in its result; an error is the part's end (cancelled,
// timed out), which ends the run too.
func (b *backfill) runLane(r *engine.Run, raw json.RawMessage) (any, error) {
	var in laneInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("read the lane: %w", err)
	}
	return b.lane(r, "", in)
}

// lane goes through the items of in.Lane in r, its steps' names starting
// with prefix: the work of runLane, or of a run with one lane.
func (b *backfill) lane(r *engine.Run, prefix string, in laneInput) (laneDone, error) {
	d := laneDone{After: in.After}
	fail := func(err error) (laneDone, error) {
		var se *run.StepError
		if !errors.As(err, &se) {
			return laneDone{}, err
		}
		d.Failed, d.Aborted = err.Error(), abortReason(err)
		return d, nil
	}
	// The items' data the selections loaded, by key; a replay, whose steps
	// do not run again, loads it anew.
	cache := map[string]json.RawMessage{}
	// The first batch is selected by a step of its own; each next one is
	// selected before the one before it is saved, and recorded by its save
	// step, so that a batch costs two steps: its call, and its save.
	sel, err := engine.Step(r, prefix+"select", func(ctx context.Context) (selection, error) {
		return b.selectBatch(ctx, in.After, in.Lane, cache, batch{})
	})
	if err != nil {
		return fail(err)
	}
	for i := 0; ; i++ {
		d.After = sel.After
		bt := sel.Batch
		if bt.empty() {
			d.Exhausted = true
			break
		}
		d.Selected += len(bt.Keys) + len(bt.TooLarge) + len(bt.Gone)
		for _, n := range bt.Rejects {
			if n > 0 { // an item tried before
				d.Retried++
			}
		}
		d.Batches++
		if len(bt.Keys) > 0 {
			d.Calls++
		}
		items, rejects, err := b.items(r, bt, cache)
		if err != nil {
			return laneDone{}, err
		}
		more := d.Batches < in.Budget
		var next func(context.Context) (selection, error) // none once the budget is spent
		if more {
			next = func(ctx context.Context) (selection, error) {
				// Read before the save commits, the batch's own items
				// still look as they did: they are passed over.
				return b.selectBatch(ctx, d.After, in.Lane, cache, bt)
			}
		}
		sv, failed, err := b.batch(r, prefix, i, in, items, rejects, bt, next)
		if err != nil {
			return fail(err)
		}
		d.add(sv.saved)
		if failed != nil {
			d.Failed, d.Aborted = failed.Error(), failed.Error()
			return d, nil
		}
		if !more || sv.Stop {
			break
		}
		if sv.Next != nil {
			sel = *sv.Next
			continue
		}
		skip := bt
		if sel, err = engine.Step(r, fmt.Sprintf("%sselect-%d", prefix, i+1), func(ctx context.Context) (selection, error) {
			return b.selectBatch(ctx, d.After, in.Lane, cache, skip)
		}); err != nil {
			return fail(err)
		}
	}
	return d, nil
}

// callID is the request a call's items record (store.Settlement.RequestID),
// by which a settlement seen before is known: unique to the call's step in
// its run or part, so that a provider that answers every call with the same
// ID, or none, does not make a later call's outcomes read as ones already
// settled; the provider's own ID follows, for the reader, cut so the whole
// fits store.MaxKeyBytes.
func callID(runID, step, providerID string) string {
	sum := sha256.Sum256([]byte(runID + "\x00" + step))
	id := step + " " + hex.EncodeToString(sum[:8])
	if providerID == "" {
		return id
	}
	id += " " + providerID
	if len(id) > store.MaxKeyBytes {
		id = strings.ToValidUTF8(id[:store.MaxKeyBytes], "")
	}
	return id
}

// savedNext is what a lane's save step records: what the save did, and
// the lane's next batch.
type savedNext struct {
	saved
	Next *selection `json:"next,omitempty"` // nil: to be selected by a step of its own
	// Stop: the lane ends here, its share now too coarse (see coarse).
	Stop bool `json:"stop,omitempty"`
}

// batch calls and saves the i-th batch of a lane (which settles in its
// own shard of the job's counts): items (rejected so far rejects times
// each), and bt's items parked or rejected without a call (TooLarge, Gone);
// its save step also records the next batch, which next selects (nil:
// none). A response that cannot be parsed fails the lane (failed); err is a
// step's failure.
func (b *backfill) batch(r *engine.Run, prefix string, i int, in laneInput, items []Item, rejects []int, bt batch,
	next func(context.Context) (selection, error)) (sv savedNext, failed, err error) {
	var outputs []string
	var requestID string
	if len(items) > 0 {
		// The request is built from the items the select step took, so a
		// replay of a call not yet answered asks about the same ones.
		req, err := b.request(items)
		if err != nil {
			return sv, fmt.Errorf("build the request of batch %d: %w", i, err), nil
		}
		c := b.win.begin()
		resp, err := engine.ObservedLLM(r, fmt.Sprintf("%scall-%d", prefix, i), b.caller, req, llm.Timeouts{}, c)
		c.end()
		if err != nil {
			return sv, nil, err
		}
		requestID = callID(r.ID(), fmt.Sprintf("%scall-%d", prefix, i), resp.ID)
		if outputs, err = b.Parse(resp, items); err == nil && len(outputs) != len(items) {
			err = fmt.Errorf("parse gave %d outputs for %d items", len(outputs), len(items))
		}
		if err != nil {
			return sv, fmt.Errorf("parse the response of call-%d: %w", i, err), nil
		}
		if b.Deliver != nil {
			delivered, err := engine.Step(r, fmt.Sprintf("%sdeliver-%d", prefix, i), func(ctx context.Context) ([]string, error) {
				reasons, err := b.Deliver(ctx, items, outputs)
				if err == nil && len(reasons) != len(items) {
					err = engine.NonRetriable(fmt.Errorf("deliver gave %d outcomes for %d items", len(reasons), len(items)))
				}
				return reasons, err
			})
			if err != nil {
				return sv, nil, err
			}
			// The save records what the delivery did: "" delivered, else
			// the reason the output was refused.
			outputs = delivered
		}
	}
	// The next batch is selected before the save's transaction begins, so
	// that SQLite's one write lock is not held while it is read and sized;
	// the save step records it. (In a replay, whose save step is recorded,
	// the record is what counts.)
	// One that fails leaves the lane to select it in a step of its own,
	// retried as steps are.
	var sel *selection
	if next != nil {
		if got, err := next(r); err == nil {
			sel = &got
		}
	}
	if requestID == "" {
		requestID = callID(r.ID(), fmt.Sprintf("%ssave-%d", prefix, i), notSent)
	}
	stop := b.coarse(in)
	sv, err = engine.Transaction(r, fmt.Sprintf("%ssave-%d", prefix, i), func(ctx context.Context, tx dbos.Tx) (savedNext, error) {
		saved, err := b.save(ctx, tx, in.RunID, in.Lane.Index, requestID, items, rejects, bt, outputs)
		return savedNext{saved: saved, Next: sel, Stop: stop}, err
	})
	if err == nil && sv.Saved > 0 {
		b.nudge() // the items saved are eligible now in the backfills after this one
	}
	return sv, nil, err
}

// coarse reports whether the share of a part started with in is four
// times as large as the shares the run would split the items into now: the
// window has grown, and the part holds the items of several shares the run
// would start parts on. Such a part ends after its batch, so that the run
// grows with the window instead of after the part's calls; the save step
// records it, so a replay ends there too. A run held to fewer calls by its
// eligible items splits no finer than they allow.
func (b *backfill) coarse(in laneInput) bool {
	limit := b.win.limit()
	if in.Held > 0 {
		limit = min(limit, in.Held)
	}
	return in.Lane.Of > 0 && shares(limit) >= 4*in.Lane.Of
}

// items are the items of batch bt with the data its select step loaded,
// or, in a replay, which the select step did not run in, loaded now, and
// the rejects of each. An item no longer in the source is left out —
// unless this backfill has saved or parked it: then its batch's call and
// save are recorded, and a replay must take the same steps with the same
// items. A source that lists only the items that still need the backfill
// (WHERE title_en IS NULL) no longer lists it; it keeps its place with
// null data, which builds a request that is never sent.
func (b *backfill) items(ctx context.Context, bt batch, cache map[string]json.RawMessage) ([]Item, []int, error) {
	var missing []string
	for _, k := range bt.Keys {
		if _, ok := cache[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		data, err := b.Load(ctx, missing)
		if err != nil {
			return nil, nil, fmt.Errorf("load items: %w", err)
		}
		maps.Copy(cache, data)
		if len(data) < len(missing) {
			gone := slices.DeleteFunc(missing, func(k string) bool { _, ok := data[k]; return ok })
			recs, err := b.set.rec.Items(ctx, b.ID, gone)
			if err != nil {
				return nil, nil, fmt.Errorf("read the records of items gone from the source: %w", err)
			}
			for _, it := range recs {
				if it.State == store.ItemSaved || it.State == store.ItemParked {
					cache[it.Key] = json.RawMessage("null")
				}
			}
		}
	}
	var items []Item
	var rejects []int
	for j, k := range bt.Keys {
		if d, ok := cache[k]; ok {
			items = append(items, Item{Key: k, Data: d})
			rejects = append(rejects, bt.Rejects[j])
		}
	}
	clear(cache)
	return items, rejects, nil
}

// save saves each item's output and records the outcomes, in tx: those
// of items, and of bt's items without a call — rejected as gone (parked
// once rejected MaxRejects times), and parked as too large.
func (b *backfill) save(ctx context.Context, tx dbos.Tx, runID string, shard int, requestID string, items []Item, rejects []int, bt batch, outputs []string) (saved, error) {
	st := store.Settlement{Backfill: b.ID, RunID: runID, RequestID: requestID, At: b.set.now().UTC(), Shard: shard,
		MaxRejects: b.MaxRejects, RetryAfter: b.RetryAfter, Then: b.then}
	sv := saved{Rejected: map[string]int{}}
	reject := func(key, reason string, before int) {
		st.Outcomes = append(st.Outcomes, store.Outcome{Key: key, Reason: reason})
		sv.Rejected[reason]++
		if before+1 >= b.MaxRejects {
			sv.Parked++
		}
	}
	for i, it := range items {
		var err error
		switch {
		case b.Deliver == nil:
			err = b.Save(ctx, tx, it, outputs[i])
		case outputs[i] != "": // delivered: the reason it was refused
			err = Reject(outputs[i])
		}
		var rj *rejected
		switch {
		case err == nil:
			st.Outcomes = append(st.Outcomes, store.Outcome{Key: it.Key, Saved: true})
			sv.Saved++
		case errors.As(err, &rj):
			reject(it.Key, rj.reason, rejects[i])
		default:
			return saved{}, fmt.Errorf("save item %s: %w", it.Key, err)
		}
	}
	for j, k := range bt.Gone {
		before := 0
		if j < len(bt.GoneRejects) {
			before = bt.GoneRejects[j]
		}
		reject(k, goneReason, before)
	}
	if err := b.set.rec.Settle(ctx, tx, st); err != nil {
		return saved{}, err
	}
	if len(bt.TooLarge) > 0 {
		// Too large alone: no later try can fit, so it is parked now.
		st.Outcomes, st.MaxRejects = bt.TooLarge, 1
		sv.Parked += len(bt.TooLarge)
		if err := b.set.rec.Settle(ctx, tx, st); err != nil {
			return saved{}, err
		}
	}
	return sv, nil
}
