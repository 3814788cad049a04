package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/jsonwalk"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/llm"
)

// maxAttempts bounds the upstream calls one request makes; the request's
// max wait usually ends the retries first.
const maxAttempts = 8

// chatCall is one POST /v1/chat/completions on its way through the gateway.
type chatCall struct {
	g   *Gateway
	w   http.ResponseWriter
	r   *http.Request
	who caller

	req       *llm.ChatRequest
	body      []byte // what is sent upstream for a plain request
	cost      governor.Cost
	wantUsage bool // the caller asked for the usage chunk of a stream
	maxWait   time.Duration
	deadline  time.Time

	key       placeKey // names the request for its kept place in line (places.go), once keyed
	keyed     bool
	rejoined  bool   // it took back a place an earlier attempt kept
	unkept    string // why the place its wait left was not kept: a bound of places.keep
	waited    time.Duration
	waitingOn string          // what held it back when its max wait ended
	wctx      context.Context // ends a wait for admission or a backoff; made at the first (waitCtx)
	release   func()          // releases wctx
	attempts  int
	sent      placeKey // names the request as the caller sent it, to see whether it comes back after a 429 (retries.go)
	own429    bool     // the gateway itself refused it: its max wait ended, or its line was full
	status    int      // what the caller was answered (499: it left first)
	wrote     bool     // the answer has started

	t       *target               // the target the call is made on: the single upstream, or the one its route picked
	rt      *routed               // the request's route, for a routed model name
	tIndex  int                   // t's place in rt's targets
	picked  bool                  // rt's router picked t (rather than a kept place)
	kept    *governor.Reservation // the place in line a routed request took back, to rejoin
	outcome route.Outcome         // how the call on t went, for rt's router
	pres    *governor.Reservation // its charge on its flow's budget across targets (routes.go)
}

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request, who caller) {
	start := g.cfg.Now()
	flow := who.flow
	c := &chatCall{g: g, w: w, r: r, who: who, t: g.main, outcome: route.Abandoned}
	// Deferred, so that a panic does not leave a routed target probing
	// for good.
	defer c.done()
	e := c.run(start)
	if e != nil && !c.wrote {
		// A body cut off by its deadline ends the request's context too;
		// the client is still there to be told.
		if r.Context().Err() == nil || e.status == http.StatusRequestTimeout {
			c.limitHeaders()
			e.write(w, g.cfg.Profile)
			c.status = e.status
			if c.own429 {
				g.retries.refused(c.sent, who, e.retryAfter, g.cfg.Now())
			}
		}
	}
	if c.status == 0 {
		c.status = 499 // the caller left before an answer began
	}
	if c.rejoined {
		g.m.rejoined.Inc()
	}
	if c.status == http.StatusOK {
		g.fm[flow].ok.Inc()
	} else {
		g.m.requests.WithLabelValues(flow, strconv.Itoa(c.status)).Inc()
	}
	id := g.seq.Add(1)
	if !g.cfg.Logger.Enabled(context.Background(), slog.LevelInfo) {
		return // as Info would, before its line's dozen values are built
	}
	key := g.cfg.Key
	if c.t != nil {
		key = c.t.name
	}
	attrs := []any{"id", id, "key", key, "flow", flow, "status", c.status,
		"stream", c.req != nil && c.req.Stream, "attempts", c.attempts, "waited_ms", millis(c.waited), "took_ms", millis(g.cfg.Now().Sub(start)), "rejoined", c.rejoined}
	if c.waitingOn != "" {
		attrs = append(attrs, "waiting_on", c.waitingOn)
	}
	if c.unkept != "" {
		attrs = append(attrs, "place_not_kept", c.unkept)
	}
	g.cfg.Logger.Info("chat", attrs...)
}

