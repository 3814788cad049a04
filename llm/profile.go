package llm

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Profile names a provider whose headers, error bodies and status codes the
// client understands. The wire format is the same OpenAI-compatible one for
// all; what differs is what the numbers mean.
type Profile string

// The provider profiles.
const (
	// Groq: x-ratelimit-*-requests count requests per DAY, -tokens count
	// tokens per minute; resets are Go durations; "too large" on input or
	// total tokens comes as HTTP 413, on output tokens as a 429.
	Groq Profile = "groq"
	// OpenAI: x-ratelimit-*-requests count requests per MINUTE, -tokens
	// tokens per minute; "too large" comes as a 429.
	OpenAI Profile = "openai"
	// Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
	// output-tokens}-{limit,remaining,reset}, per minute, resets as RFC 3339
	// times; 529 is the provider's overload.
	Anthropic Profile = "anthropic"
)

// Profiles returns every profile, each named as its String writes it.
func Profiles() []Profile { return []Profile{Groq, OpenAI, Anthropic} }

// ParseProfile reads a profile name (any case); "" is OpenAI.
func ParseProfile(s string) (Profile, error) {
	p := Profile(strings.ToLower(strings.TrimSpace(s)))
	if p == "" {
		return OpenAI, nil
	}
	if slices.Contains(Profiles(), p) {
		return p, nil
	}
	return "", fmt.Errorf("llm: unknown profile %q (want groq, openai or anthropic)", s)
}

// String returns the profile's name.
func (p Profile) String() string { return string(p) }

// orDefault treats the zero Profile as OpenAI, the wire format's origin.
func (p Profile) orDefault() Profile {
	if p == "" {
		return OpenAI
	}
	return p
}

// CompletionTokensName reports whether a maximum given to a request for
// model that names none is sent as max_completion_tokens rather than
// max_tokens. OpenAI's reasoning models (the o-series and the gpt-5 family)
// refuse max_tokens with a 400 unsupported_parameter; OpenAI and Groq take
// max_completion_tokens on every chat model (max_tokens is deprecated for
// it), so on those profiles it is always the newer name. On Anthropic's
// profile, whose API names it max_tokens, it is max_tokens, unless the
// model is one of OpenAI's reasoning models, which refuse it wherever
// they are served.
func (p Profile) CompletionTokensName(model string) bool {
	switch p.orDefault() {
	case OpenAI, Groq:
		return true
	}
	return openaiReasoningModel(model)
}

// openaiReasoningModel reports whether model, with or without a vendor
// prefix ("openai/o3"), is of the o1, o3, o4 or gpt-5 families.
func openaiReasoningModel(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, family := range []string{"o1", "o3", "o4", "gpt-5"} {
		if rest, ok := strings.CutPrefix(m, family); ok && (rest == "" || rest[0] == '-' || rest[0] == '.') {
			return true
		}
	}
	return false
}

// RateLimitHeader names the response headers that report one limit: its
// allowance, what remains of it, and when it resets. The names are
// canonical (http.CanonicalHeaderKey), so they may index an http.Header
// directly.
type RateLimitHeader struct {
	Limit                            governor.Limit
	LimitKey, RemainingKey, ResetKey string
}

func xRatelimit(l governor.Limit, kind string) RateLimitHeader {
	return RateLimitHeader{l, "X-Ratelimit-Limit-" + kind, "X-Ratelimit-Remaining-" + kind, "X-Ratelimit-Reset-" + kind}
}

func anthropicRatelimit(l governor.Limit, kind string) RateLimitHeader {
	p := "Anthropic-Ratelimit-" + kind + "-"
	return RateLimitHeader{l, p + "Limit", p + "Remaining", p + "Reset"}
}

