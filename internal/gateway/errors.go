package gateway

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
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

// WriteRefusal writes a refusal made in front of the gateway (a server's
// Host, Origin and Content-Type checks, a server still starting) in profile
// p's error format, as the gateway writes its own answers: typed
// invalid_request_error (server_error for a 5xx), with a code named after
// the status (415: unsupported_media_type), so an OpenAI client reads it as
// an API error and shows its message.
func WriteRefusal(w http.ResponseWriter, p llm.Profile, status int, message string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	code := strings.ToLower(strings.NewReplacer(" ", "_", "-", "_").Replace(http.StatusText(status)))
	(&apiError{status: status, typ: typ, code: code, message: "sluice gateway: " + message}).write(w, p)
}

func badRequest(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: msg}
}

// tooLarge is the answer to a request that can never fit a limit, worded as
// the profile's provider words it, so clients that recognise "request too
// large" (llm.Classify among them) never wait for it. The status is 413 for
// every profile: a 429, which OpenAI uses, makes clients retry in vain.
// field is the name of the request's maximum, as the client sent it
// (llm.ChatRequest.MaxTokensName), and n its choices: each may produce
// that many tokens.
func tooLarge(p llm.Profile, model, field string, n int64, e *governor.TooLargeError) *apiError {
	if e.Limit.Budget() {
		// No provider words a budget of sluice's: the governor's own words,
		// in money.
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "budget_too_small",
			message: fmt.Sprintf("Request too large for the budget of %s of %s: it costs up to %s, the budget is %s. %s (sluice gateway: waiting never helps; the request was not sent)",
				e.Limit.Title(), budgetOwner(e), governor.FormatMoney(e.Need), governor.FormatMoney(e.Max), hint(e, field, n))}
	}
	msg := p.TooLargeMessage("", model, e.Limit, e.Need, e.Max) + ". " + hint(e, field, n) +
		" (sluice gateway: waiting never helps; the request was not sent)"
	typ, code := p.TooLargeType(e.Limit)
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: typ, code: code, message: msg}
}

// budgetOwner names whose budget e is: a flow's (a client key's) or the key's.
func budgetOwner(e *governor.TooLargeError) string {
	if e.Flow != "" {
		return fmt.Sprintf("flow %q", e.Flow)
	}
	return "key " + e.Key
}

// hint says what would make the request fit, as a sentence, naming its
// maximum field as the client did; n is its choices.
func hint(e *governor.TooLargeError, field string, n int64) string {
	h := e.Hint(field, n)
	return strings.ToUpper(h[:1]) + h[1:] + "."
}

// notAdmitted is the answer to a request whose max wait ended before it was
// admitted. retryAfter is the governor's estimate of the further wait.
// on is what held it back; unkept, when the request's place in line was
// not kept, the bound that refused it (places.keep). The body is typed
// after on's limit, when it names one: "tokens" while a token limit holds
// the request, as the provider types its own refusal.
func notAdmitted(p llm.Profile, flow string, maxWait, retryAfter time.Duration, on governor.Blocker, unkept string) *apiError {
	retryAfter = max(retryAfter, time.Millisecond)
	waits := ""
	if on.Kind != "" {
		waits = " It waits on " + on.String()
		if !on.Until.IsZero() {
			waits += " until " + on.Until.UTC().Format(time.RFC3339)
		}
		waits += "."
	}
	if unkept != "" {
		waits += " Its place in line was not kept: " + unkept + "."
	}
	limit := governor.RPM // what holds it is its turn, a pause or a lease: the gateway's line of requests
	if on.Kind == "limit" || on.Kind == "pacing" || on.Kind == "budget" {
		limit = on.Limit
	}
	e := rateLimited(p, limit, fmt.Sprintf("Rate limit reached: sluice gateway could not admit this request of flow %q within its max wait of %s.%s Please try again in %s.",
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
	return rateLimited(p, governor.RPM, "Rate limit reached: sluice gateway: "+full+". Please try again in 1s.", lineFullRetry)
}

// rateLimited is a 429 in the profile's words for a request held back by
// limit l: Groq's and OpenAI's type "requests" or "tokens" after what l
// counts, Anthropic's rate_limit_error (llm.Profile.RateLimitType). What
// the gateway's own line holds back — its bounds, its fair order — is
// typed as a limit of requests (governor.RPM).
func rateLimited(p llm.Profile, l governor.Limit, msg string, retryAfter time.Duration) *apiError {
	typ, code := p.RateLimitType(l)
	return &apiError{status: http.StatusTooManyRequests, typ: typ, code: code, message: msg, retryAfter: retryAfter}
}

// upstreamError is the answer for an upstream failure the gateway gives up
// on: the provider's status, type, code and message, re-written in profile
// p's format. A rate limit or a request too large is typed as the profile
// types the limit it names ("tokens" when it names none). The provider's
// raw body is not forwarded; the key, should the provider echo it in any
// field, is scrubbed as every answer is (Gateway.ServeHTTP).
func upstreamError(p llm.Profile, err error) *apiError {
	switch e := err.(type) {
	case *llm.RateLimitError:
		typ, code := p.RateLimitType(limitOr(e.Limit, e.LimitKnown))
		return &apiError{status: http.StatusTooManyRequests, typ: typ, code: code, message: e.Message, retryAfter: e.RetryAfter}
	case *llm.TooLargeError:
		typ, code := p.TooLargeType(limitOr(e.Limit, e.LimitKnown))
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: typ, code: code, message: e.Message}
	case *llm.QuotaError:
		return &apiError{status: cmpStatus(e.Status, http.StatusTooManyRequests), typ: e.Type, code: e.Code, message: e.Message}
	case *llm.OverloadedError:
		typ := "server_error"
		if p == llm.Anthropic {
			typ = "overloaded_error" // its 529's type, which its clients read
		}
		return &apiError{status: cmpStatus(e.Status, http.StatusServiceUnavailable), typ: typ, message: cmpMsg(e.Message, "provider overloaded"), retryAfter: e.RetryAfter}
	case *llm.StatusError:
		if e.Status >= 300 && e.Status < 400 {
			// The upstream's redirect is not followed (llm.Config.HTTPClient),
			// nor passed on: the caller's client would follow it past the
			// gateway, or read a 3xx without a Location as nothing at all.
			return &apiError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_redirect",
				message: "sluice gateway: " + e.Message}
		}
		return &apiError{status: cmpStatus(e.Status, http.StatusBadGateway), typ: cmpMsg(e.Type, "server_error"), code: e.Code, message: cmpMsg(e.Message, http.StatusText(e.Status))}
	case *llm.TransportError:
		return &apiError{status: http.StatusBadGateway, typ: "server_error",
			message: "sluice gateway: the upstream gave no usable answer (" + e.Kind.String() + ")"}
	}
	return &apiError{status: http.StatusBadGateway, typ: "server_error", message: "sluice gateway: upstream call failed"}
}

// limitOr is l when known, else TPM: a limit of tokens.
func limitOr(l governor.Limit, known bool) governor.Limit {
	if !known {
		return governor.TPM
	}
	return l
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
