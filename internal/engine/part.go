package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// PartHandler is the body of a part of a function: it receives the input
// the run that started it gave, and its result is the part's output.
type PartHandler func(r *Run, in json.RawMessage) (any, error)

// part is a registered part of a function: a DBOS workflow of its own,
// which a run of the function starts as a child, so that several parts of
// one run execute at once. Its steps are durable as a run's are: a part
// that a crash cut short is resumed by DBOS's recovery with its finished
// steps not re-run, and the run that started it finds it again by its ID.
type part struct {
	fn   *Function
	name string
	h    PartHandler
}

// ConfigName makes each part its own DBOS registration.
func (p *part) ConfigName() string { return p.fn.ID + "/" + p.name }

// RegisterPart adds a part named name to the registered function f. Call
// before Launch.
func (e *Engine) RegisterPart(f *Function, name string, h PartHandler) error {
	if h == nil {
		return fmt.Errorf("register part %q of %s: handler is nil", name, f.ID)
	}
	if !idPattern.MatchString(name) {
		return fmt.Errorf("register part %q of %s: want 1-128 letters, digits or ._:- starting with a letter or digit", name, f.ID)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.launched {
		return fmt.Errorf("register part %s of %s: the engine is already launched", name, f.ID)
	}
	if e.fns[f.ID] != f {
		return fmt.Errorf("register part %s of %s: the function is not registered", name, f.ID)
	}
	if _, dup := f.parts[name]; dup {
		return fmt.Errorf("register part %s of %s: already registered", name, f.ID)
	}
	p := &part{fn: f, name: name, h: h}
	if f.parts == nil {
		f.parts = map[string]*part{}
	}
	f.parts[name] = p // DBOS registers its workflow at Launch
	return nil
}

// workflow is the DBOS workflow of a part: the handler, with a run context
// of the function it belongs to (its flow, retries and classifier) around
// the DBOS context.
func (p *part) workflow(ctx dbos.Context, in json.RawMessage) (json.RawMessage, error) {
	e := p.fn.e
	e.enter()
	defer e.leave()
	// A part has no event of its own: its input is what the run gave it.
	r := &Run{dctx: ctx, fn: p.fn, started: time.Now()}
	r.id, _ = dbos.GetWorkflowID(ctx)
	r.owner = e.ownerOf(r.id)
	defer e.notePartEnded()
	out, err := p.h(r, in)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("part %s of %s: encode output: %w", p.name, p.fn.ID, err)
	}
	return b, nil
}

// Part is a part a run started, executing beside it.
type Part struct {
	id   string
	h    dbos.WorkflowHandle[json.RawMessage]
	dctx dbos.Context // the run's, which started it
}

// ID is the part's DBOS workflow ID: the run's ID, a slash, and the id
// StartPart was given.
func (p *Part) ID() string { return p.id }

// StartPart starts the part named name of r's function with input in (any
// value that encodes as JSON), under the ID id, unique within the run. It
// is durable as a step is: a replay of the run finds the part it started
// then, running or ended, instead of starting another. Call it from the
// run's own goroutine, not from inside a step.
func StartPart(r *Run, name, id string, in any) (*Part, error) {
	p, ok := r.fn.parts[name]
	if !ok {
		return nil, fmt.Errorf("start part %s of %s: no such part", name, r.fn.ID)
	}
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("start part %s of %s: id %q: want 1-128 letters, digits or ._:- starting with a letter or digit", name, r.fn.ID, id)
	}
	data, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("start part %s of %s: encode input: %w", name, r.fn.ID, err)
	}
	wid := r.id + "/" + id
	h, err := dbos.RunWorkflow(r.dctx, p.workflow, json.RawMessage(data), dbos.WithWorkflowID(wid), dbos.WithRunInstance(p))
	if err != nil {
		return nil, fmt.Errorf("start part %s of %s: %w", id, r.id, err)
	}
	return &Part{id: wid, h: h, dctx: r.dctx}, nil
}

// Wait waits for the part to end and returns its output. Its outcome is
// recorded in the run, so a replay gets it without waiting again. Call it
// once, from the run's own goroutine.
//
// It waits in turns of partPoll: DBOS's wait for a part it found already
// started (a replay after a restart) does not end with the run's context,
// so a stopping engine would wait for the part — which is paused too —
// until its shutdown timed out. A turn that ends with the run's context
// returns the run's cause, and nothing is recorded.
func (p *Part) Wait() (json.RawMessage, error) {
	for {
		began := time.Now()
		out, err := p.h.GetResult(dbos.WithHandleTimeout(partPoll))
		if err == nil {
			return out, nil
		}
		if p.dctx.Err() != nil {
			return nil, fmt.Errorf("part %s: %w", p.id, context.Cause(p.dctx))
		}
		// A turn that ran out (a part's own recorded error comes back
		// at once, whatever it says): the part still runs.
		if de, ok := errors.AsType[*dbos.Error](err); ok && de.Code == dbos.ErrorCodeTimeout && time.Since(began) >= partPoll {
			continue
		}
		return nil, fmt.Errorf("part %s: %w", p.id, err)
	}
}

// partPoll is how long one turn of Part.Wait waits.
const partPoll = time.Second