// profileHeaders lists the limits each profile's headers report. Groq's
// "requests" are per day, OpenAI's per minute; neither reports the other
// limits, which clients learn from error text.
var profileHeaders = map[Profile][]RateLimitHeader{
	Groq:   {xRatelimit(governor.RPD, "Requests"), xRatelimit(governor.TPM, "Tokens")},
	OpenAI: {xRatelimit(governor.RPM, "Requests"), xRatelimit(governor.TPM, "Tokens")},
	Anthropic: {
		anthropicRatelimit(governor.RPM, "Requests"),
		anthropicRatelimit(governor.TPM, "Tokens"),
		anthropicRatelimit(governor.ITPM, "Input-Tokens"),
		anthropicRatelimit(governor.OTPM, "Output-Tokens"),
	},
}

// RateLimitHeaders lists the limits the profile's response headers report,
// with the names of each one's headers. The slice is a copy: the caller may
// keep or change it.
func (p Profile) RateLimitHeaders() []RateLimitHeader {
	return slices.Clone(profileHeaders[p.orDefault()])
}

// Snapshot reads the limits a response's headers report. now anchors
// Anthropic's absolute reset times. A limit is Known when its remaining
// count was readable; values that do not parse are ignored, field by field.
func (p Profile) Snapshot(h http.Header, now time.Time) governor.Snapshot {
	var s governor.Snapshot
	for _, m := range profileHeaders[p.orDefault()] {
		o := &s[m.Limit]
		if n, ok := parseCount(h.Get(m.RemainingKey)); ok {
			o.Known = true
			o.Remaining = n
			o.Source = m.LimitKey // for the governor's log (governor.Config.Logger)
		}
		if n, ok := parseCount(h.Get(m.LimitKey)); ok {
			o.Limit = n
		}
		if d, ok := parseReset(h.Get(m.ResetKey), now); ok {
			o.Reset = d
		}
	}
	return s
}

// parseCount reads a header count. Integers are expected; a decimal is
// truncated rather than dropped so a proxy that reformats numbers still works.
func parseCount(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, n >= 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

// maxWait bounds every wait read from a provider: longer than any limit's
// period, short enough that a garbled value cannot park work for years.
const maxWait = 7 * 24 * time.Hour

// parseReset reads a reset: a Go duration ("2m59.56s", "6m0s", "20ms"), a
// number of seconds, or an RFC 3339 time relative to now. A reset in the
// past is 0.
func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if d, ok := parseDuration(v); ok {
		return d, true
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return clampWait(t.Sub(now)), true
	}
	return 0, false
}

// parseDuration reads a Go duration or a bare number of seconds, refusing
// negative and non-finite values.
func parseDuration(v string) (time.Duration, bool) {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return 0, false
		}
		return clampWait(d), true
	}
	return parseSeconds(v, time.Second)
}

// parseSeconds reads a non-negative decimal number of units.
func parseSeconds(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	if f*float64(unit) >= float64(maxWait) {
		return maxWait, true
	}
	return time.Duration(math.Ceil(f * float64(unit))), true
}

func clampWait(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > maxWait:
		return maxWait
	}
	return d
}

// Classify turns an HTTP answer into nil (2xx) or one of the typed errors:
// *TooLargeError, *QuotaError, *RateLimitError, *OverloadedError or
// *StatusError. It reads the message whatever the status, because a
// request that can never fit may come as 413 or as 429 with a long
// retry-after, and waiting must not be the answer to it. Bodies that are
// empty or not JSON still classify by status. HTTP-date retry-after values
// are measured from time.Now; Client uses its own clock. The error's text
// is cleaned and bounded as a Client's is (Scrubber.Error, without a key).
func (p Profile) Classify(status int, h http.Header, body []byte) error {
	return (*Scrubber)(nil).Error(p.classify(status, h, body, time.Now()))
}

func (p Profile) classify(status int, h http.Header, body []byte, now time.Time) error {
	if status >= 200 && status < 300 {
		return nil
	}
	if status >= 300 && status < 400 {
		return redirected(status, h)
	}
	return p.classifyBody(status, h, parseErrorBody(body), now)
}

