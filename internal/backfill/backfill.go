// Package backfill runs backfills: it walks the items a source says still
// need work, asks the LLM about a batch of them per call, and saves each
// item's output, through durable steps of the engine, recording every item,
// run and job in sluice's store.
//
// # Runs
//
// A backfill is an engine function of its own ("backfill:<id>", at most one
// run at a time). A run repeats: select a batch, call, save — until nothing
// is eligible (it stops "done") or it has gone through Config.BatchesPerRun
// batches (it stops "continued" and starts the next run at once, so no DBOS
// workflow grows without bound). Runs start every Poll as well, so new items are
// picked up. The size of each batch comes from the governor: the largest,
// up to MaxBatch, that fits every limit, and, at the share of the key the
// flow can expect, is done within about Within. No batch carries more than
// MaxBatch items.
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
// large for a limit of the key is parked at once, naming the limit. An
// item Load no longer returns is rejected the same way, without a call,
// as "no longer in the source": tried again if it comes back, parked if
// it does not, so that it is not counted as work left for ever.
package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/engine"
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
	// leaves out is an item no longer there: it is rejected without a call
	// (goneReason), tried again after RetryAfter and parked after
	// MaxRejects — but for an item this backfill saved already, which a
	// replay after a crash keeps in its batch with null data (its call is
	// not made again).
	Load func(ctx context.Context, keys []string) (map[string]json.RawMessage, error)
	// Request builds the one call for a batch of items.
	Request func(items []Item) (*llm.ChatRequest, error)
	// Parse splits the response into one output per item, in order. The
	// default gives a batch of one item the first choice's content.
	Parse func(resp *llm.ChatResponse, items []Item) ([]string, error)
	// Save saves one item's output in tx. An error Reject made rejects the
	// output; any other error fails the batch's save, which is retried.
	// Save or Deliver is required.
	Save func(ctx context.Context, tx dbos.Tx, item Item, output string) error
	// Deliver, instead of Save, hands a batch's outputs to a place outside
	// sluice's database (another database, an HTTP endpoint) in a step of
	// its own, before the save step records each item's outcome. It
	// returns, per item in order, "" for an output delivered or the reason
	// it is refused (a rejection, as Save's Reject). A crash before the
	// step is recorded runs it again for the same batch, so Deliver must be
	// idempotent by item key. An error fails the batch, as a save's does.
	Deliver func(ctx context.Context, items []Item, outputs []string) ([]string, error)
	// DiscoverPage is how many keys one page of Pending lists (default 1000).
	DiscoverPage int
}

