package llm

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
)

// This file writes what Classify reads: each profile's error bodies and the
// wording of its rate-limit and too-large refusals. A server that speaks as
// the provider (a proxy answering for it, a simulator standing in for it)
// writes with these, so that clients read its answers as the provider's
// own. The names of the rate-limit headers are Profile.RateLimitHeaders.

// ErrorBody is an error body in the profile's shape: OpenAI and Groq
// {"error":{"message","type","code"}} (OpenAI also "param"), Anthropic
// {"type":"error","error":{"type","message"},"request_id"}. An empty code
// is left out (Groq) or null (OpenAI); Anthropic has none. An empty
// requestID leaves request_id out (a body that answers no request of the
// provider, a proxy's own error for one); only Anthropic's bodies carry it.
func (p Profile) ErrorBody(typ, code, message, requestID string) []byte {
	var v any
	switch p.orDefault() {
	case Anthropic:
		type detail struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		v = struct {
			Type      string `json:"type"`
			Error     detail `json:"error"`
			RequestID string `json:"request_id,omitempty"`
		}{"error", detail{typ, message}, requestID}
	case Groq:
		type groqError struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code,omitempty"`
		}
		v = struct {
			Error groqError `json:"error"`
		}{groqError{message, typ, code}}
	default:
		type openaiError struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		}
		var c *string
		if code != "" {
			c = &code
		}
		v = struct {
			Error openaiError `json:"error"`
		}{openaiError{message, typ, nil, c}}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only strings: cannot fail
	}
	return b
}

// RateLimitType is the type and code of the profile's error body for a
// request refused, for now, by limit l: Anthropic's "rate_limit_error";
// Groq's and OpenAI's "requests" or "tokens", after what l counts, with
// code "rate_limit_exceeded".
func (p Profile) RateLimitType(l governor.Limit) (typ, code string) {
	if p.orDefault() == Anthropic {
		return "rate_limit_error", ""
	}
	return kindOf(l), "rate_limit_exceeded"
}

// TooLargeType is the type and code of the profile's error body for a
// request that can never fit limit l: Anthropic's "invalid_request_error";
// Groq's and OpenAI's the same as for a rate limit.
func (p Profile) TooLargeType(l governor.Limit) (typ, code string) {
	if p.orDefault() == Anthropic {
		return "invalid_request_error", ""
	}
	return p.RateLimitType(l)
}

// kindOf is what l counts, as Groq's and OpenAI's error types name it.
func kindOf(l governor.Limit) string {
	if l == governor.RPM || l == governor.RPD {
		return "requests"
	}
	return "tokens"
}

// TooLargeMessage says, in the profile's words, that a request needing
// need on limit l can never be sent: the limit allows allowance at most.
// Classify reads it, whatever the status, as a *TooLargeError naming l,
// allowance and (but in Anthropic's wording) need. org is the organization
// the provider names ("" for none; Anthropic names the model only beside
// it).
//
// The message has no final punctuation: the writer adds what to do about
// it, as each provider does (". Please reduce …", Groq's ", please reduce
// your message size …").
func (p Profile) TooLargeMessage(org, model string, l governor.Limit, need, allowance int64) string {
	switch p.orDefault() {
	case Anthropic:
		return fmt.Sprintf("Request too large: this request needs %s %s, more than your organization's rate limit of %s %s%s allows at once",
			num.Group(need), l.Unit(), num.Group(allowance), l.Title(), anthropicScope(org, model))
	case Groq:
		return fmt.Sprintf("Request too large %s: Limit %d, Requested %d", groqScope(org, model, l), allowance, need)
	default:
		return fmt.Sprintf("Request too large %s: Limit %d, Requested %d", openaiScope(org, model, l), allowance, need)
	}
}

// RateLimitMessage says, in the profile's words, that a request needing
// need on limit l must wait: the limit allows allowance, of which used is
// counted, and the request would fit after wait (shown rounded up to the
// millisecond, as providers show it). Classify reads it with status 429 as
// a *RateLimitError naming l, allowance and (but in Anthropic's wording,
// which names none of them) used, need and wait. org is as for
// TooLargeMessage, and the message likewise has no final punctuation.
func (p Profile) RateLimitMessage(org, model string, l governor.Limit, allowance, used, need int64, wait time.Duration) string {
	switch p.orDefault() {
	case Anthropic:
		return fmt.Sprintf("This request would exceed your organization's rate limit of %s %s%s",
			num.Group(allowance), l.Title(), anthropicScope(org, model))
	case Groq:
		return fmt.Sprintf("Rate limit reached %s: Limit %d, Used %d, Requested %d. Please try again in %s",
			groqScope(org, model, l), allowance, used, need, ceilMilli(wait))
	default:
		return fmt.Sprintf("Rate limit reached %s: Limit %d, Used %d, Requested %d. Please try again in %s",
			openaiScope(org, model, l), allowance, used, need, ceilMilli(wait))
	}
}

// groqScope is what a Groq refusal is for: "for model `M` in organization
// `O` service tier `on_demand` on tokens per minute (TPM)".
func groqScope(org, model string, l governor.Limit) string {
	s := "for model `" + model + "`"
	if org != "" {
		s += " in organization `" + org + "` service tier `on_demand`"
	}
	return s + " on " + l.Title() + " (" + strings.ToUpper(l.String()) + ")"
}

// openaiScope is what an OpenAI refusal is for: "for M in organization O
// on tokens per min (TPM)"; OpenAI shortens "minute".
func openaiScope(org, model string, l governor.Limit) string {
	s := "for " + model
	if org != "" {
		s += " in organization " + org
	}
	return s + " on " + strings.Replace(l.Title(), "minute", "min", 1) + " (" + strings.ToUpper(l.String()) + ")"
}

// anthropicScope is whose limit an Anthropic refusal names: " (org: O,
// model: M)", or nothing without an organization.
func anthropicScope(org, model string) string {
	if org == "" {
		return ""
	}
	return " (org: " + org + ", model: " + model + ")"
}

// ceilMilli rounds d up to the millisecond; a negative d is 0.
func ceilMilli(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}
