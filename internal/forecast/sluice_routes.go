package forecast

import (
	"cmp"
	"errors"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/llm"
)

// SluiceOneKey names the policy of sluice's governor on a scenario's first
// target alone (NewSluiceOneKey).
const SluiceOneKey = "sluice-one-key"

// routedPolicy is sluice on a scenario with targets, as production runs
// it: one production governor per target (its limits, its price, its
// budget as MPD and MPM), and per flow a route.Router over the flow's
// targets. Each call's target is picked by Router.Pick before the call is
// reserved on that target's governor; how the call went is told to the
// router (Router.Done) and to the governor (llm.Feedback), as the engine
// and the gateway do. A call is made on one target at a time: its items
// are taken when its reservation is admitted and given back when it
// fails, so an item is completed once.
type routedPolicy struct {
	targets       []routedTarget
	flows         []*routedFlow
	wakeAt        time.Time
	progressEvery time.Duration
	sc            *Scenario
	oneKey        bool
}

type routedTarget struct {
	g          *governor.Governor
	profile    llm.Profile
	defaultMax int64
}

type routedFlow struct {
	f       *FlowState
	router  *route.Router
	route   []int // the world's index of each of the router's targets
	pending []routedCall
	covered int
	faults
}

// routedCall is a reservation for up to batch items of a flow on one
// target.
type routedCall struct {
	r     *governor.Reservation
	ready <-chan struct{}
	batch int
	t, ri int // the target: its index in the world and in the route
	probe bool
}

// NewSluiceOneKey returns sluice on sc's first target alone, every flow's
// route that target: the baseline a route is measured against. On a
// scenario without targets it is NewSluice.
func NewSluiceOneKey(sc *Scenario) (Policy, error) {
	if !sc.Routed() {
		return NewSluice(sc)
	}
	return newRouted(sc, true)
}

func newRouted(sc *Scenario, oneKey bool) (Policy, error) {
	p := &routedPolicy{progressEvery: defaultProgressEvery, sc: sc, oneKey: oneKey}
	for i := range sc.Targets {
		t := &sc.Targets[i]
		cfg := governor.Config{
			Key:          t.Name,
			Limits:       t.Budget.Limits(t.Provider.Announced()),
			FixedWindows: t.Provider.FixedWindows,
			SettleOutput: t.Provider.SettleOutput,
			Price:        t.Price,
		}
		for _, f := range sc.Flows {
			cfg.Flows = append(cfg.Flows, governor.FlowConfig{Name: f.Name, Weight: f.Weight, Priority: f.Priority})
		}
		g, err := governor.New(cfg)
		if err != nil {
			return nil, err
		}
		p.targets = append(p.targets, routedTarget{g: g, profile: t.Provider.Profile, defaultMax: t.Provider.DefaultMaxTokens})
	}
	return p, nil
}

func (p *routedPolicy) Start(w *World) {
	for _, f := range w.flows {
		rt := p.sc.RouteOf(&f.cfg)
		if p.oneKey {
			rt = []int{0}
		}
		cfg := route.Config{Name: f.cfg.Name, Rule: f.cfg.Rule, MaxWait: f.cfg.MaxWait}
		for _, t := range rt {
			cfg.Targets = append(cfg.Targets, route.Target{Name: p.sc.Targets[t].Name, Governor: p.targets[t].g})
		}
		r, err := route.New(cfg)
		if err != nil {
			// Validate checked every route: a flow has at least one target,
			// each named once.
			panic(err)
		}
		p.flows = append(p.flows, &routedFlow{f: f, router: r, route: rt})
	}
}

func (p *routedPolicy) maxTokens(t int, f *FlowState, n int) int64 {
	if f.cfg.ItemMaxTokens == 0 {
		return p.targets[t].defaultMax
	}
	return int64(n) * f.cfg.ItemMaxTokens
}

func (p *routedPolicy) cost(t int, f *FlowState, n int) governor.Cost {
	return governor.Cost{Requests: 1, Input: f.cfg.PromptTokens + int64(n)*f.cfg.ItemInputTokens, Output: p.maxTokens(t, f, n)}
}