// Defaults of Config.
const (
	DefaultStallAfter    = 2 * time.Hour
	DefaultMaxRejects    = 3
	DefaultRetryAfter    = 10 * time.Minute
	DefaultPoll          = time.Minute
	DefaultBatchesPerRun = 100
	DefaultDiscoverPage  = 1000
	// MaxInFlight is the most calls a backfill keeps going at once: one
	// per lane of its items, so that no two share an item.
	MaxInFlight = store.MaxLanes
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// withDefaults fills the zero settings; Add has refused negative ones.
func (c Config) withDefaults() Config {
	c.Flow = cmp.Or(c.Flow, c.ID)
	c.MaxBatch = cmp.Or(c.MaxBatch, 1)
	c.Within = c.BatchWithin()
	c.StallAfter = cmp.Or(c.StallAfter, DefaultStallAfter)
	c.MaxRejects = cmp.Or(c.MaxRejects, DefaultMaxRejects)
	c.RetryAfter = cmp.Or(c.RetryAfter, DefaultRetryAfter)
	c.Poll = cmp.Or(c.Poll, DefaultPoll)
	c.BatchesPerRun = cmp.Or(c.BatchesPerRun, DefaultBatchesPerRun)
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
	case (c.Save == nil) == (c.Deliver == nil):
		return fmt.Errorf("backfill %s: needs one of Save and Deliver", c.ID)
	case c.After == c.ID:
		return fmt.Errorf("backfill %s: runs after itself", c.ID)
	case c.MaxBatch > 10000:
		return fmt.Errorf("backfill %s: max batch %d: want at most 10000", c.ID, c.MaxBatch)
	case c.InFlight > MaxInFlight:
		return fmt.Errorf("backfill %s: in flight %d: want at most %d (0 sizes it to the quota)", c.ID, c.InFlight, MaxInFlight)
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
	AddItemsIn(ctx context.Context, tx store.Tx, backfill string, keys []string, at time.Time, after string) (int, error)
	NextItems(ctx context.Context, backfill string, now time.Time, limit int, after store.Cursor, lane store.Lane) ([]store.Item, error)
	Settle(ctx context.Context, tx store.Tx, s store.Settlement) error
	Items(ctx context.Context, backfill string, keys []string) ([]store.Item, error)
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
	// soon carries the backfills that an item just became eligible in
	// (After): the ticker starts a run of each at once, rather than at its
	// next Poll.
	soon chan string
}

// NewSet returns an empty set whose backfills run on e and are recorded in rec.
func NewSet(e *engine.Engine, rec Records, log *slog.Logger, now func() time.Time) *Set {
	if now == nil {
		now = time.Now
	}
	return &Set{e: e, rec: rec, log: log, now: now, byID: map[string]*backfill{}, soon: make(chan string, 64)}
}

type backfill struct {
	Config
	set      *Set
	caller   engine.Caller    // where the calls go: a provider or a route
	provider *engine.Provider // caller's primary: it sizes the batches
	then     []string         // backfills that run after this one
	win      *window          // how many calls to keep going at once
}

// EventName is the event that starts a run of backfill id.
func EventName(id string) string { return "sluice/backfill/" + id }

// FunctionID is the engine function of backfill id.
func FunctionID(id string) string { return "backfill:" + id }

// Add registers a backfill whose calls go to p, a provider or a route
// (whose first target sizes the batches). Add before Start.
func (s *Set) Add(c Config, p engine.Caller) error {
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
	if p == nil || p == (*engine.Provider)(nil) {
		return fmt.Errorf("backfill %s: no LLM provider is configured", c.ID)
	}
	if _, dup := s.byID[c.ID]; dup {
		return fmt.Errorf("backfill %s: already registered", c.ID)
	}
	b := &backfill{Config: c, set: s, caller: p, provider: p.Primary()}
	ps, flow := p.Providers(), c.Flow
	b.win = newWindow(c.InFlight, s.now, func(now time.Time) float64 {
		// a route's calls can go to any target: the rates add up (0: a
		// target without limits, so none)
		var sum float64
		for _, p := range ps {
			r := quotaRate(p.Governor, flow, now)
			if r == 0 {
				return 0
			}
			sum += r
		}
		return sum
	})
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

// InFlight returns how many calls backfill id keeps going, as this
// process sees them; false if there is no such backfill.
func (s *Set) InFlight(id string) (InFlightState, bool) {
	b, ok := s.byID[id]
	if !ok {
		return InFlightState{}, false
	}
	return b.win.state(), true
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
	// due: backfills an item just became eligible in, and when to start a
	// run of each; one with a run going is tried again a second later,
	// since that run may have looked before the item was eligible, until
	// its next Poll would start one anyway (since: when it became due).
	due, since := map[string]time.Time{}, map[string]time.Time{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-s.soon:
			if _, ok := due[id]; !ok {
				due[id], since[id] = s.now(), s.now()
			}
		case <-timer.C:
		}
		now := s.now()
		wake := now.Add(time.Hour)
		for _, b := range s.order {
			if at := next[b.ID]; !now.Before(at) {
				s.kick(ctx, b, fmt.Sprintf("%s@%d", b.ID, now.Truncate(b.Poll).UnixMilli()))
				next[b.ID] = now.Truncate(b.Poll).Add(b.Poll)
			}
			if at, ok := due[b.ID]; ok && !now.Before(at) {
				if now.Sub(since[b.ID]) > b.Poll || s.kick(ctx, b, fmt.Sprintf("%s@%d+after", b.ID, now.UnixMilli())) {
					delete(due, b.ID)
				} else {
					due[b.ID] = now.Add(time.Second)
				}
			}
			for _, at := range []time.Time{next[b.ID], due[b.ID]} {
				if !at.IsZero() && at.Before(wake) {
					wake = at
				}
			}
		}
		timer.Reset(max(s.e.Real(wake.Sub(s.now())), time.Millisecond))
	}
}

// nudge asks the ticker to start runs of the backfills that run after b,
// now that b has saved items they wait for; it never blocks.
func (b *backfill) nudge() {
	for _, id := range b.then {
		select {
		case b.set.soon <- id:
		default: // the ticker has starts to make already
		}
	}
}

// kick starts a run of b under id, unless one is going or in line; it
// reports whether the run started, or cannot (false: one is going).
func (s *Set) kick(life context.Context, b *backfill, id string) bool {
	ctx, cancel := context.WithTimeout(life, 10*time.Second)
	defer cancel()
	// A run in progress or in line will pick up what there is (and hands
	// on to the next itself): another would only wait behind it.
	for _, st := range []run.State{run.Running, run.Queued} {
		if active, err := s.e.Runs(ctx, engine.RunFilter{Function: FunctionID(b.ID), Status: st, Limit: 1}); err == nil && len(active) > 0 {
			return false
		}
	}
	if _, err := s.e.Send(ctx, engine.Event{Name: EventName(b.ID), ID: id}); err != nil && life.Err() == nil { // not cut by Stop
		s.log.Warn("sluice: start a backfill run", "backfill", b.ID, "err", err)
	}
	return true
}
