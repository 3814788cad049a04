package llm

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/governor"
)

// errorBody is what an error response says, whichever shape it came in.
type errorBody struct {
	Message, Type, Code string
}

// maxPlainMessage bounds the text kept from an error body that is not JSON
// (an HTML page from a proxy, say).
const maxPlainMessage = 2048

// parseErrorBody reads the error shapes providers use:
// OpenAI and Groq {"error":{"message","type","code"}}, Anthropic
// {"type":"error","error":{"type","message"}}, and the looser
// {"error":"text"} and {"message":"text"} of some proxies. A body that is
// not JSON is kept as text so its message can still be read.
func parseErrorBody(body []byte) errorBody {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return errorBody{}
	}
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Type    json.RawMessage `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if body[0] != '{' || json.Unmarshal(body, &top) != nil {
		return errorBody{Message: plainText(body)}
	}
	var eb errorBody
	if len(top.Error) > 0 && top.Error[0] == '{' {
		var inner struct {
			Message json.RawMessage `json:"message"`
			Type    json.RawMessage `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(top.Error, &inner) == nil {
			eb = errorBody{scalar(inner.Message), scalar(inner.Type), scalar(inner.Code)}
		}
	} else if s := scalar(top.Error); s != "" {
		eb.Message = s
	}
	if eb.Message == "" {
		eb.Message = scalar(top.Message)
	}
	if eb.Type == "" {
		if t := scalar(top.Type); t != "error" {
			eb.Type = t
		}
	}
	if eb.Code == "" {
		eb.Code = scalar(top.Code)
	}
	return eb
}

// scalar renders a JSON string, number or boolean as text; anything else
// (null, objects, arrays, nothing) is "".
func scalar(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case '{', '[', 'n':
		return ""
	default:
		return string(raw)
	}
	return ""
}

func plainText(body []byte) string {
	if !utf8.Valid(body) {
		body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
	}
	return cutAt(string(body), maxPlainMessage) // already trimmed of surrounding space
}

// normalize collapses whitespace so messages that were wrapped or logged
// across lines still match.
func normalize(s string) string { return strings.Join(strings.Fields(s), " ") }

// limitPatterns map the phrases providers use to the limit they name. The
// parenthesised abbreviations Groq and OpenAI print are the most reliable
// and are tried first; the worded forms (Anthropic's "input tokens per
// minute", OpenAI's "tokens per min") follow, most specific first, so
// "output tokens per minute" is not read as "tokens per minute".
var limitPatterns = []struct {
	re    *regexp.Regexp
	limit governor.Limit
}{
	{regexp.MustCompile(`\(ITPM\)`), governor.ITPM},
	{regexp.MustCompile(`\(OTPM\)`), governor.OTPM},
	{regexp.MustCompile(`\(RPM\)`), governor.RPM},
	{regexp.MustCompile(`\(RPD\)`), governor.RPD},
	{regexp.MustCompile(`\(TPM\)`), governor.TPM},
	{regexp.MustCompile(`\(TPD\)`), governor.TPD},
	{regexp.MustCompile(`(?i)\binput tokens per min(ute)?\b`), governor.ITPM},
	{regexp.MustCompile(`(?i)\boutput tokens per min(ute)?\b`), governor.OTPM},
	{regexp.MustCompile(`(?i)\brequests per min(ute)?\b`), governor.RPM},
	{regexp.MustCompile(`(?i)\brequests per day\b`), governor.RPD},
	{regexp.MustCompile(`(?i)\btokens per min(ute)?\b`), governor.TPM},
	{regexp.MustCompile(`(?i)\btokens per day\b`), governor.TPD},
	// Anthropic's older wording: "Number of request tokens has exceeded
	// your per-minute rate limit" (request tokens are input tokens) and
	// "Number of requests has exceeded your per-minute rate limit".
	{regexp.MustCompile(`(?i)\brequest tokens has exceeded your per-minute`), governor.ITPM},
	{regexp.MustCompile(`(?i)\brequests has exceeded your per-minute`), governor.RPM},
}

// limitFromMessage returns the limit a provider's message names.
func limitFromMessage(text string) (governor.Limit, bool) {
	for _, p := range limitPatterns {
		if p.re.MatchString(text) {
			return p.limit, true
		}
	}
	return 0, false
}

