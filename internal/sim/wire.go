package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
)

// headerLimit is one limit a profile reports in headers, with the canonical
// names of its limit, remaining and reset headers.
type headerLimit struct {
	limit governor.Limit
	keys  [3]string
}

// headerLimits lists the limits each profile's rate-limit headers report.
// Groq's "requests" are per day, OpenAI's per minute; neither reports the
// other limits, which clients learn from error text.
var headerLimits = map[string][]headerLimit{
	"groq":      {xHeaders("requests", governor.RPD), xHeaders("tokens", governor.TPM)},
	"openai":    {xHeaders("requests", governor.RPM), xHeaders("tokens", governor.TPM)},
	"anthropic": {anthropicHeaders("requests", governor.RPM), anthropicHeaders("tokens", governor.TPM), anthropicHeaders("input-tokens", governor.ITPM), anthropicHeaders("output-tokens", governor.OTPM)},
}

func xHeaders(name string, l governor.Limit) headerLimit {
	return headerLimit{l, [3]string{http.CanonicalHeaderKey("X-Ratelimit-Limit-" + name),
		http.CanonicalHeaderKey("X-Ratelimit-Remaining-" + name), http.CanonicalHeaderKey("X-Ratelimit-Reset-" + name)}}
}

func anthropicHeaders(name string, l governor.Limit) headerLimit {
	p := "Anthropic-Ratelimit-" + name + "-"
	return headerLimit{l, [3]string{http.CanonicalHeaderKey(p + "Limit"), http.CanonicalHeaderKey(p + "Remaining"), http.CanonicalHeaderKey(p + "Reset")}}
}

