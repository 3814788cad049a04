// Package backfill runs backfills: it walks the items a source says still
// need work, asks the LLM about a batch of them per call, and saves each
// item's output, through durable steps of the engine, recording every item,
// run and job in sluice's store.
//
// # Runs
//
// A backfill is an engine function of its own ("backfill:<id>", at most one
// run at a time). A run repeats: select a batch, call, save — until nothing
// is eligible (it stops "done") or it has made Config.BatchesPerRun calls
// (it stops "continued" and starts the next run at once, so no DBOS workflow
// grows without bound). Runs start every Poll as well, so new items are
// picked up. The size of each batch comes from the governor: the largest
// that fits every limit, and, at the share of the key the flow can expect,
// is done within about Within.
//
// # Exactly once
//
// A batch is selected in one step (its items are recorded with the step),
// called in one governed LLM step (a finished call is never made again)
// and saved in one transaction step that also records each item's outcome:
// the saver's writes and the outcomes commit together, once. An item saved
// or parked is never selected again.
//
// # Rejections
//
// A saver may reject an item's output (Reject): the item is counted by the
// reason, waits RetryAfter, and is tried again, up to MaxRejects times;
// then it is parked with the reason. An item whose request alone is too
// large for a limit of the key is parked at once, naming the limit.
package backfill

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/govkey"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Item is one item of a backfill: its key and its data, as JSON.
type Item struct {
	Key  string          `json:"key"`
	Data json.RawMessage `json:"data"`
}

// Config is one backfill: its settings, and the functions that list, load,
// ask about and save its items, on raw JSON data. Pending (or PendingSQL),
// Load, Request and Save are required.
type Config struct {
	run.Backfill
	// Pending lists the keys of the items that still need this backfill,
	// those after the key after, in increasing order, at most limit.
	Pending func(ctx context.Context, after string, limit int) ([]string, error)
	// Load returns the data of the items keys names, by key. A key it
	// leaves out is an item no longer there: it is skipped this time.
	Load func(ctx context.Context, keys []string) (map[string]json.RawMessage, error)
	// Request builds the one call for a batch of items.
	Request func(items []Item) (*llm.ChatRequest, error)
	// Parse splits the response into one output per item, in order. The
	// default gives a batch of one item the first choice's content.
	Parse func(resp *llm.ChatResponse, items []Item) ([]string, error)
	// Save saves one item's output in tx. An error Reject made rejects the
	// output; any other error fails the batch's save, which is retried.
	Save func(ctx context.Context, tx dbos.Tx, item Item, output string) error
	// DiscoverPage is how many keys one page of Pending lists (default 1000).
	DiscoverPage int
}