// maxLocation bounds the part of a redirect's Location an error repeats.
const maxLocation = 256

// redirected is the error of a 3xx answer. A Client never follows a
// redirect (see Config.HTTPClient): it would send the key, and the
// request, where BaseURL does not say; and a 301, 302 or 303 would turn
// the POST into a GET whose answer would pass for the completion. Making
// the call again brings the same redirect, so the error is not retryable
// (a 3xx StatusError). The Location is scrubbed of the key with the rest
// of the header before it is read here, then cleaned and bounded.
func redirected(status int, h http.Header) *StatusError {
	msg := fmt.Sprintf("the provider answered with a redirect (HTTP %d %s)", status, http.StatusText(status))
	if loc := h.Get("Location"); loc != "" {
		msg += " to " + strconv.Quote((*Scrubber)(nil).Text(loc, maxLocation))
	}
	msg += ", which is not followed: the key is sent to the configured URL alone"
	return &StatusError{Status: status, Message: msg}
}

// classifyBody is the decision table. status 0 means the error arrived
// inside a successful response: an error event in a stream, or an error
// object in a 2xx body.
func (p Profile) classifyBody(status int, h http.Header, eb errorBody, now time.Time) error {
	p = p.orDefault()
	msg := eb.Message
	text := normalize(msg)
	lower := strings.ToLower(text)
	wait := max(headerRetryAfter(h, now), messageRetryAfter(text))
	limit, limitKnown := limitFromMessage(text)
	nums := numbersFromMessage(text)
	typ := strings.ToLower(eb.Type)
	code := strings.ToLower(eb.Code)

	// A request bigger than a limit's whole allowance: never wait for it.
	tooLarge := strings.Contains(lower, "request too large") ||
		typ == "request_too_large" ||
		(limitKnown && nums.max > 0 && nums.requested > nums.max) ||
		status == http.StatusRequestEntityTooLarge
	if tooLarge {
		return &TooLargeError{Limit: limit, LimitKnown: limitKnown, Max: nums.max,
			Requested: nums.requested, Status: status, Message: msg}
	}

	if code == "insufficient_quota" || typ == "insufficient_quota" ||
		strings.Contains(lower, "exceeded your current quota") ||
		strings.Contains(lower, "credit balance is too low") {
		return &QuotaError{Status: status, Type: eb.Type, Code: eb.Code, Message: msg}
	}

	if status == http.StatusTooManyRequests || typ == "rate_limit_error" ||
		(status == 0 && (code == "rate_limit_exceeded" || strings.Contains(lower, "rate limit reached"))) {
		if !limitKnown {
			limit, limitKnown = p.exhaustedLimit(h, now)
		}
		rl := &RateLimitError{Limit: limit, LimitKnown: limitKnown, Max: nums.max, Used: nums.used,
			Requested: nums.requested, Status: status, Message: msg}
		rl.RetryAfter, rl.asked = boundWait(wait, limit, limitKnown)
		return rl
	}

	if status == 529 || status == http.StatusServiceUnavailable || typ == "overloaded_error" ||
		(p == Groq && status == 498) {
		ov := &OverloadedError{Status: status, Message: msg}
		ov.RetryAfter, ov.asked = boundWait(wait, 0, false)
		return ov
	}

	return &StatusError{Status: status, Type: eb.Type, Code: eb.Code, Message: msg}
}

// exhaustedLimit names the limit of a 429 whose message names none, when
// the headers show exactly one limit with nothing remaining.
func (p Profile) exhaustedLimit(h http.Header, now time.Time) (governor.Limit, bool) {
	s := p.Snapshot(h, now)
	found, n := governor.Limit(0), 0
	for l := range governor.NumLimits {
		if s[l].Known && s[l].Remaining == 0 {
			found, n = l, n+1
		}
	}
	return found, n == 1
}