// wire builds the Header and Body of r from the model's state after the decision.
func (m *Model) wire(t int64, r *Response, c governor.Cost, exact time.Duration) {
	// The bench keeps the response of every call in flight, so the header
	// costs as little as it can: a map of the size it needs and one array
	// for all its values.
	n := 1 // retry-after
	for _, hl := range headerLimits[m.cfg.Profile] {
		if m.cfg.Limits[hl.limit] > 0 {
			n += 3
		}
	}
	h := make(http.Header, n)
	vals := m.rateHeaders(t, h, make([]string, 0, n))
	if r.Status == http.StatusTooManyRequests && r.RetryAfter > 0 {
		vals = append(vals, strconv.FormatInt(int64(r.RetryAfter/time.Second), 10))
		h["Retry-After"] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	r.Header = h
	switch {
	case r.Rejected:
		r.Body = m.rejectBody(r, c, exact)
	case r.Fault == Fault5xx:
		r.Body = ServerErrorBody(m.cfg.Profile, r.Status, r.id)
	case r.Fault == FaultBadJSON:
		r.Body = fmt.Appendf(nil, `{"id":"chatcmpl-sim-%d","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"The`, r.id, cmp.Or(r.model, m.cfg.Model))
	}
}

// rateHeaders sets the profile's rate-limit headers for the limits that are
// configured, appending their values to vals (which must have room for them,
// so that each header's value is a slice of it). Remaining is what the limit
// has left now; reset is when everything it counts now will have stopped
// counting.
func (m *Model) rateHeaders(t int64, h http.Header, vals []string) []string {
	set := func(key, v string) {
		vals = append(vals, v)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for _, hl := range headerLimits[m.cfg.Profile] {
		l := hl.limit
		lim := m.cfg.Limits[l]
		if lim == 0 {
			continue
		}
		lg := m.ledger(l)
		remaining := max(lim-lg.sum.On(l), 0)
		reset := time.Duration(lg.resetAt(t, l) - t)
		switch m.cfg.Profile {
		case "anthropic":
			if l != governor.RPM {
				remaining = remaining / 1000 * 1000 // Anthropic rounds token remainders down to thousands
			}
			set(hl.keys[0], strconv.FormatInt(lim, 10))
			set(hl.keys[1], strconv.FormatInt(remaining, 10))
			set(hl.keys[2], time.Unix(0, t).Add(ceilTo(reset, time.Second)).UTC().Truncate(time.Second).Format(time.RFC3339))
		default:
			unit := time.Millisecond
			if m.cfg.Profile == "groq" {
				unit = 10 * time.Millisecond // Groq shows resets to hundredths: "2m59.56s"
			}
			set(hl.keys[0], strconv.FormatInt(lim, 10))
			set(hl.keys[1], strconv.FormatInt(remaining, 10))
			set(hl.keys[2], ceilTo(reset, unit).String())
		}
	}
	return vals
}

// rejectBody is the profile's error body for a rate-limit or too-large rejection.
func (m *Model) rejectBody(r *Response, c governor.Cost, exact time.Duration) []byte {
	l := r.Limit
	lim, need := m.cfg.Limits[l], c.On(l)
	used := m.ledger(l).sum.On(l)
	abbr := strings.ToUpper(l.String())
	wait := ceilTo(exact, time.Millisecond).String()
	kind := "tokens"
	if l == governor.RPM || l == governor.RPD {
		kind = "requests"
	}
	model := cmp.Or(r.model, m.cfg.Model)
	switch m.cfg.Profile {
	case "groq":
		org := fmt.Sprintf("for model `%s` in organization `org_sim` service tier `on_demand` on %s (%s)", model, l.Title(), abbr)
		const upgrade = " Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing"
		var msg string
		switch {
		case r.TooLarge && l == governor.OTPM:
			msg = fmt.Sprintf("Request too large %s: Limit %d, Requested %d. The request's expected output tokens exceed the enforced limit; reduce max_tokens (or the request's expected output) and try again.", org, lim, need)
		case r.TooLarge:
			msg = fmt.Sprintf("Request too large %s: Limit %d, Requested %d, please reduce your message size and try again.%s", org, lim, need, upgrade)
		default:
			msg = fmt.Sprintf("Rate limit reached %s: Limit %d, Used %d, Requested %d. Please try again in %s.%s", org, lim, used, need, wait, upgrade)
		}
		return ErrorBody("groq", kind, "rate_limit_exceeded", msg, r.id)
	case "anthropic":
		scope := fmt.Sprintf("(org: org-sim, model: %s)", model)
		if r.TooLarge {
			msg := fmt.Sprintf("Request too large: this request needs %s %s, more than your organization's rate limit of %s %s %s allows at once. Please reduce the prompt length or the maximum tokens requested.",
				num.Group(need), l.Unit(), num.Group(lim), l.Title(), scope)
			return ErrorBody("anthropic", "invalid_request_error", "", msg, r.id)
		}
		msg := fmt.Sprintf("This request would exceed your organization's rate limit of %s %s %s. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.",
			num.Group(lim), l.Title(), scope)
		return ErrorBody("anthropic", "rate_limit_error", "", msg, r.id)
	default: // openai
		title := strings.Replace(l.Title(), "minute", "min", 1)
		const visit = " Visit https://platform.openai.com/account/rate-limits to learn more."
		var msg string
		if r.TooLarge {
			msg = fmt.Sprintf("Request too large for %s in organization org-sim on %s (%s): Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.%s", model, title, abbr, lim, need, visit)
		} else {
			msg = fmt.Sprintf("Rate limit reached for %s in organization org-sim on %s (%s): Limit %d, Used %d, Requested %d. Please try again in %s.%s", model, title, abbr, lim, used, need, wait, visit)
		}
		return ErrorBody("openai", kind, "rate_limit_exceeded", msg, r.id)
	}
}

// ServerErrorBody is the profile's body for a 5xx status.
func ServerErrorBody(profile string, status int, id uint64) []byte {
	switch profile {
	case "anthropic":
		if status == 529 {
			return ErrorBody(profile, "overloaded_error", "", "Overloaded", id)
		}
		return ErrorBody(profile, "api_error", "", "Internal server error", id)
	case "groq":
		if status == http.StatusServiceUnavailable {
			return ErrorBody(profile, "internal_server_error", "service_unavailable", "Service Unavailable", id)
		}
		return ErrorBody(profile, "internal_server_error", "", "Internal Server Error", id)
	default:
		if status == http.StatusServiceUnavailable {
			return ErrorBody(profile, "server_error", "", "The engine is currently overloaded, please try again later", id)
		}
		return ErrorBody(profile, "server_error", "", "The server had an error while processing your request. Sorry about that!", id)
	}
}

// ErrorBody is an error body in the profile's shape: OpenAI and Groq
// {"error":{"message","type","code"}} (OpenAI also "param"), Anthropic
// {"type":"error","error":{"type","message"},"request_id"}; id 0 (a body
// that answers no request of the model, e.g. a proxy's own error) leaves
// request_id out. An empty code is left out (Groq) or null (OpenAI).
func ErrorBody(profile, typ, code, msg string, id uint64) []byte {
	var v any
	switch profile {
	case "anthropic":
		type detail struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		body := struct {
			Type      string `json:"type"`
			Error     detail `json:"error"`
			RequestID string `json:"request_id,omitempty"`
		}{Type: "error", Error: detail{typ, msg}}
		if id != 0 {
			body.RequestID = fmt.Sprintf("req_sim_%06d", id)
		}
		v = body
	case "groq":
		type groqError struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code,omitempty"`
		}
		v = struct {
			Error groqError `json:"error"`
		}{groqError{msg, typ, code}}
	default:
		var c *string
		if code != "" {
			c = &code
		}
		v = struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}{Error: struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		}{msg, typ, nil, c}}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only strings: cannot fail
	}
	return b
}