type messageNumbers struct{ max, used, requested int64 }

var (
	// "Limit 8000", "Limit: 3 / min" (older OpenAI).
	reMax = regexp.MustCompile(`\bLimit:? ?([0-9][0-9,]*)`)
	// Anthropic: "rate limit of 30,000 input tokens per minute", "rate
	// limit for your organization (…) of 20,000 input tokens per minute".
	reOfMax = regexp.MustCompile(`(?i)\bof ([0-9][0-9,]*) (?:input |output )?(?:tokens|requests) per\b`)
	// "Used 7972", "Current: 4 / min" (older OpenAI).
	reUsed      = regexp.MustCompile(`\b(?:Used|Current):? ?([0-9][0-9,]*)`)
	reRequested = regexp.MustCompile(`\bRequested:? ?([0-9][0-9,]*)`)
)

func numbersFromMessage(text string) messageNumbers {
	var n messageNumbers
	n.max = firstNumber(reMax, text)
	if n.max == 0 {
		n.max = firstNumber(reOfMax, text)
	}
	n.used = firstNumber(reUsed, text)
	n.requested = firstNumber(reRequested, text)
	return n
}

func firstNumber(re *regexp.Regexp, text string) int64 {
	m := re.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimRight(m[1], ","), ",", ""), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

var (
	// "Please try again in 7m12s", "in 5.289s", "in 120ms", "in 1m30.5s".
	reTryAgain = regexp.MustCompile(`(?i)try again in ((?:[0-9]+(?:\.[0-9]+)?(?:ns|us|µs|ms|h|m|s))+)`)
	// Older OpenAI: "Please retry after 20 seconds".
	reRetryAfterSeconds = regexp.MustCompile(`(?i)retry after ([0-9]+(?:\.[0-9]+)?) ?s(?:ec(?:ond)?s?)?\b`)
)

// headerRetryAfter reads retry-after-ms (OpenAI's and Anthropic's precise
// form) and retry-after (seconds, possibly fractional, or an HTTP date), and
// returns the longer. It is what the provider asked for, in full: a wait too
// long for a Duration is the longest one (292 years), and boundWait bounds
// it after, so that a log can still name what was asked.
func headerRetryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v, ok := askedSeconds(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		d = v
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if s, ok := askedSeconds(v, time.Second); ok {
			d = max(d, s)
		} else if t, err := http.ParseTime(v); err == nil {
			d = max(d, t.Sub(now)) // saturates; a date in the past is no wait
		}
	}
	return d
}

// askedSeconds reads a non-negative decimal number of units, saturating at
// the longest Duration; NaN, negative values and text are not a wait.
func askedSeconds(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	switch {
	case math.IsInf(f, 1): // "Inf", or more than a float holds
		return math.MaxInt64, true
	case err != nil || math.IsNaN(f) || f < 0:
		return 0, false
	case f*float64(unit) >= math.MaxInt64:
		return math.MaxInt64, true
	}
	return time.Duration(math.Ceil(f * float64(unit))), true
}

// boundWait bounds a wait the provider asked for before calling again:
// limit l's period plus governor.MaxLag when the answer names l (known),
// governor.MaxWait (a day plus that) when it names none. It returns the
// wait to keep, and what was asked when that was longer (0 otherwise), for
// Feedback to pass on to the governor, which logs it.
func boundWait(asked time.Duration, l governor.Limit, known bool) (wait, over time.Duration) {
	most := governor.MaxWait
	if known {
		most = l.MaxWait()
	}
	if asked > most {
		return most, asked
	}
	return max(asked, 0), 0
}

// messageRetryAfter reads the wait a message names; 0 when it names none.
func messageRetryAfter(text string) time.Duration {
	if m := reTryAgain.FindStringSubmatch(text); m != nil {
		if d, ok := parseDuration(m[1]); ok {
			return d
		}
	}
	if m := reRetryAfterSeconds.FindStringSubmatch(text); m != nil {
		if d, ok := parseSeconds(m[1], time.Second); ok {
			return d
		}
	}
	return 0
}