// Defaults of Config.
const (
	DefaultWithin        = time.Minute
	DefaultStallAfter    = 2 * time.Hour
	DefaultMaxRejects    = 3
	DefaultRetryAfter    = 10 * time.Minute
	DefaultPoll          = time.Minute
	DefaultBatchesPerRun = 100
	DefaultInFlight      = 4
	MaxInFlight          = 100
	DefaultDiscoverPage  = 1000
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// withDefaults fills the zero settings; Add has refused negative ones.
func (c Config) withDefaults() Config {
	c.Flow = cmp.Or(c.Flow, c.ID)
	c.MaxBatch = cmp.Or(c.MaxBatch, 1)
	c.Within = cmp.Or(c.Within, DefaultWithin)
	c.StallAfter = cmp.Or(c.StallAfter, DefaultStallAfter)
	c.MaxRejects = cmp.Or(c.MaxRejects, DefaultMaxRejects)
	c.RetryAfter = cmp.Or(c.RetryAfter, DefaultRetryAfter)
	c.Poll = cmp.Or(c.Poll, DefaultPoll)
	c.BatchesPerRun = cmp.Or(c.BatchesPerRun, DefaultBatchesPerRun)
	c.InFlight = cmp.Or(c.InFlight, DefaultInFlight)
	c.DiscoverPage = cmp.Or(c.DiscoverPage, DefaultDiscoverPage)
	if c.Parse == nil {
		c.Parse = parseOne
	}
	return c
}

func (c Config) validate() error {
	if !idPattern.MatchString(c.ID) {
		return fmt.Errorf("backfill id %q: want 1-100 letters, digits or ._:- starting with a letter or digit", c.ID)
	}
	switch {
	case (c.Pending == nil) == (c.PendingSQL == ""):
		return fmt.Errorf("backfill %s: needs one source of pending items, Pending or PendingSQL", c.ID)
	case c.Load == nil:
		return fmt.Errorf("backfill %s: Load is nil", c.ID)
	case c.Request == nil:
		return fmt.Errorf("backfill %s: Request is nil", c.ID)
	case c.Save == nil:
		return fmt.Errorf("backfill %s: Save is nil", c.ID)
	case c.After == c.ID:
		return fmt.Errorf("backfill %s: runs after itself", c.ID)
	case c.MaxBatch > 10000:
		return fmt.Errorf("backfill %s: max batch %d: want at most 10000", c.ID, c.MaxBatch)
	case c.InFlight > MaxInFlight:
		return fmt.Errorf("backfill %s: in flight %d: want at most %d", c.ID, c.InFlight, MaxInFlight)
	}
	return nil
}

// parseOne gives a batch of one item the first choice's content.
func parseOne(resp *llm.ChatResponse, items []Item) ([]string, error) {
	if len(items) != 1 {
		return nil, fmt.Errorf("a batch of %d items needs a Parse that splits the response", len(items))
	}
	if len(resp.Choices) == 0 {
		return nil, errors.New("the response has no choices")
	}
	return []string{resp.Choices[0].Message.Content}, nil
}

// rejected is the error Reject makes.
type rejected struct{ reason string }

func (e *rejected) Error() string { return "output rejected: " + e.reason }

// Reject returns the error a saver returns to reject an item's output for
// reason ("not English", "too long", "empty"): the item is tried again
// later, and parked with the reason after MaxRejects rejections.
func Reject(reason string) error {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		reason = "rejected"
	}
	return &rejected{reason: reason}
}

// Records is what a backfill keeps in sluice's store.
type Records interface {
	AddItems(ctx context.Context, backfill string, keys []string, at time.Time, after string) (int, error)
	NextItems(ctx context.Context, backfill string, now time.Time, limit int, after store.Cursor, lane store.Lane) ([]store.Item, error)
	Settle(ctx context.Context, tx store.Tx, s store.Settlement) error
	StartJob(ctx context.Context, name string, at time.Time) error
	RecordJobRun(ctx context.Context, name string, at time.Time, failure string) error
	RecordBackfillRun(ctx context.Context, r store.BackfillRun) error
}

// Set is the backfills of one app.
type Set struct {
	e       *engine.Engine
	rec     Records
	log     *slog.Logger
	now     func() time.Time
	byID    map[string]*backfill
	order   []*backfill
	stop    context.CancelFunc // ends the ticker's context, and the kick it is in
	stopped chan struct{}
}

// NewSet returns an empty set whose backfills run on e and are recorded in rec.
func NewSet(e *engine.Engine, rec Records, log *slog.Logger, now func() time.Time) *Set {
	if now == nil {
		now = time.Now
	}
	return &Set{e: e, rec: rec, log: log, now: now, byID: map[string]*backfill{}}
}

type backfill struct {
	Config
	set      *Set
	provider *engine.Provider
	then     []string // backfills that run after this one
}

// EventName is the event that starts a run of backfill id.
func EventName(id string) string { return "sluice/backfill/" + id }

// FunctionID is the engine function of backfill id.
func FunctionID(id string) string { return "backfill:" + id }

// Add registers a backfill whose calls go to p. Add before Start.
func (s *Set) Add(c Config, p *engine.Provider) error {
	for name, d := range map[string]time.Duration{"within": c.Within, "stall after": c.StallAfter, "retry after": c.RetryAfter, "poll": c.Poll} {
		if d < 0 {
			return fmt.Errorf("backfill %s: %s %s is negative", c.ID, name, d)
		}
	}
	for name, n := range map[string]int{"max batch": c.MaxBatch, "max rejects": c.MaxRejects, "batches per run": c.BatchesPerRun, "in flight": c.InFlight, "discover page": c.DiscoverPage} {
		if n < 0 {
			return fmt.Errorf("backfill %s: %s %d is negative", c.ID, name, n)
		}
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("backfill %s: no LLM provider is configured", c.ID)
	}
	if _, dup := s.byID[c.ID]; dup {
		return fmt.Errorf("backfill %s: already registered", c.ID)
	}
	b := &backfill{Config: c, set: s, provider: p}
	f := &engine.Function{Function: run.Function{
		ID:          FunctionID(c.ID),
		Event:       EventName(c.ID),
		Concurrency: []run.Concurrency{{Limit: 1}},
		Flow:        c.Flow,
	}, Handler: b.run}
	if err := s.e.Register(f); err != nil {
		return err
	}
	if err := s.e.RegisterPart(f, lanePart, b.runLane); err != nil {
		return err
	}
	s.byID[c.ID] = b
	s.order = append(s.order, b)
	return nil
}

