package llm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
)

// ErrNoMaxTokens is returned by Chat and ChatStream, before anything is sent,
// for a request that sets no max_tokens when no default applies. Providers
// reserve their own (often large) default against output and token limits
// for such a request, which is how a call becomes too large to ever fit.
var ErrNoMaxTokens = errors.New("llm: request sets no max_tokens and no default applies: " +
	"set ChatRequest.MaxTokens, or Config.DefaultMaxTokens / Config.ModelMaxTokens for the model")

// RateLimitError is a rejection because the key has used up a limit for now
// (HTTP 429). It is retryable after RetryAfter; only the named limit is
// exhausted, so other calls that fit the other limits may go on.
type RateLimitError struct {
	// Limit is the limit the provider named; meaningful only when LimitKnown.
	Limit      governor.Limit
	LimitKnown bool
	// Max, Used and Requested are the numbers of the provider's message
	// ("Limit 8000, Used 7972, Requested 1351"); 0 when not given.
	Max, Used, Requested int64
	// RetryAfter is the longer of the retry-after headers and the wait the
	// message names ("Please try again in 5.289s"); 0 when neither was given.
	// It is at most the named limit's period plus governor.MaxLag
	// (governor.MaxWait, a day plus that, when no limit is named), whatever
	// the provider asked for.
	RetryAfter time.Duration
	Status     int
	Message    string // the provider's message, scrubbed (see Scrubber.Error)

	asked time.Duration // what the provider asked for, when RetryAfter bounds it (for Feedback's log)
}

func (e *RateLimitError) Error() string {
	var b strings.Builder
	b.WriteString("llm: rate limited")
	if e.LimitKnown {
		b.WriteString(" on ")
		b.WriteString(limitPhrase(e.Limit))
	} else {
		b.WriteString(" (the provider named no limit)")
	}
	writeNumbers(&b, e.Max, e.Used, e.Requested)
	if e.RetryAfter > 0 {
		b.WriteString("; retry after ")
		b.WriteString(e.RetryAfter.String())
	}
	writeStatus(&b, e.Status)
	return b.String()
}

// TooLargeError is a request that can never fit a limit: its own cost exceeds
// the limit's whole allowance. Waiting never helps, whatever retry-after the
// provider sends (Groq sends 900 s with its OTPM variant); the request must be
// made smaller.
type TooLargeError struct {
	// Limit is the limit the request exceeds; meaningful only when LimitKnown.
	Limit      governor.Limit
	LimitKnown bool
	// Max is the limit's allowance and Requested what the request needs; 0
	// when the provider did not say.
	Max, Requested int64
	Status         int
	Message        string // the provider's message, scrubbed (see Scrubber.Error)
}

func (e *TooLargeError) Error() string {
	var b strings.Builder
	b.WriteString("llm: request too large")
	if e.LimitKnown {
		b.WriteString(" for ")
		b.WriteString(limitPhrase(e.Limit))
		if e.Requested > 0 && e.Max > 0 {
			fmt.Fprintf(&b, ": needs %s %s, limit is %s", num.Group(e.Requested), e.Limit.Unit(), num.Group(e.Max))
		}
		b.WriteString("; ")
		b.WriteString((&governor.TooLargeError{Limit: e.Limit, MaxOutput: -1 /* not known */}).Hint("", 1))
	} else {
		b.WriteString("; make it smaller")
	}
	b.WriteString(" (retrying never helps")
	if e.Status != 0 {
		fmt.Fprintf(&b, "; HTTP %d", e.Status)
	}
	b.WriteString(")")
	return b.String()
}

// QuotaError is a rejection because the account has no money or credit left
// (OpenAI's insufficient_quota, Anthropic's "credit balance is too low").
// Retrying never helps until someone pays.
type QuotaError struct {
	Status     int
	Type, Code string // the provider's, scrubbed (see Scrubber.Error)
	Message    string // the provider's, scrubbed
}

func (e *QuotaError) Error() string {
	var b strings.Builder
	b.WriteString("llm: quota exhausted (billing, not a rate limit; retrying never helps)")
	writeProviderMessage(&b, e.Message)
	writeStatus(&b, e.Status)
	return b.String()
}

// OverloadedError is the provider's own overload (HTTP 529 overloaded_error,
// 503, Groq's 498): it is not your quota. Back off, for at least RetryAfter
// when it is set.
type OverloadedError struct {
	Status     int
	RetryAfter time.Duration // at most governor.MaxWait, whatever the provider asked for
	Message    string        // the provider's, scrubbed (see Scrubber.Error)

	asked time.Duration // what the provider asked for, when RetryAfter bounds it (for Feedback's log)
}

func (e *OverloadedError) Error() string {
	var b strings.Builder
	b.WriteString("llm: provider overloaded")
	if e.RetryAfter > 0 {
		b.WriteString("; retry after ")
		b.WriteString(e.RetryAfter.String())
	}
	writeProviderMessage(&b, e.Message)
	writeStatus(&b, e.Status)
	return b.String()
}

// StatusError is any other error response. A 4xx is the request's fault and
// is not retryable (except 408, a timeout); a 5xx is retryable. Status 0
// means the provider reported the error inside a successful response (an
// error event in a stream that had started, or an error object in a 2xx
// body), which is treated like a 5xx.
type StatusError struct {
	Status     int
	Type, Code string // the provider's, scrubbed (see Scrubber.Error)
	Message    string // the provider's, scrubbed
}

