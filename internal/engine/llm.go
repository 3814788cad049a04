package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Provider is one provider key: its client, the governor that owns its
// quota, and the estimator that prices its calls.
type Provider struct {
	Name      string
	Client    *llm.Client
	Governor  *governor.Governor
	Estimator *llm.Estimator
	// MaxInlineWait is the longest a step waits for quota inside the step;
	// a longer wait ends the attempt and sleeps durably instead (default
	// DefaultMaxInlineWait).
	MaxInlineWait time.Duration
	// Now is the clock of feedback to the governor (default time.Now).
	Now func() time.Time
	// Speed is how many times as fast as the wall clock Now runs: the
	// inline wait lasts MaxInlineWait divided by it (default 1).
	Speed float64
	// Logger, if set, gets a line for every call the governor refuses up
	// front and every provider rejection, naming the limit and the numbers.
	// Default: none.
	Logger *slog.Logger
	// Metrics, if set, counts the calls' admissions, admission waits,
	// tokens and provider rejections under the key Name (docs/metrics.md).
	// Default: none.
	Metrics *metrics.Set
}

// LLM makes a governed chat call as one durable step: reserve the cost with
// the governor, call, settle with the real usage. Once the call has
// finished its response is recorded, so a crash after it never bills it
// again. The recorded response keeps the body fields (choices, usage), not
// the headers.
//
// Fields set in t override the provider client's deadlines for this call
// (llm.WithTimeouts); the zero value keeps them.
func LLM(r *Run, name string, p Caller, req *llm.ChatRequest, t llm.Timeouts) (*llm.ChatResponse, error) {
	return ObservedLLM(r, name, p, req, t, nil)
}

// CallObserver hears how the governed calls of an ObservedLLM step go, in
// the engine's clock: a caller that sizes how many calls it keeps going
// learns from it what the governor admits and how long the provider takes.
// Its methods are called from the step's goroutine.
type CallObserver interface {
	// Admitted: the governor admitted a call after it waited waited in
	// the governor's line.
	Admitted(waited time.Duration)
	// Queued: a call gave up waiting for quota after waited, to wait
	// durably instead (see Provider.MaxInlineWait).
	Queued(waited time.Duration)
	// Answered: the provider answered an admitted call, or failed it,
	// latency after it was sent.
	Answered(latency time.Duration)
}

type observerKey struct{}

// ObservedLLM is LLM, telling o (if not nil) how each attempt's call goes.
// A replay of a recorded call tells it nothing.
func ObservedLLM(r *Run, name string, p Caller, req *llm.ChatRequest, t llm.Timeouts, o CallObserver) (*llm.ChatResponse, error) {
	if p == nil || p == (*Provider)(nil) {
		return nil, fmt.Errorf("step %s: no provider configured for LLM calls", name)
	}
	flow := r.fn.Flow
	return Step(r, name, func(ctx context.Context) (*llm.ChatResponse, error) {
		if t != (llm.Timeouts{}) {
			ctx = llm.WithTimeouts(ctx, t)
		}
		if o != nil {
			ctx = context.WithValue(ctx, observerKey{}, o)
		}
		return p.Call(ctx, flow, req)
	})
}

// Call makes one governed call: it waits up to MaxInlineWait for quota, and
// reports a longer wait as an error classed run.QuotaWait carrying the governor's
// estimate (at most MaxQuotaSleep), so the step sleeps durably and tries again.
func (p *Provider) Call(ctx context.Context, flow string, req *llm.ChatRequest) (*llm.ChatResponse, error) {
	req, err := p.Client.ApplyDefaults(req)
	if err != nil {
		return nil, NonRetriable(err)
	}
	return p.call(ctx, flow, req, p.Estimator.Cost(req))
}

