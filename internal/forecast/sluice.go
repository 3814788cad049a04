package forecast

import (
	"cmp"
	"errors"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
)

// sluicePolicy drives the production governor: one governor for the key,
// every flow a governor flow with the scenario's weight and priority. Each
// flow keeps one reservation in line and a few calls in flight; batches are
// sized to the largest that fits every limit (and what the flow has), every
// call sets max_tokens, and the governor learns from the provider's headers
// and rejections exactly as the engine and the gateway do.
type sluicePolicy struct {
	g       *governor.Governor
	profile llm.Profile
	flows   []*sluiceFlow
	wakeAt  time.Time
	// progressEvery bounds how long a flow's call should take at its share
	// of the key: batches are sized so every flow keeps finishing work.
	progressEvery time.Duration
	// defaultMax is what sluice gives a call whose flow sets no max_tokens
	// per item: the provider's own default, so it is charged the same.
	defaultMax int64
}

var _ Policy = (*sluicePolicy)(nil)

type sluiceFlow struct {
	f        *FlowState
	pending  []pendingCall // reservations waiting, oldest first
	covered  int           // the items pending's reservations are for
	inflight int
	faults
}

// faults is how a flow of sluice's policies answers its calls' failures.
type faults struct {
	retryAt time.Time // after a fault, back off before the next call
	backoff time.Duration
	// split caps the flow's batches after the provider refused one as too
	// large (0: no cap): half the refused batch, down to one item.
	split int
}

// answered deals with items by err, the answer to the call that carried
// them, and has wake called when the flow may call again: a batch too
// large for a limit the governor was not told of is split, down to one
// item, before any item is refused (the governor has learnt the limit if
// the answer named it, and sizes the next batches to it); a rate limit —
// and with quotaWaits an exhausted quota, on which a router takes its
// target out — puts the items back for the next call at once; any other
// failure puts them back and backs the flow off.
func (s *faults) answered(w *World, f *FlowState, items []Item, err error, quotaWaits bool, wake func()) {
	var (
		rl *llm.RateLimitError
		tl *llm.TooLargeError
		qe *llm.QuotaError
	)
	switch {
	case err == nil:
		s.backoff = 0
	case errors.As(err, &tl) && len(items) > 1:
		s.split = len(items) / 2
		w.PutBack(f, items)
		w.At(w.now, wake)
	case errors.As(err, &tl):
		w.Refuse(f, items)
	case errors.As(err, &rl), quotaWaits && errors.As(err, &qe):
		w.PutBack(f, items)
		w.At(w.now, wake)
	default:
		w.PutBack(f, items)
		s.backoff = min(max(2*s.backoff, time.Second), time.Minute)
		s.retryAt = w.now.Add(s.backoff)
		w.At(s.retryAt, wake)
	}
}

// defaultProgressEvery is what sluice's backfills ask batches to take at
// the flow's share by default (governor.DefaultWithin), so that the
// simulation sizes batches as they do.
const defaultProgressEvery = governor.DefaultWithin

