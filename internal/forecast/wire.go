package forecast

import (
	"cmp"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
)

// headerLimits lists the limits each profile's rate-limit headers report,
// with their header names: llm's, which clients read.
var headerLimits = func() map[llm.Profile][]llm.RateLimitHeader {
	m := make(map[llm.Profile][]llm.RateLimitHeader, 3)
	for _, p := range llm.Profiles() {
		m[p] = p.RateLimitHeaders()
	}
	return m
}()

// wire builds the Header and Body of r from the model's state after the decision.
func (m *Model) wire(t int64, r *Response, c governor.Cost, exact time.Duration) {
	// A replay keeps the response of every call in flight, so the header
	// costs as little as it can: a map of the size it needs and one array
	// for all its values.
	n := 1 // retry-after
	for _, hl := range headerLimits[m.cfg.Profile] {
		if m.cfg.Limits[hl.Limit] > 0 {
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
		l := hl.Limit
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
			set(hl.LimitKey, strconv.FormatInt(lim, 10))
			set(hl.RemainingKey, strconv.FormatInt(remaining, 10))
			set(hl.ResetKey, time.Unix(0, t).Add(ceilTo(reset, time.Second)).UTC().Truncate(time.Second).Format(time.RFC3339))
		default:
			unit := time.Millisecond
			if m.cfg.Profile == "groq" {
				unit = 10 * time.Millisecond // Groq shows resets to hundredths: "2m59.56s"
			}
			set(hl.LimitKey, strconv.FormatInt(lim, 10))
			set(hl.RemainingKey, strconv.FormatInt(remaining, 10))
			set(hl.ResetKey, ceilTo(reset, unit).String())
		}
	}
	return vals
}

// The organization the simulator's refusals name, in each provider's form.
const (
	groqOrg = "org_sim"
	simOrg  = "org-sim" // OpenAI's and Anthropic's
)

// What Groq and OpenAI add at the end of a refusal.
const (
	groqMore   = " Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing"
	openaiMore = " Visit https://platform.openai.com/account/rate-limits to learn more."
)

// rejectBody is the profile's error body for a rate-limit or too-large
// rejection: llm's wording of it, with what the provider adds about what to
// do.
func (m *Model) rejectBody(r *Response, c governor.Cost, exact time.Duration) []byte {
	l := r.Limit
	lim, need := m.cfg.Limits[l], c.On(l)
	used := m.ledger(l).sum.On(l)
	model := cmp.Or(r.model, m.cfg.Model)
	p := m.cfg.Profile
	typ, code := p.RateLimitType(l)
	if r.TooLarge {
		typ, code = p.TooLargeType(l)
	}
	var msg string
	switch p {
	case llm.Groq:
		switch {
		case r.TooLarge && l == governor.OTPM:
			msg = p.TooLargeMessage(groqOrg, model, l, need, lim) + ". The request's expected output tokens exceed the enforced limit; reduce max_tokens (or the request's expected output) and try again."
		case r.TooLarge:
			msg = p.TooLargeMessage(groqOrg, model, l, need, lim) + ", please reduce your message size and try again." + groqMore
		default:
			msg = p.RateLimitMessage(groqOrg, model, l, lim, used, need, exact) + "." + groqMore
		}
	case llm.Anthropic:
		if r.TooLarge {
			msg = p.TooLargeMessage(simOrg, model, l, need, lim) + ". Please reduce the prompt length or the maximum tokens requested."
		} else {
			msg = p.RateLimitMessage(simOrg, model, l, lim, used, need, exact) +
				". You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."
		}
	default:
		if r.TooLarge {
			msg = p.TooLargeMessage(simOrg, model, l, need, lim) + ". The input or output tokens must be reduced in order to run successfully." + openaiMore
		} else {
			msg = p.RateLimitMessage(simOrg, model, l, lim, used, need, exact) + "." + openaiMore
		}
	}
	return ErrorBody(m.cfg.Profile, typ, code, msg, r.id)
}

// ServerErrorBody is the profile's body for a 5xx status.
func ServerErrorBody(profile llm.Profile, status int, id uint64) []byte {
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

// ErrorBody is an error body in the profile's shape (llm.Profile.ErrorBody);
// id is the request it answers, named in Anthropic's request_id, and 0 (a
// body that answers no request of the model, e.g. a proxy's own error)
// leaves request_id out.
func ErrorBody(profile llm.Profile, typ, code, msg string, id uint64) []byte {
	var rid string
	if id != 0 {
		rid = fmt.Sprintf("req_sim_%06d", id)
	}
	return profile.ErrorBody(typ, code, msg, rid)
}
