package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	r.owner = e.ownerOf(ctx, r.id)
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
