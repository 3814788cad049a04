package engine

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotReplayable is returned by Replay when the event would start no
// run: the function's idempotency key, or its rate limit, stops it.
var ErrNotReplayable = errors.New("the replayed event started no run")

// Replayed says what Replay started: the new run, and the new event ID
// the event's data was sent under.
type Replayed struct {
	RunID    string `json:"id"`
	EventID  string `json:"event_id"`
	ReplayOf string `json:"replay_of"`
}

// Replay sends the event that started run id again, with the same name
// and data under a new event ID, to the run's function only, and returns
// the run it started. Unlike a re-run, the new run executes every step.
// A function whose idempotency key names the event's data starts nothing
// for it (the key is used): Replay then fails with ErrNotReplayable, as it
// does when the function's rate limit drops the event.
func (e *Engine) Replay(ctx context.Context, id string) (Replayed, error) {
	d, err := e.runDetail(ctx, id, 1)
	if err != nil {
		return Replayed{}, err
	}
	if d.Event == nil {
		return Replayed{}, fmt.Errorf("run %s: its event is not recorded: %w", id, ErrNotReplayable)
	}
	fn, _ := e.function(d.Function)
	ev := decodeEvent(*d.Event)
	ev.ID, ev.TS = newID(), e.cfg.Now().UTC()
	dctx, err := e.client(ctx)
	if err != nil {
		return Replayed{}, err
	}
	s, err := e.start(dctx, fn, ev)
	if err != nil {
		return Replayed{}, err
	}
	switch s.Status {
	case "queued":
		return Replayed{RunID: s.RunID, EventID: ev.ID, ReplayOf: id}, nil
	case "existing":
		return Replayed{}, fmt.Errorf("run %s: the event's idempotency key (field %s of function %s) names run %s, which exists: %w",
			id, quote(fn.Idempotency), fn.ID, s.RunID, ErrNotReplayable)
	}
	return Replayed{}, fmt.Errorf("run %s: %s: %w", id, s.Reason, ErrNotReplayable)
}
