package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/run"
)

// cronWorkflow is the DBOS workflow every cron schedule fires; it starts the
// run of the function named in the schedule's context.
const cronWorkflow = "sluice.cron"

// Event is something that happened; functions triggered by its name run.
type Event struct {
	Name string          `json:"name"`
	ID   string          `json:"id,omitempty"`   // deduplicates: the same ID never starts a function twice
	Data json.RawMessage `json:"data,omitempty"` // a JSON object
	TS   time.Time       `json:"ts,omitzero"`
}

// Handler is a function's body. Its result is stored as the run's output.
type Handler func(r *Run, ev Event) (any, error)

// Function is a registered function: its configuration and its handler.
type Function struct {
	run.Function
	Handler Handler
	// Decode, if set, checks an event's data (a JSON object) against the
	// function's event type; Send refuses an event it fails on, so a
	// malformed event is refused before a run exists instead of failing one.
	Decode func(data json.RawMessage) error

	e       *Engine
	parts   map[string]*part // by name (RegisterPart)
	queue   dbos.Queue
	retries int // Retries resolved: 0 is 3, run.NoRetries is 0
}

// ConfigName makes each function its own DBOS registration.
func (f *Function) ConfigName() string { return f.ID }

func (f *Function) queueName() string { return QueueName(f.ID) }

// QueueName is the DBOS queue of the runs of function id.
func QueueName(id string) string { return "sluice:" + id }