// run answers the request, or returns the error to answer it with.
func (c *chatCall) run(start time.Time) *apiError {
	g := c.g
	body, err := readBody(c.w, c.r, g.cfg.MaxBodyBytes)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
				message: fmt.Sprintf("sluice gateway: request body larger than %d bytes", g.cfg.MaxBodyBytes)}
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return &apiError{status: http.StatusRequestTimeout, typ: "invalid_request_error",
				message: "sluice gateway: the request body did not arrive within the server's body timeout"}
		}
		return badRequest("sluice gateway: reading the request body: " + err.Error())
	}
	// A request sent again after a 429 of the gateway's came back.
	c.sent = keyOf(c.r, c.who.flow, body)
	g.retries.arrived(c.sent, start)
	// A place in line before any pricing: a prompt costs CPU to price and
	// memory while it waits, so both stop at the line's bounds.
	size := int64(len(body))
	if full := g.line.enter(c.who.flow, size); full != "" {
		c.own429 = true
		return lineFull(g.cfg.Profile, full)
	}
	inLine := true
	leave := func() {
		if inLine {
			inLine = false
			g.line.leave(c.who.flow, size)
		}
	}
	defer leave()
	req, err := decode(body)
	if err != nil {
		return badRequest("sluice gateway: " + strings.TrimPrefix(err.Error(), "llm: "))
	}
	if c.maxWait, err = g.maxWait(c.r.Header.Get(MaxWaitHeader)); err != nil {
		return badRequest("sluice gateway: " + err.Error())
	}
	c.deadline = start.Add(c.maxWait)
	c.wantUsage = req.Stream && includeUsage(req.Extra["stream_options"])
	if rt := g.routes[req.Model]; rt != nil {
		if e := c.pickTarget(rt, body); e != nil {
			return e
		}
	} else if g.main == nil {
		return g.modelNotFound(req.Model)
	} else {
		c.req, c.cost = g.withMaxTokens(req, c.who.flow)
	}
	if c.rt == nil && !req.Stream {
		// A request goes upstream as the caller wrote it, every byte kept,
		// unless it was given a max_tokens (never one read in part by
		// decode: it has its own).
		if c.body = body; c.req != req {
			if c.body, err = json.Marshal(c.req); err != nil {
				return badRequest("sluice gateway: " + strings.TrimPrefix(err.Error(), "llm: "))
			}
		}
		// The body goes upstream; the decoded messages, as large again,
		// need not wait with it. The request is the gateway's own (from
		// decode or withMaxTokens): written over, not copied.
		*c.req = llm.ChatRequest{Model: c.req.Model, MaxTokens: c.req.MaxTokens, CompletionTokensName: c.req.CompletionTokensName}
	}
	defer func() {
		if c.release != nil {
			c.release()
		}
	}()
	for {
		c.attempts++
		res, err := c.admit()
		leave()
		if err != nil {
			if c.wctx != nil && errors.Is(context.Cause(c.wctx), errStopping) {
				return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "server_stopping",
					message: "sluice gateway: the server is stopping; the request was not sent: send it again", retryAfter: time.Second}
			}
			return c.refuse(err)
		}
		retry, after, e := c.send(res)
		if !retry {
			return e
		}
		now := g.cfg.Now()
		if c.attempts >= maxAttempts || !now.Add(after).Before(c.deadline) {
			return e
		}
		if after > 0 && !sleep(c.waitCtx(), clock.Real(g.cfg.Speed, after)) {
			return e
		}
	}
}

// errStopping ends a wait for admission when the server stops.
var errStopping = errors.New("the server is stopping")

// errUnfinished ends the reservation of a call that left send without
// its outcome: a panic.
var errUnfinished = errors.New("sluice gateway: the call ended without an outcome")

// waitCtx returns the context that ends the request's waits, for
// admission and between attempts: at its max wait, when the caller
// leaves, or with errStopping once Config.Stopping closes. The upstream
// call itself is bounded only by the caller. It is made at the first wait
// (run releases it): a request admitted at once, as most are, needs no
// timer, and no watch on the stop.
func (c *chatCall) waitCtx() context.Context {
	if c.wctx != nil {
		return c.wctx
	}
	g := c.g
	// The gateway's clock may run faster than the wall clock.
	ctx, cancel := context.WithTimeout(c.r.Context(), clock.Real(g.cfg.Speed, c.deadline.Sub(g.cfg.Now())))
	c.wctx, c.release = ctx, cancel
	if stopping := g.stopping(); stopping != nil {
		sctx, scancel := context.WithCancelCause(ctx)
		unwatch := context.AfterFunc(stopping, func() { scancel(errStopping) })
		c.wctx, c.release = sctx, func() { unwatch(); scancel(nil); cancel() }
	}
	return c.wctx
}