// PartOf returns the part id, which an earlier run of r's function started
// and handed on to r, so that r waits for it as for one it started. It is
// durable as a step is.
func PartOf(r *Run, id string) (*Part, error) {
	h, err := dbos.RetrieveWorkflow[json.RawMessage](r.dctx, id)
	if err != nil {
		return nil, fmt.Errorf("find part %s: %w", id, err)
	}
	return &Part{id: id, h: h, dctx: r.dctx}, nil
}

// PartsEnded waits, as one step named name, until at least one of the
// parts ids has ended, and returns those that have, in the order of ids,
// with what then returns once they have. Both are recorded, so a replay
// takes the same path: a run that waits for whichever of its parts ends
// first, not for each in turn, acts on what this step saw. Wait then
// gives each ended part's output at once. The wait also ends, with no
// part ended, once sooner (if not nil) reports true: it is asked every
// partPoll at most, and whenever a part of this process ends.
//
// A stopping engine ends the wait unrecorded, and the run resumes with it.
func PartsEnded[R any](r *Run, name string, ids []string, then func() R, sooner func() bool) ([]string, R, error) {
	type ended struct {
		IDs  []string `json:"ids"`
		Then R        `json:"then"`
	}
	out, err := Step(r, name, func(ctx context.Context) (ended, error) {
		dctx, release := drainContext(ctx)
		defer release()
		ids, err := r.fn.e.partsEnded(dctx, ids, sooner)
		if err != nil {
			if errors.Is(context.Cause(dctx), errDraining) && ctx.Err() == nil {
				return ended{}, errDraining
			}
			return ended{}, err
		}
		return ended{IDs: ids, Then: then()}, nil
	})
	return out.IDs, out.Then, err
}

// partsEnded looks for the ended ones of the parts ids until there is one,
// or sooner reports true: again each time a part of this process returns
// (DBOS records its end just after, so the looks that follow come closer
// together), and at least every partPoll, for parts another process runs.
func (e *Engine) partsEnded(ctx context.Context, ids []string, sooner func() bool) ([]string, error) {
	c, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	wait := time.Millisecond
	for {
		wake := e.partEndedChan() // before the look: an end after it wakes this wait
		ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDs(ids...), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(false))
		if err != nil {
			return nil, fmt.Errorf("look for ended parts: %w", err)
		}
		done := map[string]bool{}
		for _, w := range ws {
			switch w.Status {
			case dbos.WorkflowStatusPending, dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusDelayed:
			default:
				done[w.ID] = true
			}
		}
		if len(done) > 0 {
			return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !done[id] }), nil
		}
		t := time.NewTimer(min(wait, partPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-wake:
			t.Stop()
			wait = time.Millisecond
		case <-t.C:
			wait = min(2*wait, partPoll)
		}
		if sooner != nil && sooner() {
			return nil, nil
		}
	}
}

// partEndedChan is closed when a part of this process next returns.
func (e *Engine) partEndedChan() <-chan struct{} {
	e.partsMu.Lock()
	defer e.partsMu.Unlock()
	if e.partEnded == nil {
		e.partEnded = make(chan struct{})
	}
	return e.partEnded
}

// notePartEnded wakes the waits for parts.
func (e *Engine) notePartEnded() {
	e.partsMu.Lock()
	defer e.partsMu.Unlock()
	if e.partEnded != nil {
		close(e.partEnded)
		e.partEnded = nil
	}
}

// GoingPart is a part that has not ended, as PartsGoing finds it.
type GoingPart struct {
	ID    string          `json:"id"`
	Run   string          `json:"run"`   // the run that started it
	Input json.RawMessage `json:"input"` // as it was started with; empty if unreadable
}

// PartsGoing lists, as one step named name, the parts of earlier runs of
// r's function that have not ended and that this process's version
// executes, oldest first: a run that takes them on (PartOf) waits for
// them as for its own. Parts of another version are not listed: they go
// only when a person resumes them.
func PartsGoing(r *Run, name string) ([]GoingPart, error) {
	return Step(r, name, func(ctx context.Context) ([]GoingPart, error) {
		c, err := r.fn.e.client(ctx)
		if err != nil {
			return nil, err
		}
		ws, err := dbos.ListWorkflows(c, dbos.WithFilterWorkflowIDPrefix(r.fn.ID+":"), dbos.WithFilterHasParent(true),
			dbos.WithFilterStatus(dbos.WorkflowStatusPending, dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusDelayed),
			dbos.WithFilterAppVersion(c.GetApplicationVersion()), dbos.WithFilterLoadOutput(false))
		if err != nil {
			return nil, fmt.Errorf("look for parts going: %w", err)
		}
		var out []GoingPart
		for _, w := range ws {
			if !strings.HasPrefix(w.Name, r.fn.ID+"/") || w.ParentWorkflowID == r.id {
				continue // a part of another function whose ID r's begins, or r's own
			}
			in, ok := rawInput(w.Input)
			if !ok {
				in = nil
			}
			out = append(out, GoingPart{ID: w.ID, Run: w.ParentWorkflowID, Input: in})
		}
		return out, nil
	})
}

// rawInput is a workflow's input as ListWorkflows gives it, as JSON.
func rawInput(v any) (json.RawMessage, bool) {
	switch x := v.(type) {
	case nil:
		return nil, false
	case string:
		return json.RawMessage(x), json.Valid([]byte(x))
	case *string:
		if x == nil {
			return nil, false
		}
		return json.RawMessage(*x), json.Valid([]byte(*x))
	case json.RawMessage:
		return x, json.Valid(x)
	}
	b, err := json.Marshal(v)
	return b, err == nil
}
