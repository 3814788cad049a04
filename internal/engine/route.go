package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govkey"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/llm"
)

// Caller makes governed calls for a flow: one provider key (*Provider) or
// a route over several (*Route).
type Caller interface {
	// Call makes one governed call of flow (see Provider.Call).
	Call(ctx context.Context, flow string, req *llm.ChatRequest) (*llm.ChatResponse, error)
	// Primary is the provider that sizes a backfill's batches: the only
	// one, or a route's first target.
	Primary() *Provider
	// Providers are the keys the calls may run on, in order.
	Providers() []*Provider
	// Check reports whether a call costing c (priced as by Primary's
	// estimator) can ever fit a key the calls may run on: a
	// *governor.TooLargeError when it can fit none.
	Check(c governor.Cost) error
}

// Primary returns p.
func (p *Provider) Primary() *Provider { return p }

// Providers returns p alone.
func (p *Provider) Providers() []*Provider { return []*Provider{p} }

// Check reports whether a call costing c can ever fit p's limits.
func (p *Provider) Check(c governor.Cost) error { return p.Governor.Check(c) }

// Route is a caller over several providers: each call's target is chosen
// by Router before admission (internal/route), its model set to the
// target's, and it is made on that target alone.
type Route struct {
	Name   string
	Router *route.Router
	// Targets are the providers of Router's targets, in the same order;
	// Models the model each one's calls use ("" keeps the request's).
	Targets []*Provider
	Models  []string
	// Now is the route's clock (default time.Now).
	Now func() time.Time
}

// Primary returns the route's first target.
func (rt *Route) Primary() *Provider { return rt.Targets[0] }

// Providers returns the route's targets.
func (rt *Route) Providers() []*Provider { return rt.Targets }

// Check reports whether a call costing c fits at least one target; when it
// fits none, the first target's refusal.
func (rt *Route) Check(c governor.Cost) error {
	var first error
	for _, p := range rt.Targets {
		err := p.Governor.Check(c)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func (rt *Route) now() time.Time {
	if rt.Now != nil {
		return rt.Now()
	}
	return time.Now()
}

// Call picks the call's target, makes the call there, and tells the router
// how it went. The response names the target (ChatResponse.Target). When
// every target is out (their calls failed) the call waits durably until
// the first gets a call again; when it can fit no target it fails at once,
// naming each target's limit.
func (rt *Route) Call(ctx context.Context, flow string, req *llm.ChatRequest) (*llm.ChatResponse, error) {
	reqs := make([]*llm.ChatRequest, len(rt.Targets))
	costs := make([]governor.Cost, len(rt.Targets))
	for i, p := range rt.Targets {
		r := req
		if m := rt.Models[i]; m != "" && m != req.Model {
			c := *req
			c.Model = m
			r = &c
		}
		r, err := p.Client.ApplyDefaults(r)
		if err != nil {
			return nil, NonRetriable(fmt.Errorf("route %s, target %s: %w", rt.Name, p.Name, err))
		}
		reqs[i], costs[i] = r, p.Estimator.Cost(r)
	}
	ch, err := rt.Router.Pick(rt.now(), flow, func(i int) governor.Cost { return costs[i] })
	if err != nil {
		if oe, ok := errors.AsType[*route.OutError](err); ok {
			return nil, &quotaWait{err: err, d: max(oe.Wait, time.Second), kind: "route", on: "every target out"}
		}
		if tl, ok := errors.AsType[*route.TooLargeError](err); ok {
			// Refused before any wait: each target's governor counts it for
			// the flow, as its own refusals.
			for i, p := range rt.Targets {
				p.Governor.Inside(govkey.Key{}).RefusedFlow(flow, tl.Errs[i].Limit)
			}
			rt.Primary().log().Warn("sluice: refused a call that can never fit any target", "route", rt.Name, "flow", flow, "err", err)
			return nil, NonRetriable(err)
		}
		return nil, err
	}
	p := rt.Targets[ch.Index]
	resp, err := p.call(ctx, flow, reqs[ch.Index], costs[ch.Index])
	rt.Router.Done(rt.now(), ch.Index, Outcome(err))
	if err != nil {
		return nil, fmt.Errorf("route %s, target %s: %w", rt.Name, p.Name, err)
	}
	return resp, nil
}

// Outcome reads what a call's error says of the target it ran on: the
// engine's own (a wait for quota, a stop, a refusal up front) say nothing
// of it; the provider's are read by route.OutcomeOf.
func Outcome(err error) route.Outcome {
	if err == nil {
		return route.OK
	}
	var qw *quotaWait
	if errors.As(err, &qw) || errors.Is(err, errDraining) || errors.Is(err, context.Canceled) {
		return route.Abandoned
	}
	if _, ok := errors.AsType[*governor.TooLargeError](err); ok {
		return route.Abandoned
	}
	if _, ok := errors.AsType[*governor.WaitError](err); ok {
		return route.Abandoned
	}
	if !llm.Advise(err).Known && errors.Is(err, context.DeadlineExceeded) {
		return route.Failed
	}
	return route.OutcomeOf(err)
}