// stopping returns a context that ends once Config.Stopping closes, nil
// without one: one watch for all the requests that wait, each of which
// registers on it with context.AfterFunc rather than starting a goroutine
// of its own. The goroutine that watches is started at the first wait and
// ends when Stopping closes or at Stop; after Stop it is not started, and
// there is no such context.
func (g *Gateway) stopping() context.Context {
	if g.cfg.Stopping == nil {
		return nil
	}
	g.stopWatch.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		g.stopCtx, g.watchDone = ctx, make(chan struct{})
		go func() {
			defer close(g.watchDone)
			select {
			case <-g.cfg.Stopping:
				cancel()
			case <-g.quit:
			}
		}()
	})
	return g.stopCtx
}

// readBody reads a request's body up to limit bytes, into a buffer of its
// announced size when it has one: a body waits in line for as long as its
// request does, so it should hold no spare capacity.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		buf := make([]byte, n)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(rd)
}

// refuse turns an admission failure into the answer.
func (c *chatCall) refuse(err error) *apiError {
	if tl, ok := errors.AsType[*governor.TooLargeError](err); ok {
		n := int64(1) // choices: each may produce max_tokens
		if c.req.MaxTokens > 0 {
			n = max(c.cost.Output/int64(c.req.MaxTokens), 1)
		}
		return tooLarge(c.g.cfg.Profile, c.req.Model, c.req.MaxTokensName(), n, tl)
	}
	if we, ok := errors.AsType[*governor.WaitError](err); ok {
		c.own429 = true
		c.waitingOn = we.On.String()
		return notAdmitted(c.g.cfg.Profile, c.who.flow, c.maxWait, we.EstimatedWait, we.On, c.unkept)
	}
	return &apiError{status: http.StatusInternalServerError, typ: "server_error", message: "sluice gateway: " + err.Error()}
}

// admit waits for the governor: in the place in line an earlier attempt
// of the same request kept, if one is kept, else at the back of its
// flow's line. When the wait ends first, the place is kept for the next
// attempt.
func (c *chatCall) admit() (*governor.Reservation, error) {
	g := c.g
	t := c.t
	t0 := g.cfg.Now()
	kept := c.kept
	c.kept = nil
	if c.attempts == 1 && kept == nil && c.rt == nil && !g.places.empty() {
		var kt *target
		if kept, kt = g.places.takeOn(c.placeKey(), t0); kept != nil && kt != t {
			kept.Cancel(t0)
			kept = nil
		}
	}
	// A flow's budget across targets first: a call that waits for it
	// keeps no room on its target.
	pres, err := c.reservePurse(t0)
	if err != nil {
		if kept != nil {
			kept.Cancel(g.cfg.Now())
		}
		c.waited += g.cfg.Now().Sub(t0)
		return nil, err
	}
	var res *governor.Reservation
	if kept != nil {
		// The same request: the same cost, unless the estimator has
		// learned since, or an Idempotency-Key named another body.
		// A limit learned since may have made it a call that can
		// never fit: then Reserve refuses it below.
		if kept.Cost() == c.cost && t.gov.Check(c.cost) == nil && kept.Rejoin(t0) {
			res, c.rejoined = kept, true
		} else {
			kept.Cancel(t0)
		}
	}
	if res == nil {
		if res, err = t.gov.Reserve(t0, c.who.flow, c.cost); err != nil {
			if pres != nil {
				pres.Cancel(g.cfg.Now())
			}
			return nil, err
		}
	}
	// Most requests are admitted at once: advancing the line admits them
	// as Await would first, with no context for a wait to make.
	t.gov.Advance(g.cfg.Now())
	if !res.Admitted() {
		err = t.gov.Await(c.waitCtx(), res, g.cfg.KeepPlace)
	}
	now := g.cfg.Now()
	c.waited += now.Sub(t0)
	if err != nil {
		if pres != nil {
			pres.Cancel(now)
		}
		if we, ok := errors.AsType[*governor.WaitError](err); ok && !we.KeptUntil.IsZero() {
			if c.unkept = g.places.keepOn(c.placeKey(), c.who, t, res, we.KeptUntil, now); c.unkept != "" {
				res.Cancel(now) // over a bound of places: it counts ahead of no one
			}
		}
		return nil, err
	}
	c.pres = pres
	g.fm[c.who.flow].lastAdmit.Store(now.UnixNano())
	fm := t.fm[c.who.flow]
	fm.admissions.Inc()
	if fm != g.fm[c.who.flow] {
		fm.lastAdmit.Store(now.UnixNano())
	}
	fm.wait.Observe(seconds(now.Sub(t0)))
	return res, nil
}