// partitionKey is the event field that partitions the queue, if any.
func (f *Function) partitionKey() string {
	for _, c := range f.Concurrency {
		if c.Key != "" {
			return c.Key
		}
	}
	if f.Throttle != nil {
		return f.Throttle.Key
	}
	return ""
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func (f *Function) validate() error {
	if !idPattern.MatchString(f.ID) {
		return fmt.Errorf("function id %q: want 1-128 letters, digits or ._:- starting with a letter or digit", f.ID)
	}
	if f.Event == "" && f.Cron == "" {
		return fmt.Errorf("function %s: needs a trigger (an event name or a cron schedule)", f.ID)
	}
	if f.Cron != "" {
		n := len(strings.Fields(f.Cron))
		if n != 5 && n != 6 && !strings.HasPrefix(f.Cron, "@") {
			return fmt.Errorf("function %s: cron schedule %q has %d fields, want 5 (minute hour day month weekday) or 6 (with seconds first)", f.ID, f.Cron, n)
		}
	}
	if f.Handler == nil {
		return fmt.Errorf("function %s: handler is nil", f.ID)
	}
	if f.Retries < run.NoRetries {
		return fmt.Errorf("function %s: retries %d: want ≥ 0, or run.NoRetries for none", f.ID, f.Retries)
	}
	if f.Timeout < 0 {
		return fmt.Errorf("function %s: timeout %s is negative", f.ID, f.Timeout)
	}
	key := ""
	var global, worker, pglobal, pworker bool
	for i, c := range f.Concurrency {
		if c.Limit < 1 {
			return fmt.Errorf("function %s: concurrency[%d].limit %d must be at least 1", f.ID, i, c.Limit)
		}
		if c.Key != "" {
			if key != "" && key != c.Key {
				return fmt.Errorf("function %s: concurrency keys %q and %q differ: one key per function", f.ID, key, c.Key)
			}
			key = c.Key
		}
		slot := map[[2]bool]*bool{{false, false}: &global, {false, true}: &worker, {true, false}: &pglobal, {true, true}: &pworker}[[2]bool{c.Key != "", c.PerWorker}]
		if *slot {
			return fmt.Errorf("function %s: concurrency[%d] repeats a limit of the same scope", f.ID, i)
		}
		*slot = true
	}
	if t := f.Throttle; t != nil {
		if t.Limit < 1 || t.Period <= 0 {
			return fmt.Errorf("function %s: throttle needs a limit ≥ 1 and a positive period", f.ID)
		}
		if key != "" && t.Key != "" && t.Key != key {
			return fmt.Errorf("function %s: throttle key %q differs from concurrency key %q: one key per function", f.ID, t.Key, key)
		}
		if key != "" && t.Key == "" {
			return fmt.Errorf("function %s: a keyed concurrency limit needs the throttle keyed the same way (%q)", f.ID, key)
		}
	}
	if r := f.RateLimit; r != nil && (r.Limit < 1 || r.Period < time.Millisecond) {
		return fmt.Errorf("function %s: rate limit needs a limit ≥ 1 and a period of at least 1ms", f.ID)
	}
	return nil
}

func (f *Function) queueOptions(poll time.Duration) []dbos.QueueOption {
	opts := []dbos.QueueOption{
		dbos.WithQueueBasePollingInterval(poll),
		dbos.WithQueueOnConflict(dbos.QueueConflictAlwaysUpdate),
	}
	for _, c := range f.Concurrency {
		switch {
		case c.Key == "" && !c.PerWorker:
			opts = append(opts, dbos.WithGlobalConcurrency(c.Limit))
		case c.Key == "":
			opts = append(opts, dbos.WithWorkerConcurrency(c.Limit))
		case !c.PerWorker:
			opts = append(opts, dbos.WithPartitionConcurrency(c.Limit))
		default:
			opts = append(opts, dbos.WithPartitionWorkerConcurrency(c.Limit))
		}
	}
	if t := f.Throttle; t != nil {
		rl := &dbos.RateLimiter{Limit: t.Limit, Period: t.Period}
		if t.Key != "" {
			opts = append(opts, dbos.WithPartitionRateLimiter(rl))
		} else {
			opts = append(opts, dbos.WithRateLimiter(rl))
		}
	}
	return opts
}

// dbosCron gives DBOS the six-field form it wants (seconds first).
func dbosCron(spec string) string {
	if len(strings.Fields(spec)) == 5 {
		return "0 " + spec
	}
	return spec
}

// Register adds a function. Call before Launch.
func (e *Engine) Register(f *Function) error {
	if err := f.validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.launched {
		return fmt.Errorf("register function %s: the engine is already launched", f.ID)
	}
	if _, dup := e.fns[f.ID]; dup {
		return fmt.Errorf("register function %s: already registered", f.ID)
	}
	if f.Flow == "" {
		f.Flow = f.ID
	}
	switch f.retries = f.Retries; f.Retries {
	case 0:
		f.retries = 3
	case run.NoRetries:
		f.retries = 0
	}
	f.e = e
	e.fns[f.ID] = f // DBOS registers its workflow at Launch
	if f.Event != "" {
		e.byEvent[f.Event] = append(e.byEvent[f.Event], f)
	}
	return nil
}

// Functions lists the registered functions.
func (e *Engine) Functions() []*Function {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]*Function, 0, len(e.fns))
	for _, f := range e.fns {
		out = append(out, f)
	}
	return out
}

func (e *Engine) function(id string) (*Function, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	f, ok := e.fns[id]
	return f, ok
}

// input is what a run's workflow receives.
type input struct {
	Event Event `json:"event"`
}