// pendingCall is a reservation for up to batch items of a flow.
type pendingCall struct {
	r     *governor.Reservation
	ready <-chan struct{} // r.Ready(): closed once r is admitted or refused
	batch int
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// maxQueued is how many reservations one flow keeps in line. Calls in
// flight do not count: a flow whose calls are all in flight is still
// backlogged, and must not lose its place in the fair order.
const maxQueued = 32

// NewSluice returns the policy of sluice's governor for sc, which sees only
// the limits sc announces: one governor for the key, every flow a governor
// flow with the scenario's weight, priority and budget.
func NewSluice(sc *Scenario) (Policy, error) {
	if sc.Routed() {
		return newRouted(sc, false)
	}
	sc = sc.Announced()
	cfg := governor.Config{
		Key:          sc.Name,
		Limits:       sc.Provider.Limits,
		FixedWindows: sc.Provider.FixedWindows,
		SettleOutput: sc.Provider.SettleOutput,
		// Priced only when a flow has a budget of its own, which needs
		// the key's price to charge calls by.
		Price: sc.KeyPrice(),
	}
	for _, f := range sc.Flows {
		cfg.Flows = append(cfg.Flows, governor.FlowConfig{Name: f.Name, Weight: f.Weight, Priority: f.Priority, Budget: f.Budget})
	}
	g, err := governor.New(cfg)
	if err != nil {
		return nil, err
	}
	return &sluicePolicy{g: g, progressEvery: defaultProgressEvery, profile: sc.Provider.Profile, defaultMax: sc.Provider.DefaultMaxTokens}, nil
}

func (p *sluicePolicy) Start(w *World) {
	for _, f := range w.flows {
		p.flows = append(p.flows, &sluiceFlow{f: f})
	}
}

func (p *sluicePolicy) cost(f *FlowState, n int) governor.Cost {
	return governor.Cost{Requests: 1, Input: f.cfg.PromptTokens + int64(n)*f.cfg.ItemInputTokens, Output: p.maxTokens(f, n)}
}

func (p *sluicePolicy) maxTokens(f *FlowState, n int) int64 {
	if f.cfg.ItemMaxTokens == 0 {
		return p.defaultMax
	}
	return int64(n) * f.cfg.ItemMaxTokens
}

func (p *sluicePolicy) Wake(w *World) {
	for {
		p.reserve(w)
		next := p.g.Advance(w.now)
		called := false
		for _, sf := range p.flows {
			// Only the first reservation of a flow's line can have been
			// admitted or refused since the last look: the governor
			// admits and refuses a flow's calls in their order. Its Ready
			// channel says so without a lock, so a wake costs one look per
			// flow, not one per reservation.
			for len(sf.pending) > 0 && closed(sf.pending[0].ready) {
				if sf.pending[0].r.Err() != nil {
					// A reservation the governor refused — a limit learned
					// lower than its batch needs — is dropped; reserve sizes
					// the next batch to the limits as they are now, down to
					// one item.
					sf.covered -= sf.pending[0].batch
					sf.pending = sf.pending[1:]
				} else {
					p.call(w, sf)
				}
				called = true
			}
		}
		if called {
			continue // the flows that just called may queue their next reservation
		}
		if !next.IsZero() && (next.Before(p.wakeAt) || !p.wakeAt.After(w.now)) {
			p.wakeAt = next
			w.At(next, func() { p.Wake(w) })
		}
		return
	}
}

// reserve keeps every flow with work in line: reservations for its eligible
// items, up to maxQueued of them, so a backlogged flow always has a
// reservation waiting when room frees.
func (p *sluicePolicy) reserve(w *World) {
	for _, sf := range p.flows {
		f := sf.f
		if w.now.Before(sf.retryAt) {
			continue
		}
		for len(f.queue) > sf.covered && len(sf.pending) < maxQueued {
			base := governor.Cost{Requests: 1, Input: f.cfg.PromptTokens}
			per := governor.Cost{Input: f.cfg.ItemInputTokens, Output: f.cfg.ItemMaxTokens}
			if f.cfg.ItemMaxTokens == 0 {
				base.Output = p.defaultMax
			}
			n := p.g.BatchSize(w.now, f.cfg.Name, base, per, max(f.cfg.BatchMax, 1), cmp.Or(f.cfg.Within, p.progressEvery))
			if sf.split > 0 {
				n = min(n, sf.split)
			}
			// Reserve for the items there are, not for a full batch: a call
			// of a flow whose items arrive one by one is not charged, nor
			// made to wait, for items it does not carry.
			n = min(n, len(f.queue)-sf.covered)
			if n == 0 {
				// No call carrying even one item can ever fit: refuse, don't wait.
				w.Refuse(f, w.Take(f, len(f.queue)-sf.covered))
				break
			}
			// Reserve for a full batch; the items are taken when the call is
			// admitted, so items that arrive while it waits ride along, and
			// what is not used is given back then.
			r, err := p.g.Reserve(w.now, f.cfg.Name, p.cost(f, n))
			if err != nil {
				w.Refuse(f, w.Take(f, len(f.queue)-sf.covered))
				break
			}
			sf.pending = append(sf.pending, pendingCall{r: r, ready: r.Ready(), batch: n})
			sf.covered += n
		}
	}
}

func (p *sluicePolicy) call(w *World, sf *sluiceFlow) {
	pc, f := sf.pending[0], sf.f
	r := pc.r
	sf.pending = sf.pending[1:]
	sf.covered -= pc.batch
	sf.inflight++
	items := w.Take(f, pc.batch)
	if len(items) == 0 {
		// Earlier calls took what this one was reserved for.
		sf.inflight--
		r.Cancel(w.now)
		return
	}
	if len(items) < pc.batch {
		r.Shrink(w.now, p.cost(f, len(items)))
	}
	w.Send(f, items, r.Cost().Output, func(o Outcome) {
		sf.inflight--
		// The governor learns from the provider's answer exactly as the
		// engine and the gateway do: read as a client would read it, and fed
		// back by the same function.
		used, snap, err := p.read(w.now, o)
		llm.Feedback(w.now, p.g, r, used, snap, err)
		sf.answered(w, f, items, err, false, func() { p.Wake(w) })
	})
}

// read is what a client makes of a simulated answer: the usage of a
// success, the limits its headers report, and the error a Client would
// return — the profile's own classification of status, headers and body,
// or the transport error of an answer that never came whole.
func (p *sluicePolicy) read(now time.Time, o Outcome) (governor.Cost, governor.Snapshot, error) {
	return readAnswer(p.profile, now, o)
}

// readAnswer is what a client of profile makes of a simulated answer.
func readAnswer(profile llm.Profile, now time.Time, o Outcome) (governor.Cost, governor.Snapshot, error) {
	resp := o.Response
	var snap governor.Snapshot
	if len(resp.Header) > 0 {
		snap = profile.Snapshot(resp.Header, now)
	}
	switch resp.Fault {
	case FaultTimeout:
		return governor.Cost{}, snap, &llm.TransportError{Kind: llm.Timeout}
	case FaultReset:
		return governor.Cost{}, snap, &llm.TransportError{Kind: llm.Reset}
	case FaultBadJSON:
		return governor.Cost{}, snap, &llm.TransportError{Kind: llm.Malformed}
	}
	if err := profile.Classify(resp.Status, resp.Header, resp.Body); err != nil {
		return governor.Cost{}, snap, err
	}
	return governor.Cost{Input: o.Request.Input, Output: resp.Output}, snap, nil
}