// placeKey names the request for its kept place: from the body that goes
// upstream, or for a stream its request encoded anew (the same request
// encodes the same way). It is computed only when a place is looked up or
// kept.
func (c *chatCall) placeKey() placeKey {
	if !c.keyed {
		body := c.body
		if c.req.Stream {
			body, _ = json.Marshal(c.req) // decoded from JSON: encodes
		}
		c.key, c.keyed = keyOf(c.r, c.who.flow, body), true
	}
	return c.key
}

// send makes one upstream call for an admitted request. It reports whether
// to try again (after how long), and otherwise the error to answer with,
// nil when the answer was written.
func (c *chatCall) send(res *governor.Reservation) (retry bool, after time.Duration, e *apiError) {
	g := c.g
	ctx := c.r.Context()
	if ctx.Err() != nil { // the caller left before the call was made: give the room back
		res.Cancel(g.cfg.Now())
		c.settlePurse(res)
		return false, 0, nil
	}
	// Every way out below ends the reservation, but a panic: it would
	// hold the call's room, and on a key that probes its limits the only
	// call in flight, for good. Ending it again does nothing, so it is
	// ended here whatever happened, as a failure without a verdict: the
	// call may have reached the provider.
	defer func() {
		llm.Feedback(g.cfg.Now(), c.t.gov, res, governor.Cost{}, governor.Snapshot{}, errUnfinished)
		c.settlePurse(res)
	}()
	// The charge counts from now, when the call leaves, not from its
	// admission: the time in between is not transit the lag must cover.
	now := g.cfg.Now()
	res.Sent(now)
	if c.pres != nil {
		c.pres.Sent(now)
	}
	c.t.sent.Add(1)
	if c.req.Stream {
		s, err := c.t.client.ChatStream(ctx, c.req)
		if err != nil {
			return c.failed(res, err)
		}
		c.outcome = route.OK
		c.stream(res, s)
		return false, 0, nil
	}
	resp, err := c.t.client.ChatRaw(ctx, c.body)
	if err != nil {
		return c.failed(res, err)
	}
	c.outcome = route.OK
	c.settle(res, resp.Snapshot, resp.Usage)
	c.header(resp.Header, "application/json")
	c.w.WriteHeader(http.StatusOK)
	c.status, c.wrote = http.StatusOK, true
	_, _ = c.w.Write(resp.Body)
	return false, 0, nil
}

// header sets the answer's headers: the upstream's request id, for the
// provider's support, and its rate-limit headers as it sent them; then the
// gateway's own (see limitHeaders), and contentType.
func (c *chatCall) header(up http.Header, contentType string) {
	h := c.w.Header()
	for k, v := range up {
		if k == "X-Request-Id" || k == "Request-Id" || strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "Anthropic-Ratelimit-") {
			h[k] = v
		}
	}
	c.ownHeaders(contentType)
}