// call is Call of req, its defaults applied, whose estimated cost is cost.
func (p *Provider) call(ctx context.Context, flow string, req *llm.ChatRequest, cost governor.Cost) (*llm.ChatResponse, error) {
	now := p.Now
	if now == nil {
		now = time.Now
	}
	inline := p.MaxInlineWait
	if inline <= 0 {
		inline = DefaultMaxInlineWait
	}
	// A wait for quota is no call in flight: a stopping engine ends it.
	dctx, release := drainContext(ctx)
	wctx, cancel := context.WithTimeout(dctx, clock.Real(p.Speed, inline))
	t0 := now()
	res, err := p.Governor.Wait(wctx, flow, cost)
	cancel()
	drained := errors.Is(context.Cause(dctx), errDraining)
	release()
	o, _ := ctx.Value(observerKey{}).(CallObserver)
	if err != nil {
		var we *governor.WaitError
		if tl, ok := errors.AsType[*governor.TooLargeError](err); ok {
			// Refused at once, before any wait (the governor counts it for
			// the flow): waiting never helps.
			p.log().Warn("sluice: refused a call that can never fit", "key", p.Name, "flow", flow, "limit", tl.Limit.String(),
				"needs", tl.Need, "allowance", tl.Max, "err", err)
			return nil, NonRetriable(err)
		}
		switch {
		case drained && ctx.Err() == nil:
			return nil, errDraining
		case errors.As(err, &we) && ctx.Err() == nil:
			if o != nil {
				o.Queued(now().Sub(t0))
			}
			return nil, &quotaWait{err: fmt.Errorf("waiting for quota on %s: %w", p.Name, err), d: min(max(we.EstimatedWait, time.Second), MaxQuotaSleep),
				kind: we.On.Kind, on: blockerText(we.On)}
		}
		return nil, err
	}
	if err := beforeSend(ctx); err != nil {
		res.Cancel(now()) // never sent: its room goes back
		return nil, err
	}
	fm := p.Metrics.Flow(p.Name, flow)
	sent := now()
	fm.Admitted(sent.Sub(t0))
	if o != nil {
		o.Admitted(sent.Sub(t0))
	}
	res.Sent(sent) // its charge counts from when the call leaves
	resp, err := p.Client.Chat(ctx, req)
	t := now()
	if o != nil {
		o.Answered(t.Sub(sent))
	}
	if err != nil {
		llm.Feedback(t, p.Governor, res, governor.Cost{}, governor.Snapshot{}, err)
		p.Metrics.Rejected(p.Name, err)
		p.logRejection(flow, err)
		return nil, err
	}
	llm.Feedback(t, p.Governor, res, resp.Usage.Governor(), resp.Snapshot, nil)
	fm.Settled(res.Cost())
	resp.Target, resp.Cost = p.Name, res.Cost().Money
	// Not from a count the governor cut as more than the call could have
	// used: one absurd answer would teach the estimator to reserve eight
	// times every later prompt.
	if used := resp.Usage.Governor(); res.Cost().Input == used.Input {
		p.Estimator.Observe(req.Model, cost.Input, used.Input)
	}
	return resp, nil
}

// blockerText is b in words, empty for no blocker.
func blockerText(b governor.Blocker) string {
	if b.Kind == "" {
		return ""
	}
	return b.String()
}

func (p *Provider) log() *slog.Logger {
	if p.Logger == nil {
		return discard
	}
	return p.Logger
}

var discard = slog.New(slog.DiscardHandler)

// logRejection writes a line for a provider's rejection of a call: a rate
// limit or a request too large, with the limit it named and its numbers.
// Other failures are the step's to report.
func (p *Provider) logRejection(flow string, err error) {
	if rl, ok := errors.AsType[*llm.RateLimitError](err); ok {
		p.log().Warn("sluice: the provider rejected a call", "key", p.Name, "flow", flow, "status", rl.Status,
			"limit", limitName(rl.Limit, rl.LimitKnown), "allowance", rl.Max, "used", rl.Used, "requested", rl.Requested,
			"retry_after", rl.RetryAfter, "err", err)
	} else if tl, ok := errors.AsType[*llm.TooLargeError](err); ok {
		p.log().Warn("sluice: the provider rejected a call as too large", "key", p.Name, "flow", flow, "status", tl.Status,
			"limit", limitName(tl.Limit, tl.LimitKnown), "allowance", tl.Max, "requested", tl.Requested, "err", err)
	}
}

func limitName(l governor.Limit, known bool) string {
	if !known {
		return "unknown"
	}
	return l.String()
}

// ClassifyLLM classes the errors of the llm client (as llm.Advise reads
// them) and the governor: a request that can never fit, an exhausted quota
// and other 4xx are fatal; a rate limit waits what the provider said;
// overload, 5xx, timeouts and resets back off. A call cut by a cancelled
// context is left to the engine, which retries it.
func ClassifyLLM(err error) (run.Class, time.Duration, bool) {
	if _, ok := errors.AsType[*governor.TooLargeError](err); ok {
		return run.Fatal, 0, true
	}
	a := llm.Advise(err)
	switch {
	case !a.Known || errors.Is(err, context.Canceled):
		return 0, 0, false
	case !a.Retry:
		return run.Fatal, 0, true
	case a.After > 0:
		return run.RetryAfter, a.After, true
	}
	return run.Retry, 0, true
}
