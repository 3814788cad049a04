package gateway

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/llm"
)

// apiError is an answer the gateway gives instead of a completion, written
// in the upstream profile's error format so the caller's client reads it
// as it would read the provider's own.
type apiError struct {
	status     int
	typ, code  string
	message    string
	retryAfter time.Duration // sent as retry-after (whole seconds, rounded up) and retry-after-ms
	waitingOn  string        // sent as X-Sluice-Waiting-On: what held an unadmitted request back
}

// write sends e in the profile's body shape (llm.Profile.ErrorBody).
func (e *apiError) write(w http.ResponseWriter, p llm.Profile) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.retryAfter.Seconds())), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(int64(math.Ceil(float64(e.retryAfter)/float64(time.Millisecond))), 10))
	}
	if e.waitingOn != "" {
		h.Set(WaitingOnHeader, e.waitingOn)
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(p.ErrorBody(e.typ, e.code, e.message, ""))
}

func badRequest(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: msg}
}

// tooLarge is the answer to a request that can never fit a limit, worded as
// the profile's provider words it, so clients that recognise "request too
// large" (llm.Classify among them) never wait for it. The status is 413 for
// every profile: a 429, which OpenAI uses, makes clients retry in vain.
// n is the request's choices: each may produce max_tokens.
func tooLarge(p llm.Profile, model string, n int64, e *governor.TooLargeError) *apiError {
	msg := p.TooLargeMessage("", model, e.Limit, e.Need, e.Max) + ". " + hint(e, n) +
		" (sluice gateway: waiting never helps; the request was not sent)"
	typ, code := p.TooLargeType(e.Limit)
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: typ, code: code, message: msg}
}

// hint says what would make the request fit; n is its choices.
func hint(e *governor.TooLargeError, n int64) string {
	switch e.Limit {
	case governor.RPM, governor.RPD:
		return "The key allows no request at all."
	case governor.ITPM:
		return "Shorten the prompt."
	}
	if fit := e.MaxOutput / max(n, 1); fit >= 1 {
		if n > 1 {
			return fmt.Sprintf("Lower max_tokens or n: with n = %d, max_tokens ≤ %s fits.", n, num.Group(fit))
		}
		return fmt.Sprintf("Lower max_tokens: max_tokens ≤ %s fits.", num.Group(fit))
	}
	if e.MaxOutput >= 1 {
		return fmt.Sprintf("Lower n: even max_tokens 1 does not fit %d choices.", n)
	}
	return "Shorten the prompt: it alone does not fit."
}

// notAdmitted is the answer to a request whose max wait ended before it was
// admitted. retryAfter is the governor's estimate of the further wait.
// on is what held it back.
func notAdmitted(p llm.Profile, flow string, maxWait, retryAfter time.Duration, on governor.Blocker) *apiError {
	retryAfter = max(retryAfter, time.Millisecond)
	waits := ""
	if on.Kind != "" {
		waits = " It waits on " + on.String()
		if !on.Until.IsZero() {
			waits += " until " + on.Until.UTC().Format(time.RFC3339)
		}
		waits += "."
	}
	e := rateLimited(p, fmt.Sprintf("Rate limit reached: sluice gateway could not admit this request of flow %q within its max wait of %s.%s Please try again in %s.",
		flow, maxWait, waits, retryAfter.Round(time.Millisecond)), retryAfter)
	e.waitingOn = on.String()
	return e
}

// lineFullRetry is the retry-after of a request refused by a full wait
// line: a place frees as soon as a request ahead is admitted.
const lineFullRetry = time.Second

// lineFull is the answer to a request that finds the wait line full; full
// names the bound.
func lineFull(p llm.Profile, full string) *apiError {
	return rateLimited(p, "Rate limit reached: sluice gateway: "+full+". Please try again in 1s.", lineFullRetry)
}

// rateLimited is a 429 in the profile's words for a rate limit. What held
// the request back is the gateway's, not one of the provider's limits: the
// body is typed as a refusal of requests.
func rateLimited(p llm.Profile, msg string, retryAfter time.Duration) *apiError {
	typ, code := p.RateLimitType(governor.RPM)
	return &apiError{status: http.StatusTooManyRequests, typ: typ, code: code, message: msg, retryAfter: retryAfter}
}

// upstreamError is the answer for an upstream failure the gateway gives up
// on: the provider's status, type, code and message, re-written in its own
// format. The provider's raw body is not forwarded; the key, should the
// provider echo it in any field, is scrubbed as every answer is
// (Gateway.ServeHTTP).
func upstreamError(err error) *apiError {
	switch e := err.(type) {
	case *llm.RateLimitError:
		return &apiError{status: http.StatusTooManyRequests, typ: "tokens", code: "rate_limit_exceeded", message: e.Message, retryAfter: e.RetryAfter}
	case *llm.TooLargeError:
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "tokens", code: "rate_limit_exceeded", message: e.Message}
	case *llm.QuotaError:
		return &apiError{status: cmpStatus(e.Status, http.StatusTooManyRequests), typ: e.Type, code: e.Code, message: e.Message}
	case *llm.OverloadedError:
		return &apiError{status: cmpStatus(e.Status, http.StatusServiceUnavailable), typ: "server_error", message: cmpMsg(e.Message, "provider overloaded"), retryAfter: e.RetryAfter}
	case *llm.StatusError:
		return &apiError{status: cmpStatus(e.Status, http.StatusBadGateway), typ: cmpMsg(e.Type, "server_error"), code: e.Code, message: cmpMsg(e.Message, http.StatusText(e.Status))}
	case *llm.TransportError:
		return &apiError{status: http.StatusBadGateway, typ: "server_error",
			message: "sluice gateway: the upstream gave no usable answer (" + e.Kind.String() + ")"}
	}
	return &apiError{status: http.StatusBadGateway, typ: "server_error", message: "sluice gateway: upstream call failed"}
}

func cmpStatus(s, def int) int {
	if s == 0 {
		return def
	}
	return s
}

func cmpMsg(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