// settle records a finished call: the provider's view of the limits, the
// real usage (nil: none reported, the charge stands as reserved).
func (c *chatCall) settle(res *governor.Reservation, snap governor.Snapshot, u *llm.Usage) {
	g := c.g
	var used governor.Cost
	if u != nil {
		used = u.Governor()
	}
	llm.Feedback(g.cfg.Now(), c.t.gov, res, used, snap, nil)
	c.settlePurse(res)
	final := res.Cost()
	if u != nil && final.Input == used.Input {
		// Not from a count the governor cut as more than the call could
		// have used: one absurd answer would teach the estimator to reserve
		// eight times every later prompt.
		c.t.est.Observe(c.req.Model, c.cost.Input, used.Input)
	}
	fm := c.t.fm[c.who.flow]
	fm.tokensIn.Add(float64(final.Input))
	fm.tokensOut.Add(float64(final.Output))
}

// failed feeds an upstream failure back and decides whether to try again.
func (c *chatCall) failed(res *governor.Reservation, err error) (bool, time.Duration, *apiError) {
	g := c.g
	// Whether the call keeps its charge, and what the governor learns from
	// it, is decided in one place for the engine, the gateway and the bench.
	llm.Feedback(g.cfg.Now(), c.t.gov, res, governor.Cost{}, governor.Snapshot{}, err)
	c.settlePurse(res)
	if c.r.Context().Err() != nil {
		c.outcome = route.Abandoned
		return false, 0, nil // the caller left during the call
	}
	c.outcome = route.OutcomeOf(err)
	g.cfg.Logger.Warn("upstream call failed", "key", c.t.name, "flow", c.who.flow, "attempt", c.attempts, "err", g.scrub.String(err.Error()))
	e := upstreamError(g.cfg.Profile, err)
	if rl, ok := errors.AsType[*llm.RateLimitError](err); ok {
		g.m.rejected(c.t.name, rl.Limit, rl.LimitKnown, rl.Status)
		// The governor now holds the limit: waiting for admission again is
		// the backoff. If the max wait ends first, say how long the
		// provider asked for.
		return true, 0, e
	}
	if tl, ok := errors.AsType[*llm.TooLargeError](err); ok {
		g.m.rejected(c.t.name, tl.Limit, tl.LimitKnown, tl.Status)
		return false, 0, e
	}
	if !llm.Retryable(err) || c.rt != nil {
		// A routed call is never made on two targets, nor again on a
		// failing one: the caller hears of the failure, and its next
		// request is routed anew.
		return false, 0, e
	}
	// Overload, 5xx, timeouts and resets: back off; the next attempt
	// reserves anew.
	after := g.cfg.RetryBase << min(c.attempts-1, 10)
	if ra, ok := llm.RetryAfter(err); ok {
		after = max(after, ra)
	}
	return true, after, e
}