func (p *routedPolicy) Wake(w *World) {
	for {
		p.reserve(w)
		var next time.Time
		for _, t := range p.targets {
			if n := t.g.Advance(w.now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		called := false
		for _, sf := range p.flows {
			// A flow's reservations are on several governors, each
			// admitting in its own order: look at each.
			for k := 0; k < len(sf.pending); {
				pc := sf.pending[k]
				if !closed(pc.ready) {
					k++
					continue
				}
				sf.pending = append(sf.pending[:k], sf.pending[k+1:]...)
				sf.covered -= pc.batch
				if pc.r.Err() != nil {
					// Refused: a limit learnt lower than its batch needs;
					// reserve sizes the next batch to the limits as they are.
					if pc.probe {
						sf.router.Done(w.now, pc.ri, route.Abandoned)
					}
				} else {
					p.call(w, sf, pc)
				}
				called = true
			}
		}
		if called {
			continue
		}
		if !next.IsZero() && (next.Before(p.wakeAt) || !p.wakeAt.After(w.now)) {
			p.wakeAt = next
			w.At(next, func() { p.Wake(w) })
		}
		return
	}
}

// reserve keeps every flow with work in line, as the one-key policy does,
// each reservation on the target its router picks for it.
func (p *routedPolicy) reserve(w *World) {
	for _, sf := range p.flows {
		f := sf.f
		if w.now.Before(sf.retryAt) {
			continue
		}
		for len(f.queue) > sf.covered && len(sf.pending) < maxQueued {
			avail := len(f.queue) - sf.covered
			// The batch each target would take: its largest that fits
			// and finishes within progressEvery at the flow's share — on a
			// route of one target. On a route of several the flow makes
			// progress on whichever admits it, so a target whose limits
			// (a day's tokens paced over the day) would take longer than
			// that for a full batch is not made to spend its allowance on
			// a prompt per item: its batches are the largest that fit.
			within := cmp.Or(f.cfg.Within, p.progressEvery)
			if len(sf.route) > 1 {
				within = 0
			}
			ns := make([]int, len(sf.route))
			for ri, t := range sf.route {
				base := governor.Cost{Requests: 1, Input: f.cfg.PromptTokens}
				per := governor.Cost{Input: f.cfg.ItemInputTokens, Output: f.cfg.ItemMaxTokens}
				if f.cfg.ItemMaxTokens == 0 {
					base.Output = p.targets[t].defaultMax
				}
				n := p.targets[t].g.BatchSize(w.now, f.cfg.Name, base, per, max(f.cfg.BatchMax, 1), within)
				if sf.split > 0 {
					n = min(n, sf.split)
				}
				ns[ri] = min(n, avail)
			}
			ch, err := sf.router.Pick(w.now, f.cfg.Name, func(ri int) governor.Cost {
				return p.cost(sf.route[ri], f, max(ns[ri], 1))
			})
			var out *route.OutError
			switch {
			case errors.As(err, &out) && out.Until.After(w.now):
				// Every target is out: try again when the first is back.
				sf.retryAt = out.Until
				w.At(out.Until, func() { p.Wake(w) })
			case errors.As(err, &out):
				// Every target is out, and the first one back has its one
				// call in flight (the router then names a time already
				// past): its answer wakes the policy.
			case err != nil:
				// No call carrying even one item fits any target: refuse.
				w.Refuse(f, w.Take(f, avail))
			}
			if err != nil {
				break
			}
			t, n := sf.route[ch.Index], max(ns[ch.Index], 1)
			r, err := p.targets[t].g.Reserve(w.now, f.cfg.Name, p.cost(t, f, n))
			if err != nil {
				if ch.Probe {
					sf.router.Done(w.now, ch.Index, route.Abandoned)
				}
				w.Refuse(f, w.Take(f, avail))
				break
			}
			sf.pending = append(sf.pending, routedCall{r: r, ready: r.Ready(), batch: n, t: t, ri: ch.Index, probe: ch.Probe})
			sf.covered += n
		}
	}
}

func (p *routedPolicy) call(w *World, sf *routedFlow, pc routedCall) {
	f, r, tg := sf.f, pc.r, &p.targets[pc.t]
	// A target taken out since the reservation was made (its calls
	// failed) gets no call: the reservation is given back, and its items
	// go to the target the router picks next.
	if !pc.probe && sf.router.Stats(w.now)[pc.ri].Out {
		r.Cancel(w.now)
		return
	}
	items := w.Take(f, pc.batch)
	if len(items) == 0 {
		r.Cancel(w.now)
		if pc.probe {
			sf.router.Done(w.now, pc.ri, route.Abandoned)
		}
		return
	}
	if len(items) < pc.batch {
		r.Shrink(w.now, p.cost(pc.t, f, len(items)))
	}
	w.SendTo(f, pc.t, items, r.Cost().Output, func(o Outcome) {
		used, snap, err := readAnswer(tg.profile, w.now, o)
		llm.Feedback(w.now, tg.g, r, used, snap, err)
		sf.router.Done(w.now, pc.ri, route.OutcomeOf(err)) // as production reads it
		// An exhausted quota puts the items back at once: the router has
		// taken the target out, and their next call goes where it says.
		sf.answered(w, f, items, err, true, func() { p.Wake(w) })
	})
}