// workflow is the DBOS workflow of one function: the handler, with the run
// context around the DBOS context.
func (f *Function) workflow(ctx dbos.Context, in input) (json.RawMessage, error) {
	f.e.enter()
	defer f.e.leave()
	r := &Run{dctx: ctx, fn: f, event: in.Event, started: time.Now()}
	r.id, _ = dbos.GetWorkflowID(ctx)
	r.owner = f.e.ownerOf(r.id)
	f.e.cfg.Metrics.RunStarted(f.ID)
	out, err := f.Handler(r, in.Event)
	var b []byte
	if err == nil {
		if b, err = json.Marshal(out); err != nil {
			err = fmt.Errorf("function %s: encode output: %w", f.ID, err)
		}
	}
	f.e.endRun(r, err)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// cronTick is fired by a function's schedule and starts that function's run.
// The run's ID comes from the tick time, so a tick fired by two processes
// starts one run.
func (e *Engine) cronTick(ctx dbos.Context, in dbos.ScheduledWorkflowInput) (string, error) {
	id, err := dbos.DecodeScheduleContext[string](in)
	if err != nil {
		return "", err
	}
	f, ok := e.function(id)
	if !ok {
		return "", fmt.Errorf("cron schedule names unknown function %q", id)
	}
	ev := Event{Name: "sluice/cron", ID: "cron-" + in.ScheduledTime.UTC().Format(time.RFC3339), TS: in.ScheduledTime}
	ref, err := e.start(ctx, f, decodeEvent(ev))
	return ref.RunID, err
}

// ErrNoFunction is returned by Send when no function listens to the event.
var ErrNoFunction = errors.New("no function is triggered by this event")

// Send starts a run of every function the event triggers. An event with an
// ID already seen (or an idempotency key already used) starts nothing new.
func (e *Engine) Send(ctx context.Context, ev Event) ([]run.Sent, error) {
	if err := CheckEvent(ev); err != nil {
		return nil, err
	}
	e.mu.RLock()
	fns := e.byEvent[ev.Name]
	launched := e.launched
	e.mu.RUnlock()
	if !launched {
		return nil, errors.New("send event: the engine is not launched")
	}
	if len(fns) == 0 {
		return nil, fmt.Errorf("event %s: %w", quote(ev.Name), ErrNoFunction)
	}
	// Every function's fields are checked before any run starts: a bad
	// event starts nothing.
	d := decodeEvent(ev)
	for _, f := range fns {
		if err := f.checkEvent(d); err != nil {
			return nil, err
		}
	}
	if d.ID == "" {
		d.ID = newID()
	}
	if d.TS.IsZero() {
		d.TS = e.cfg.Now().UTC()
	}
	dctx := e.dctx
	if ctx != nil {
		dctx = dbos.WithoutCancel(e.dctx) // the enqueue must not be torn by a client hanging up
	}
	out := make([]run.Sent, 0, len(fns))
	for _, f := range fns {
		s, err := e.start(dctx, f, d)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

// runID names the run an event starts: the idempotency key's value when the
// function has one, else the event ID.
func (f *Function) runID(ev eventData) string {
	if f.Idempotency != "" {
		if v, ok := ev.field(f.Idempotency); ok {
			return f.ID + ":key:" + v
		}
	}
	return f.ID + ":" + ev.ID
}

// start enqueues one run of f for ev (or finds the run that already exists).
func (e *Engine) start(ctx dbos.Context, f *Function, ev eventData) (run.Sent, error) {
	id := f.runID(ev)
	s := run.Sent{Function: f.ID, RunID: id}
	if f.RateLimit != nil {
		// Only a new run may take a slot of the rate limit: look first.
		existing, err := dbos.ListWorkflows(ctx, dbos.WithFilterWorkflowIDs(id), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(false))
		if err != nil {
			return s, fmt.Errorf("look up run %s: %w", id, err)
		}
		if len(existing) > 0 {
			s.Status = "existing"
			return s, nil
		}
	}
	if rl := f.RateLimit; rl != nil {
		key, _ := ev.field(rl.Key)
		var ok bool
		err := e.whileLocked(ctx, "count the start of "+f.ID, func() (err error) {
			ok, err = e.st.CountStart(ctx, f.ID, key, rl.Period, rl.Limit, e.cfg.Now())
			return err
		})
		if err != nil {
			return s, err
		}
		if !ok {
			s.Status, s.RunID = "dropped", ""
			s.Reason = fmt.Sprintf("rate limit of %d per %s reached", rl.Limit, rl.Period)
			if key != "" {
				s.Reason += fmt.Sprintf(" for %s=%q", rl.Key, key)
			}
			return s, e.whileLocked(ctx, "record the dropped event of "+f.ID, func() error {
				return e.st.RecordDroppedEvent(ctx, store.DroppedEvent{
					Function: f.ID, EventID: ev.ID, EventName: ev.Name, Key: key, Reason: s.Reason, At: e.cfg.Now(),
				})
			})
		}
	}
	opts := []dbos.WorkflowOption{
		dbos.WithWorkflowID(id),
		dbos.WithQueue(f.queue),
		dbos.WithRunInstance(f),
		dbos.WithWorkflowIDReusePolicy(dbos.WorkflowIDReusePolicyReject),
	}
	priority := 0
	if v, ok := ev.field(f.Priority); ok {
		if p, err := strconv.Atoi(v); err == nil {
			priority = p
		}
	}
	opts = append(opts, dbos.WithPriority(dbosPriority(priority)))
	if pk := f.partitionKey(); pk != "" {
		v, ok := ev.field(pk)
		if !ok || v == "" {
			v = "-"
		}
		opts = append(opts, dbos.WithQueuePartitionKey(v))
	}
	runCtx := ctx
	if f.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = dbos.WithTimeout(ctx, f.Timeout)
		defer cancel()
	}
	if _, err := dbos.RunWorkflow(runCtx, f.workflow, input{Event: ev.Event}, opts...); err != nil {
		if errors.Is(err, dbos.ErrWorkflowIDInUse) {
			s.Status = "existing" // the event ID or idempotency key was seen before
			return s, nil
		}
		return s, fmt.Errorf("start run %s of %s: %w", id, f.ID, err)
	}
	s.Status = "queued"
	return s, nil
}

// dbosPriority maps sluice's priority (higher starts sooner, default 0) onto
// DBOS's (lower starts sooner, 0 first).
func dbosPriority(p int) uint {
	const mid = 1 << 20
	p = max(min(p, mid-1), -mid)
	return uint(mid - p)
}

// eventData is an event with its data decoded once, for the fields the
// functions it triggers read from it (keys, priority) and the checks of
// them.
type eventData struct {
	Event
	doc any // the data decoded, numbers as json.Number; nil if none or not one JSON value
}

func decodeEvent(ev Event) eventData {
	d := eventData{Event: ev}
	dec := json.NewDecoder(bytes.NewReader(ev.Data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return d
	}
	if _, err := dec.Token(); err != io.EOF {
		return d // more after the value: the data is not one JSON value
	}
	d.doc = doc
	return d
}

// field reads a dotted path from the event: "data.user.id", "id", "name";
// a path without a known head is read inside data ("documentId" is
// "data.documentId"). Strings come back bare, other values as JSON.
func (d eventData) field(path string) (string, bool) {
	v, ok := d.value(path)
	switch x := v.(type) {
	case string:
		return x, ok
	case json.Number:
		return x.String(), ok
	case nil:
		return "", false
	default:
		b, _ := json.Marshal(x)
		return string(b), ok
	}
}

// value reads a dotted path as field does, decoded (numbers as
// json.Number); ok is false when the path is not there.
func (d eventData) value(path string) (any, bool) {
	switch strings.TrimPrefix(path, "event.") {
	case "id":
		return d.ID, true
	case "name":
		return d.Name, true
	}
	keys := dataKeys(path)
	if keys == nil {
		return nil, false
	}
	cur := d.doc
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// dataKeys is the keys a path (as field reads it) follows inside the
// event's data, one per level; nil when the path names no data: it is
// empty, or names the event's id or name.
func dataKeys(path string) []string {
	if path == "" {
		return nil
	}
	switch path = strings.TrimPrefix(path, "event."); path {
	case "id", "name":
		return nil
	}
	return strings.Split(strings.TrimPrefix(path, "data."), ".")
}

// newID returns a random event ID.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