// stream passes a streamed completion through as it arrives, one event at
// a time, and settles with the usage of its final chunk. The usage chunk
// the gateway asked for is dropped when the caller did not ask for it.
func (c *chatCall) stream(res *governor.Reservation, s *llm.Stream) {
	defer s.Close()
	w := c.w
	flusher, _ := w.(http.Flusher)
	c.header(s.Header(), "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	c.status, c.wrote = http.StatusOK, true
	if flusher != nil {
		flusher.Flush()
	}
	gone := false
	for s.Next() {
		ch := s.Chunk()
		if !c.wantUsage && ch.CarriesUsage() && len(ch.Choices) == 0 {
			continue
		}
		if !writeEvent(w, flusher, ch.Raw) {
			gone = true
			break
		}
	}
	var u *llm.Usage
	if !gone {
		u = s.Usage()
	}
	c.settle(res, s.Snapshot(), u)
	if gone || c.r.Context().Err() != nil {
		c.status = 499
		return
	}
	if err := s.Err(); err != nil {
		c.outcome = route.OutcomeOf(err)
		c.g.cfg.Logger.Warn("upstream stream failed", "key", c.t.name, "flow", c.who.flow, "err", c.g.scrub.String(err.Error()))
		e := upstreamError(c.g.cfg.Profile, err)
		writeEvent(w, flusher, c.g.cfg.Profile.ErrorBody(e.typ, e.code, e.message, ""))
		return
	}
	writeEvent(w, flusher, []byte("[DONE]"))
}

func writeEvent(w io.Writer, f http.Flusher, data []byte) bool {
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := w.Write(buf); err != nil {
		return false
	}
	if f != nil {
		f.Flush()
	}
	return true
}

// decode reads a chat request. A plain request that sets max_tokens is
// forwarded byte for byte, so only what prices it is read (readPriced): a
// fraction of the work of llm.DecodeChatRequest, which reads every field so
// that a request can be written anew. Any other request, or one that does
// not read cleanly, is decoded whole, with its errors.
func decode(body []byte) (*llm.ChatRequest, error) {
	// encoding/json matches keys regardless of case; the provider does not,
	// so the priced max_tokens must be spelled as the provider reads it.
	// (Without one at the top level, the fast reader would find none, and
	// decode the body whole: named only spares it the walk.)
	exact, named := scanKeys(body)
	named = named && exact
	// encoding/json would read invalid UTF-8 as U+FFFD and forward the
	// bytes as they are: the whole decoder refuses them.
	if !named || !utf8.Valid(body) {
		return llm.DecodeChatRequest(body)
	}
	p, ok := readPriced(body)
	return p.request(body, ok)
}

// request returns the request p prices, validated; or body decoded whole
// when p was not read cleanly (ok false) or is not a plain request with a
// maximum of output tokens.
func (p priced) request(body []byte, ok bool) (*llm.ChatRequest, error) {
	if !ok || p.model == "" || len(p.messages) == 0 || (p.stream != nil && *p.stream) ||
		p.maxTokens != nil && *p.maxTokens <= 0 || p.maxCompletionTokens != nil && *p.maxCompletionTokens <= 0 ||
		p.maxTokens == nil && p.maxCompletionTokens == nil {
		return llm.DecodeChatRequest(body)
	}
	req := &llm.ChatRequest{Model: p.model, Messages: p.messages, MaxTokens: max(ptrOr(p.maxTokens), ptrOr(p.maxCompletionTokens)),
		CompletionTokensName: p.maxCompletionTokens != nil && ptrOr(p.maxCompletionTokens) >= ptrOr(p.maxTokens)}
	for _, f := range [...]struct {
		name string
		raw  json.RawMessage
	}{{"n", p.n}, {"tools", p.tools}, {"functions", p.functions}, {"tool_choice", p.toolChoice}, {"response_format", p.responseFormat}} {
		if len(f.raw) > 0 {
			if req.Extra == nil {
				req.Extra = map[string]any{}
			}
			req.Extra[f.name] = f.raw
		}
	}
	// Bounded as the whole decoder bounds them: max_tokens, n, roles.
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// priced are the fields of a chat request that price it (readKeys).
type priced struct {
	model                          string
	messages                       []llm.Message
	maxTokens, maxCompletionTokens *int
	stream                         *bool
	n, tools, functions            json.RawMessage
	toolChoice, responseFormat     json.RawMessage
}

// readPriced reads the fields that price a request as encoding/json reads
// them into a struct of them, keys spelled exactly (decode has checked that
// with readKeysExact), by walking the object instead: a field written twice
// is read twice, the last winning; null leaves the model as it was and
// unsets the others; any value of the wrong type reports false, as
// encoding/json would fail.
func readPriced(body []byte) (p priced, ok bool) {
	ok = true
	walked := jsonwalk.Object(body, func(k, v []byte) {
		if !ok {
			return
		}
		switch string(k) {
		case "model":
			if jsonwalk.IsString(v) {
				p.model = jsonwalk.Unquote(v)
			} else {
				ok = isNull(v)
			}
		case "messages":
			p.messages = nil
			if isNull(v) {
				break
			}
			ok = jsonwalk.Elements(v, func(e []byte) {
				var m llm.Message
				ok = ok && m.UnmarshalJSON(e) == nil
				p.messages = append(p.messages, m)
			}) && ok
		case "max_tokens":
			p.maxTokens, ok = readInt(v)
		case "max_completion_tokens":
			p.maxCompletionTokens, ok = readInt(v)
		case "stream":
			p.stream, ok = readBool(v)
		case "n":
			p.n = slices.Clone(v)
		case "tools":
			p.tools = slices.Clone(v)
		case "functions":
			p.functions = slices.Clone(v)
		case "tool_choice":
			p.toolChoice = slices.Clone(v)
		case "response_format":
			p.responseFormat = slices.Clone(v)
		}
	})
	return p, walked && ok
}

func isNull(v []byte) bool { return string(v) == "null" }

// readInt reads a JSON number into an int as encoding/json does: a whole
// number that fits, or null for none.
func readInt(v []byte) (*int, bool) {
	if isNull(v) {
		return nil, true
	}
	n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
	if err != nil {
		return nil, false
	}
	i := int(n)
	return &i, true
}

// readBool reads true, false or null (none).
func readBool(v []byte) (*bool, bool) {
	switch string(v) {
	case "null":
		return nil, true
	case "true", "false":
		b := string(v) == "true"
		return &b, true
	}
	return nil, false
}

func ptrOr(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// withMaxTokens gives a request without a maximum its flow's default —
// lowered to what fits the limits with its prompt — and prices it, for
// the single upstream.
func (g *Gateway) withMaxTokens(req *llm.ChatRequest, flow string) (*llm.ChatRequest, governor.Cost) {
	return withMaxTokens(g.main, req, g.flows[flow].DefaultMaxTokens, g.cfg.DefaultMaxTokens)
}

// withMaxTokens gives req, for target t, the flow's default maximum
// (flowMax, else gatewayMax) when it has none, lowered to what fits t's
// limits with its prompt, and prices it with t's estimator.
func withMaxTokens(t *target, req *llm.ChatRequest, flowMax, gatewayMax int) (*llm.ChatRequest, governor.Cost) {
	if req.MaxTokens > 0 {
		return req, t.est.Cost(req)
	}
	out := *req
	// Named as the profile takes it for the model: OpenAI's reasoning
	// models refuse max_tokens.
	out.SetDefaultMaxTokens(t.profile, cmp.Or(flowMax, gatewayMax))
	cost := t.est.Cost(&out)
	if tl, ok := errors.AsType[*governor.TooLargeError](t.gov.Check(cost)); ok && tl.MaxOutput >= 1 {
		n := cost.Output / int64(out.MaxTokens) // choices
		if fit := tl.MaxOutput / max(n, 1); fit >= 1 && fit < int64(out.MaxTokens) {
			out.MaxTokens = int(fit)
			cost = t.est.Cost(&out)
		}
	}
	return &out, cost
}

// maxWait reads X-Sluice-Max-Wait: a Go duration or a number of seconds.
func (g *Gateway) maxWait(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return g.cfg.MaxWait, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil && !errors.Is(ferr, strconv.ErrRange) || math.IsNaN(f) {
			return 0, fmt.Errorf("%s %q: want a duration such as 30s or a number of seconds", MaxWaitHeader, v)
		}
		if f < 0 {
			return 0, fmt.Errorf("%s %q: must not be negative", MaxWaitHeader, v)
		}
		// Capped before the conversion, which would overflow past 292 years.
		d = time.Duration(min(f, g.cfg.MaxWaitCap.Seconds()) * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("%s %q: must not be negative", MaxWaitHeader, v)
	}
	return min(d, g.cfg.MaxWaitCap), nil
}

// includeUsage reports whether stream_options asks for the usage chunk.
func includeUsage(v any) bool {
	raw, ok := v.(json.RawMessage)
	if !ok {
		return false
	}
	var o struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return json.Unmarshal(raw, &o) == nil && o.IncludeUsage
}

// sleep waits d unless ctx ends first; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