// Settings returns each backfill's settings, in the order they were added.
func (s *Set) Settings() []run.Backfill {
	out := make([]run.Backfill, len(s.order))
	for i, b := range s.order {
		out[i] = b.Backfill
	}
	return out
}

// Start checks that every After names a backfill of the set, records each
// job, and starts a run of each backfill now and every Poll until Stop.
func (s *Set) Start(ctx context.Context) error {
	for _, b := range s.order {
		b.then = b.then[:0]
	}
	for _, b := range s.order {
		if b.After == "" {
			continue
		}
		a, ok := s.byID[b.After]
		if !ok {
			return fmt.Errorf("backfill %s: runs after %q, which is not a registered backfill", b.ID, b.After)
		}
		a.then = append(a.then, b.ID)
	}
	for _, b := range s.order {
		if err := s.rec.StartJob(ctx, b.ID, s.now()); err != nil {
			return fmt.Errorf("backfill %s: %w", b.ID, err)
		}
	}
	if len(s.order) == 0 {
		return nil
	}
	life, stop := context.WithCancel(context.Background())
	s.stop, s.stopped = stop, make(chan struct{})
	go s.tick(life)
	return nil
}

// Stop stops starting runs, ending a start under way; runs in progress end
// with the engine. Safe to call twice.
func (s *Set) Stop() {
	if s.stop == nil {
		return
	}
	s.stop()
	<-s.stopped
}

// tick starts a run of each backfill every Poll. The event's ID is the
// Poll period it falls in, so the processes of one app start one run.
func (s *Set) tick(ctx context.Context) {
	defer close(s.stopped)
	next := map[string]time.Time{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now := s.now()
		wake := now.Add(time.Hour)
		for _, b := range s.order {
			if at := next[b.ID]; !now.Before(at) {
				s.kick(ctx, b, fmt.Sprintf("%s@%d", b.ID, now.Truncate(b.Poll).UnixMilli()))
				next[b.ID] = now.Truncate(b.Poll).Add(b.Poll)
			}
			if next[b.ID].Before(wake) {
				wake = next[b.ID]
			}
		}
		timer.Reset(max(s.e.Real(wake.Sub(s.now())), time.Millisecond))
	}
}

func (s *Set) kick(life context.Context, b *backfill, id string) {
	ctx, cancel := context.WithTimeout(life, 10*time.Second)
	defer cancel()
	// A run in progress or in line will pick up what there is (and hands
	// on to the next itself): another would only wait behind it.
	for _, st := range []run.State{run.Running, run.Queued} {
		if active, err := s.e.Runs(ctx, engine.RunFilter{Function: FunctionID(b.ID), Status: st, Limit: 1}); err == nil && len(active) > 0 {
			return
		}
	}
	if _, err := s.e.Send(ctx, engine.Event{Name: EventName(b.ID), ID: id}); err != nil && life.Err() == nil { // not cut by Stop
		s.log.Warn("sluice: start a backfill run", "backfill", b.ID, "err", err)
	}
}

// lanePart is the engine part that goes through one lane's items.
const lanePart = "lane"

// selection is what a select step records: the batch it took, if any, and
// the cursor past the pending items it took (or found gone from the
// source), after which the next selection looks.
type selection struct {
	Batch batch        `json:"batch,omitzero"`
	After store.Cursor `json:"after,omitzero"`
}

// batch is one selected batch: the keys of its items, not their data,
// which its select step keeps in memory for the call (and a replay loads
// again).
type batch struct {
	Keys []string `json:"keys,omitempty"`
	// Rejects are the items' rejected outputs so far, in Keys' order.
	Rejects []int `json:"rejects,omitempty"`
	// TooLarge are items parked without a call: alone, their request
	// does not fit a limit of the key.
	TooLarge []store.Outcome `json:"too_large,omitempty"`
}

