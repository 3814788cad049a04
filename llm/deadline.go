package llm

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// Timeouts bounds the phases of one provider call, so that a provider that
// accepts a request and never answers fails the call instead of holding it
// until some outer deadline ends the whole run. Each field's zero value
// means its default; a negative value means no deadline for that phase.
// A deadline that passes fails the call with a *TransportError of kind
// Timeout whose message names the phase and the duration; it is retryable.
type Timeouts struct {
	// Connect bounds getting a connection: the DNS lookup, the TCP connect
	// and the TLS handshake. A reused idle connection takes none. Default
	// 10 s.
	Connect time.Duration

	// FirstByte bounds the wait from the request written to the first byte
	// of the response. A non-streamed completion sends nothing until it is
	// done, so for it this bounds the whole generation: raise it for long
	// outputs, or stream. Default 2 min.
	FirstByte time.Duration

	// Total bounds the whole call: connecting, the wait, and reading the
	// body or the whole stream. Default 10 min.
	Total time.Duration
}

var defaultTimeouts = Timeouts{Connect: 10 * time.Second, FirstByte: 2 * time.Minute, Total: 10 * time.Minute}

// or returns t with each unset (zero) field taken from base.
func (t Timeouts) or(base Timeouts) Timeouts {
	return Timeouts{
		Connect:   cmp.Or(t.Connect, base.Connect),
		FirstByte: cmp.Or(t.FirstByte, base.FirstByte),
		Total:     cmp.Or(t.Total, base.Total),
	}
}

// validate refuses a deadline under a millisecond: a time.Duration written
// as a bare number (Total: 600) is nanoseconds, and would fail every call.
func (t Timeouts) validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Connect", t.Connect}, {"FirstByte", t.FirstByte}, {"Total", t.Total}} {
		if f.d > 0 && f.d < time.Millisecond {
			return fmt.Errorf("llm: Timeouts.%s %v is under a millisecond: write a time.Duration such as 2 * time.Minute, or a negative value for no deadline", f.name, f.d)
		}
	}
	return nil
}

type timeoutsKey struct{}

// WithTimeouts returns a copy of ctx under which every call of a Client
// has the deadlines of t: each field set (non-zero) wins over the Client's
// Config.Timeouts, and a negative one removes that deadline. Applied to a
// context that already carries Timeouts, the fields set here win over
// those. A deadline of ctx itself applies as well, whichever ends first.
func WithTimeouts(ctx context.Context, t Timeouts) context.Context {
	if outer, ok := ctx.Value(timeoutsKey{}).(Timeouts); ok {
		t = t.or(outer)
	}
	return context.WithValue(ctx, timeoutsKey{}, t)
}

// deadlineError is why a call's own deadline ended it.
type deadlineError struct {
	phase   string // "connect", "first-byte", "total"
	missing string // what did not come in time
	after   time.Duration
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("no %s within %v (%s deadline)", e.missing, e.after, e.phase)
}

// Is makes a passed deadline read as one, like a context's or the
// http.Client's.
func (e *deadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

// deadlines runs one call's deadlines. Total is a timeout on the call's
// context; Connect and FirstByte are one timer, started and stopped by the
// transport's trace events, so they hold for any http.Client and a
// transport that reports no events is bounded by Total alone.
type deadlines struct {
	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopTotal context.CancelFunc
	trace     httptrace.ClientTrace

	// The phases' errors, made with the call rather than at each phase.
	connect, firstByte deadlineError

	mu    sync.Mutex
	timer *time.Timer    // the phases' timer, made at the first phase that has a deadline
	phase *deadlineError // the phase running, if it has a deadline
	ends  time.Time      // when it ends: the timer firing before that fired for an earlier phase
	over  bool           // the response arrived or the call ended: no phase starts
}

func newDeadlines(ctx context.Context, t Timeouts) *deadlines {
	d := &deadlines{stopTotal: func() {},
		connect:   deadlineError{phase: "connect", missing: "connection", after: t.Connect},
		firstByte: deadlineError{phase: "first-byte", missing: "first byte of the response", after: t.FirstByte}}
	if t.Total > 0 {
		ctx, d.stopTotal = context.WithTimeoutCause(ctx, t.Total,
			&deadlineError{phase: "total", missing: "end of the response", after: t.Total})
	}
	ctx, d.cancel = context.WithCancelCause(ctx)
	d.trace = httptrace.ClientTrace{
		GetConn:              func(string) { d.start(&d.connect) },
		GotConn:              func(httptrace.GotConnInfo) { d.start(nil) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { d.start(&d.firstByte) },
		GotFirstResponseByte: func() { d.start(nil) },
	}
	d.ctx = httptrace.WithClientTrace(ctx, &d.trace)
	return d
}

// start ends the phase running and, unless next is nil or has no
// deadline, starts one that ends the call with next.
func (d *deadlines) start(next *deadlineError) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.phase = nil
	if d.timer != nil {
		d.timer.Stop()
	}
	if d.over || next == nil || next.after <= 0 {
		return
	}
	d.phase, d.ends = next, time.Now().Add(next.after)
	if d.timer == nil {
		d.timer = time.AfterFunc(next.after, d.fire)
	} else {
		d.timer.Reset(next.after)
	}
}

// fire ends the call with the phase running, if its deadline has passed:
// a timer stopped as it fired may still call it.
func (d *deadlines) fire() {
	d.mu.Lock()
	phase := d.phase
	if phase == nil || time.Now().Before(d.ends) {
		phase = nil
	}
	d.mu.Unlock()
	if phase != nil {
		d.cancel(phase)
	}
}

// endPhases stops the connect and first-byte deadlines: the response has
// arrived, or the call failed.
func (d *deadlines) endPhases() {
	d.mu.Lock()
	d.over = true
	d.mu.Unlock()
	d.start(nil)
}

// release ends the call's deadlines and its context. Safe to call more
// than once, from any goroutine.
func (d *deadlines) release() {
	d.endPhases()
	d.cancel(nil)
	d.stopTotal()
}

// err returns the passed deadline that caused err, or err.
func (d *deadlines) err(err error) error {
	if de, ok := context.Cause(d.ctx).(*deadlineError); ok {
		return de
	}
	return err
}

// do sends hreq under the call's deadlines: Config.Timeouts, with what
// WithTimeouts put on the request's context winning. The response's body
// fails with the passed deadline's error once one passes, and releases the
// deadlines when closed.
func (c *Client) do(hreq *http.Request) (*http.Response, error) {
	ctx := hreq.Context()
	t := c.cfg.Timeouts
	if o, ok := ctx.Value(timeoutsKey{}).(Timeouts); ok {
		t = o.or(t)
	}
	d := newDeadlines(ctx, t)
	resp, err := c.cfg.HTTPClient.Do(hreq.WithContext(d.ctx))
	d.endPhases()
	if err != nil {
		err = d.err(err)
		d.release()
		return nil, c.transportError(ctx, err)
	}
	resp.Body = &deadlineBody{ReadCloser: resp.Body, d: d}
	return resp, nil
}

// deadlineBody is a response body read under its call's Total deadline.
type deadlineBody struct {
	io.ReadCloser
	d *deadlines
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = b.d.err(err)
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	err := b.ReadCloser.Close()
	b.d.release()
	return err
}