func (e *StatusError) Error() string {
	var b strings.Builder
	if e.Status == 0 {
		b.WriteString("llm: error inside a successful response")
	} else {
		fmt.Fprintf(&b, "llm: HTTP %d", e.Status)
	}
	if e.Type != "" || e.Code != "" {
		b.WriteString(" (")
		b.WriteString(strings.Trim(e.Type+" "+e.Code, " "))
		b.WriteString(")")
	}
	writeProviderMessage(&b, e.Message)
	return b.String()
}

// TransportKind says how a call failed below HTTP.
type TransportKind uint8

const (
	// Other is any failure not listed below (refused connection, DNS...).
	Other TransportKind = iota
	// Timeout: a deadline passed: one of Config.Timeouts (the message names
	// which, and its duration), the HTTP client's or the context's.
	Timeout
	// Reset: the connection closed or was reset before the response ended.
	Reset
	// Malformed: a 2xx body or a stream event that is not the JSON expected.
	Malformed
)

var transportKindNames = [...]string{"other", "timeout", "reset", "malformed"}

func (k TransportKind) String() string {
	if int(k) < len(transportKindNames) {
		return transportKindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// TransportError is a call that got no usable HTTP answer. It is retryable;
// note that the provider may still have counted (and billed) the request.
type TransportError struct {
	Kind TransportKind
	Err  error
}

func (e *TransportError) Error() string {
	if e.Err == nil {
		return "llm: transport: " + e.Kind.String()
	}
	return "llm: transport: " + e.Kind.String() + ": " + e.Err.Error()
}

func (e *TransportError) Unwrap() error { return e.Err }

// Advice is what a caller should do about a call's error: the one reading
// of the client's errors that Retryable, RetryAfter, the engine's step
// classes and the gateway's retries share.
type Advice struct {
	// Known: err is, or wraps, one of this package's errors (or
	// ErrNoMaxTokens). Nothing else below holds for other errors.
	Known bool
	// Retry: the call may succeed if made again unchanged: rate limits,
	// overload, 5xx, 408 and transport failures. Too-large requests, quota,
	// other 4xx and ErrNoMaxTokens may not.
	Retry bool
	// After is how long the provider asked to wait before the next attempt
	// (a rate limit's or overload's retry-after), zero when it said nothing.
	After time.Duration
}

// Advise reads err, an error a call returned.
func Advise(err error) Advice {
	var (
		rl *RateLimitError
		ov *OverloadedError
		st *StatusError
		tr *TransportError
		tl *TooLargeError
		q  *QuotaError
	)
	switch {
	case err == nil:
		return Advice{}
	case errors.As(err, &rl):
		return Advice{Known: true, Retry: true, After: rl.RetryAfter}
	case errors.As(err, &ov):
		return Advice{Known: true, Retry: true, After: ov.RetryAfter}
	case errors.As(err, &tr):
		return Advice{Known: true, Retry: true}
	case errors.As(err, &st):
		return Advice{Known: true, Retry: st.Status == 0 || st.Status >= 500 || st.Status == 408}
	case errors.As(err, &tl), errors.As(err, &q), errors.Is(err, ErrNoMaxTokens):
		return Advice{Known: true}
	}
	return Advice{}
}

// Retryable reports whether the call that returned err may succeed if made
// again unchanged (after RetryAfter, when that reports a wait): Advise's
// Retry, but never for a cancelled context.
func Retryable(err error) bool {
	return !errors.Is(err, context.Canceled) && Advise(err).Retry
}

// RetryAfter returns how long the provider asked to wait before the next
// attempt, if err is a rate limit or overload that carried a wait.
func RetryAfter(err error) (time.Duration, bool) {
	a := Advise(err)
	return a.After, a.After > 0
}

// LimitOf returns the limit err names: the one a rate limit exhausted, or
// the one a too-large request can never fit.
func LimitOf(err error) (governor.Limit, bool) {
	var (
		rl *RateLimitError
		tl *TooLargeError
	)
	switch {
	case errors.As(err, &rl):
		return rl.Limit, rl.LimitKnown
	case errors.As(err, &tl):
		return tl.Limit, tl.LimitKnown
	}
	return 0, false
}

// limitPhrase names a limit the way providers do: "tokens per minute (TPM)".
func limitPhrase(l governor.Limit) string {
	return l.Title() + " (" + strings.ToUpper(l.String()) + ")"
}

func writeNumbers(b *strings.Builder, max, used, requested int64) {
	var parts []string
	if max > 0 {
		parts = append(parts, "limit "+num.Group(max))
	}
	if used > 0 {
		parts = append(parts, "used "+num.Group(used))
	}
	if requested > 0 {
		parts = append(parts, "requested "+num.Group(requested))
	}
	if len(parts) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(parts, ", "))
	}
}

func writeStatus(b *strings.Builder, status int) {
	if status != 0 {
		fmt.Fprintf(b, " (HTTP %d)", status)
	}
}

// maxMessageInError bounds how much of a provider's message an Error string
// repeats: enough to diagnose, not enough to flood a log.
const maxMessageInError = 300

func writeProviderMessage(b *strings.Builder, msg string) {
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		return
	}
	if len(msg) > maxMessageInError {
		msg = cutAt(msg, maxMessageInError) + "…"
	}
	b.WriteString(": ")
	b.WriteString(msg)
}