func (bt batch) empty() bool { return len(bt.Keys) == 0 && len(bt.TooLarge) == 0 }

// laneInput is what a lane's part receives: the run it belongs to, which
// lane it goes through, where it starts, and how many calls it
// may make.
type laneInput struct {
	RunID  string       `json:"run_id"`
	Lane   store.Lane   `json:"lane"`
	After  store.Cursor `json:"after,omitzero"`
	Budget int          `json:"budget"`
}

// laneDone is what a lane's part returns: what it did, where it stopped,
// and why.
type laneDone struct {
	saved
	Selected int          `json:"selected"`
	Retried  int          `json:"retried"`
	Calls    int          `json:"calls"`
	After    store.Cursor `json:"after,omitzero"`
	// Exhausted: nothing more in the lane was eligible.
	Exhausted bool   `json:"exhausted,omitempty"`
	Failed    string `json:"failed,omitempty"`  // the error the lane stopped on
	Aborted   string `json:"aborted,omitempty"` // the run's stop reason it gives
}

// notSent is the request recorded for items no call was made for: those
// parked because their request alone can never fit a limit.
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
	rec := store.BackfillRun{RunID: r.ID(), Backfill: b.ID, StartedAt: started, Rejected: map[string]int{}, Stopped: "done"}
	// As many lanes as batches may go at once, but no more than a run's
	// calls, so that each lane is given at least one call each run.
	lanes := min(b.InFlight, b.BatchesPerRun)
	var cont continuation
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &cont) != nil || len(cont.After) != lanes {
		cont = continuation{} // none, or another number of lanes: start from the first item
	}
	after := cont.After
	if after == nil {
		after = make([]store.Cursor, lanes)
	}
	exhausted := make([]bool, lanes) // nothing more was eligible in the lane, since the run last looked
	var failure error
	var sv saved
	abort := ""
	calls := 0
	discovered := false // this run has looked for new items
	done := false       // nothing was eligible, even after looking for new items
	// look looks for new items in the source; false if that failed.
	look := func(round int) bool {
		discovered = true
		if err := b.discover(r, round); err != nil {
			failure, abort = err, abortReason(err)
			return false
		}
		return true
	}
	for round := 0; failure == nil && !done && calls < b.BatchesPerRun; round++ {
		if !slices.ContainsFunc(after, func(c store.Cursor) bool { return !c.IsZero() }) {
			// Every lane would start from the first item: see first
			// whether there is any, so that a run with nothing to do
			// starts no lane.
			found, err := engine.Step(r, fmt.Sprintf("peek-%d", round), func(ctx context.Context) (bool, error) {
				items, err := b.set.rec.NextItems(ctx, b.ID, b.set.now(), 1, store.Cursor{}, store.Lane{})
				return len(items) > 0, err
			})
			if err != nil {
				failure, abort = err, abortReason(err)
				break
			}
			if !found {
				if discovered {
					done = true
					break
				}
				if !look(round) {
					break
				}
				continue
			}
		}
		var active []int // the lanes not exhausted
		for j := range lanes {
			if !exhausted[j] {
				active = append(active, j)
			}
		}
		budget := b.BatchesPerRun - calls
		var parts []*engine.Part
		var which []int      // the lane of each of parts
		var inline *laneDone // the one lane's, gone through in the run itself
		for k, j := range active {
			// The budget is shared out among them; a lane given none
			// waits for the next run, which gives each lane some.
			n := budget/len(active) + min(max(budget%len(active)-k, 0), 1)
			if n == 0 {
				continue
			}
			in := laneInput{RunID: r.ID(), Lane: store.Lane{Of: lanes, Index: j}, After: after[j], Budget: n}
			if lanes == 1 {
				// One lane needs no part: the run goes through it itself,
				// without a child workflow's writes.
				d, err := b.lane(r, fmt.Sprintf("r%d-", round), in)
				if err != nil {
					return nil, err
				}
				inline, which = &d, append(which, j)
				break
			}
			p, err := engine.StartPart(r, lanePart, fmt.Sprintf("r%d-lane-%d", round, j), in)
			if err != nil {
				return nil, err
			}
			parts, which = append(parts, p), append(which, j)
		}
		for k := range which {
			var d laneDone
			if inline != nil {
				d = *inline
			} else {
				out, err := parts[k].Wait()
				if err != nil {
					// The run was cancelled, timed out, or lost: it stops
					// here, and a replay takes it from its last step.
					return nil, err
				}
				if err := json.Unmarshal(out, &d); err != nil {
					return nil, fmt.Errorf("read the result of lane %d: %w", which[k], err)
				}
			}
			after[which[k]] = d.After
			rec.Selected += d.Selected
			rec.Retried += d.Retried
			sv.add(d.saved)
			calls += d.Calls
			exhausted[which[k]] = d.Exhausted
			if d.Failed != "" && failure == nil {
				failure, abort = errors.New(d.Failed), d.Aborted
			}
		}
		if failure != nil || slices.Contains(exhausted, false) {
			continue
		}
		if discovered {
			// Every lane ran out since the run looked: what the source
			// has now waits for the next run.
			done = true
			break
		}
		// Every lane ran out of the items known, or of those after its
		// cursor: look for new ones, then go round again from the first.
		if !look(round) {
			break
		}
		clear(after)
		clear(exhausted)
	}
	rec.Saved, rec.Parked = sv.Saved, sv.Parked
	maps.Copy(rec.Rejected, sv.Rejected)
	switch {
	case failure != nil:
		rec.Stopped = "aborted=" + abort
	case !done && calls >= b.BatchesPerRun:
		rec.Stopped = "continued"
	}
	_, err = engine.Step(r, "record", func(ctx context.Context) (struct{}, error) {
		rec.EndedAt = b.set.now().UTC()
		msg := ""
		if failure != nil {
			msg = failure.Error()
		}
		if err := b.set.rec.RecordBackfillRun(ctx, rec); err != nil {
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
			data, err := json.Marshal(continuation{After: after})
			if err != nil {
				return struct{}{}, err
			}
			if _, err := b.set.e.Send(ctx, engine.Event{Name: EventName(b.ID), ID: nextEventID(ev.ID), Data: data}); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		return nil, err
	}
	if failure != nil {
		return rec, failure
	}
	return rec, nil
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
		d.Selected += len(bt.Keys) + len(bt.TooLarge)
		for _, n := range bt.Rejects {
			if n > 0 { // an item tried before
				d.Retried++
			}
		}
		if len(bt.Keys) > 0 {
			d.Calls++
		}
		items, rejects, err := b.items(r, bt, cache)
		if err != nil {
			return laneDone{}, err
		}
		more := d.Calls < in.Budget
		var next func(context.Context) (selection, error) // none once the budget is spent
		if more {
			next = func(ctx context.Context) (selection, error) {
				// Read before the save commits, the batch's own items
				// still look as they did: they are passed over.
				return b.selectBatch(ctx, d.After, in.Lane, cache, bt)
			}
		}
		sv, failed, err := b.batch(r, prefix, i, in.RunID, in.Lane.Index, items, rejects, bt.TooLarge, next)
		if err != nil {
			return fail(err)
		}
		d.add(sv.saved)
		if failed != nil {
			d.Failed, d.Aborted = failed.Error(), failed.Error()
			return d, nil
		}
		if !more {
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
}

// batch calls and saves the i-th batch of a lane (which settles in its
// own shard of the job's counts): items (rejected so far rejects times
// each) and tooLarge, parked without a call; its save step also records
// the next batch, which next selects (nil: none). A response that cannot be parsed fails the
// lane (failed); err is a step's failure.
func (b *backfill) batch(r *engine.Run, prefix string, i int, runID string, shard int, items []Item, rejects []int, tooLarge []store.Outcome,
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
		resp, err := engine.LLM(r, fmt.Sprintf("%scall-%d", prefix, i), b.provider, req, llm.Timeouts{})
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
	sv, err = engine.Transaction(r, fmt.Sprintf("%ssave-%d", prefix, i), func(ctx context.Context, tx dbos.Tx) (savedNext, error) {
		saved, err := b.save(ctx, tx, runID, shard, requestID, items, rejects, tooLarge, outputs)
		return savedNext{saved: saved, Next: sel}, err
	})
	return sv, nil, err
}

// items are the items of batch bt with the data its select step loaded,
// or, in a replay, which the select step did not run in, loaded now, and
// the rejects of each. An item no longer in the source is left out.
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

// selectBatch takes the next eligible items of lane — the pending ones
// after the cursor after, and the rejected ones due again — but those of
// skip, sizes the batch with the governor, and keeps their data in cache
// for the call. Items found gone from the source are passed over, the
// cursor going past them.
func (b *backfill) selectBatch(ctx context.Context, after store.Cursor, lane store.Lane, cache map[string]json.RawMessage, skip batch) (selection, error) {
	sel := selection{After: after}
	passed := map[string]bool{} // skip's items, which a read may still return
	for _, k := range skip.Keys {
		passed[k] = true
	}
	for _, o := range skip.TooLarge {
		passed[o.Key] = true
	}
	for {
		next, err := b.set.rec.NextItems(ctx, b.ID, b.set.now(), b.MaxBatch+len(passed), sel.After, lane)
		if err != nil {
			return sel, err
		}
		next = slices.DeleteFunc(next, func(it store.Item) bool { return passed[it.Key] })
		if len(next) == 0 {
			return sel, nil
		}
		keys := make([]string, len(next))
		for i, it := range next {
			keys[i] = it.Key
		}
		data, err := b.Load(ctx, keys)
		if err != nil {
			return selection{}, fmt.Errorf("load items: %w", err)
		}
		var items []Item
		var rejects, at []int // each of items' rejects so far, and where it is in next
		for i, it := range next {
			if d, ok := data[it.Key]; ok { // else gone from the source since it was found
				items = append(items, Item{Key: it.Key, Data: d})
				rejects = append(rejects, it.Rejects)
				at = append(at, i)
			}
		}
		if len(items) == 0 {
			// None is there any more: look past them.
			moved := lastPending(next, sel.After)
			if moved == sel.After {
				return sel, nil // rejected items only, gone: nothing to pass
			}
			sel.After = moved
			continue
		}
		n, tooLarge, err := b.size(items)
		if err != nil {
			return selection{}, err
		}
		if n == 0 {
			// Alone, the first item does not fit a limit: it is parked, and
			// the rest go in the next batch.
			sel.Batch.TooLarge = []store.Outcome{{Key: items[0].Key, Reason: tooLarge}}
			sel.After = lastPending(next[:at[0]+1], sel.After)
			return sel, nil
		}
		for _, it := range items[:n] {
			sel.Batch.Keys = append(sel.Batch.Keys, it.Key)
			cache[it.Key] = it.Data
		}
		sel.Batch.Rejects = rejects[:n]
		sel.After = lastPending(next[:at[n-1]+1], sel.After)
		return sel, nil
	}
}

// lastPending is the cursor past the last pending item of items (in the
// order NextItems returned them), or after when none of them is pending.
func lastPending(items []store.Item, after store.Cursor) store.Cursor {
	for _, it := range slices.Backward(items) {
		if it.State == store.ItemPending {
			return it.After()
		}
	}
	return after
}

// request builds and completes the call for items.
func (b *backfill) request(items []Item) (*llm.ChatRequest, error) {
	req, err := b.Request(items)
	if err != nil {
		return nil, engine.NonRetriable(fmt.Errorf("build the request of %d items: %w", len(items), err))
	}
	return b.provider.Client.ApplyDefaults(req)
}

// size returns how many of items the next call carries: the governor's batch size for a call costing a base plus one item's share
// per item (as the first two items cost), shrunk while the request's real
// cost does not fit a limit (an item larger than the first two). 0 means
// the first item alone does not fit: the string says which limit.
func (b *backfill) size(items []Item) (int, string, error) {
	cost := func(n int) (*llm.ChatRequest, governor.Cost, error) {
		req, err := b.request(items[:n])
		if err != nil {
			return nil, governor.Cost{}, err
		}
		return req, b.provider.Estimator.Cost(req), nil
	}
	n := 1
	if len(items) > 1 {
		_, one, err := cost(1)
		if err != nil {
			return 0, "", err
		}
		_, two, err := cost(2)
		if err != nil {
			return 0, "", err
		}
		item := governor.Cost{Requests: max(two.Requests-one.Requests, 0), Input: max(two.Input-one.Input, 0), Output: max(two.Output-one.Output, 0)}
		base := governor.Cost{Requests: max(one.Requests-item.Requests, 0), Input: max(one.Input-item.Input, 0), Output: max(one.Output-item.Output, 0)}
		n = max(b.provider.Governor.BatchSize(b.set.now(), b.Flow, base, item, len(items), b.Within), 1)
	}
	for {
		_, c, err := cost(n)
		if err != nil {
			return 0, "", err
		}
		err = b.provider.Governor.Check(c)
		if err == nil {
			return n, "", nil
		}
		if n == 1 {
			var tl *governor.TooLargeError
			if errors.As(err, &tl) {
				b.provider.Governor.Inside(govkey.Key{}).RefusedFlow(b.Flow, tl.Limit)
			}
			return 0, err.Error(), nil
		}
		n /= 2
	}
}

// discover pages through the source and records the items not known yet,
// each page in two steps: listing it (in a transaction on the app's
// database for PendingSQL), and recording it.
func (b *backfill) discover(r *engine.Run, i int) error {
	after := ""
	for page := 0; ; page++ {
		name := fmt.Sprintf("discover-%d-%d", i, page)
		var keys []string
		var err error
		if b.Pending != nil {
			keys, err = engine.Step(r, name, func(ctx context.Context) ([]string, error) { return b.Pending(ctx, after, b.DiscoverPage) })
		} else {
			keys, err = engine.Transaction(r, name, func(ctx context.Context, tx dbos.Tx) ([]string, error) {
				return queryKeys(ctx, tx, b.PendingSQL, after, b.DiscoverPage)
			})
		}
		if err != nil {
			return fmt.Errorf("list pending items: %w", err)
		}
		if len(keys) > b.DiscoverPage {
			return engine.NonRetriable(fmt.Errorf("list pending items: asked for %d keys, got %d", b.DiscoverPage, len(keys)))
		}
		if len(keys) == 0 {
			return nil
		}
		if last := keys[len(keys)-1]; last <= after || !sort.StringsAreSorted(keys) {
			return engine.NonRetriable(fmt.Errorf("list pending items: the page after %q is not in increasing key order", after))
		}
		_, err = engine.Step(r, fmt.Sprintf("add-%d-%d", i, page), func(ctx context.Context) (int, error) {
			return b.set.rec.AddItems(ctx, b.ID, keys, b.set.now(), b.After)
		})
		if err != nil || len(keys) < b.DiscoverPage {
			return err
		}
		after = keys[len(keys)-1]
	}
}

// queryKeys runs a PendingSQL query: $1 after, $2 limit, one column.
func queryKeys(ctx context.Context, tx dbos.Tx, q, after string, limit int) ([]string, error) {
	rows, err := tx.Query(ctx, q, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// save saves each item's output and records the outcomes, in tx.
func (b *backfill) save(ctx context.Context, tx dbos.Tx, runID string, shard int, requestID string, items []Item, rejects []int, tooLarge []store.Outcome, outputs []string) (saved, error) {
	if requestID == "" {
		requestID = notSent
	}
	st := store.Settlement{Backfill: b.ID, RunID: runID, RequestID: requestID, At: b.set.now().UTC(), Shard: shard,
		MaxRejects: b.MaxRejects, RetryAfter: b.RetryAfter, Then: b.then}
	sv := saved{Rejected: map[string]int{}}
	for i, it := range items {
		err := b.Save(ctx, tx, it, outputs[i])
		var rj *rejected
		switch {
		case err == nil:
			st.Outcomes = append(st.Outcomes, store.Outcome{Key: it.Key, Saved: true})
			sv.Saved++
		case errors.As(err, &rj):
			st.Outcomes = append(st.Outcomes, store.Outcome{Key: it.Key, Reason: rj.reason})
			sv.Rejected[rj.reason]++
			if rejects[i]+1 >= b.MaxRejects {
				sv.Parked++
			}
		default:
			return saved{}, fmt.Errorf("save item %s: %w", it.Key, err)
		}
	}
	st.Outcomes = append(st.Outcomes, tooLarge...)
	if len(tooLarge) > 0 {
		// Too large alone: no later try can fit, so it is parked now.
		st.MaxRejects = 1
		sv.Parked += len(tooLarge)
	}
	if err := b.set.rec.Settle(ctx, tx, st); err != nil {
		return saved{}, err
	}
	return sv, nil
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
