package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// roles lists the message roles a request may carry, in the order error
// messages name them.
var roles = []string{"system", "user", "assistant", "tool", "developer", "function"}

// DecodeChatRequest reads a client's request body and validates it
// (Validate). Unknown fields are kept in Extra and forwarded unchanged by
// MarshalJSON. The body must be valid UTF-8 and hold one JSON object and
// nothing after it. Every error names the field and what is wrong with it,
// in words fit for the client (a proxy answers them with a 400).
func DecodeChatRequest(body []byte) (*ChatRequest, error) {
	if err := checkUTF8(body); err != nil {
		return nil, err
	}
	var r ChatRequest
	if err := json.Unmarshal(body, &r); err != nil {
		var ue *json.UnmarshalTypeError
		var se *json.SyntaxError
		if errors.As(err, &se) {
			if at, ok := trailingData(body); ok {
				return nil, fmt.Errorf("llm: request body has data after the JSON object, at byte %d", at)
			}
		}
		if errors.As(err, &ue) || errors.As(err, &se) {
			return nil, errors.New("llm: request body must be a JSON object")
		}
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks a request a client sent, as DecodeChatRequest does once
// it has decoded one: a model; at least one message, each with a known role
// (system, user, assistant, tool, developer or function) and content — a
// string or an array of content parts, or null (or none) in an assistant
// message with tool_calls or function_call; max_tokens from 1 to
// MaxOutputTokens (0 means unset); n, if in Extra, a whole number from 1 to
// MaxChoices. Errors name the field:
//
//	llm: request field "max_tokens": 9223372036854775807 is over the limit of 1048576
//
// Call it on a request decoded from a client's body some other way. It does
// not see the body: check that it is valid UTF-8 (utf8.Valid) yourself, as
// DecodeChatRequest does, because encoding/json replaces invalid bytes in
// the strings it decodes and keeps them in raw values.
func (r *ChatRequest) Validate() error {
	if r.Model == "" {
		return errors.New(`llm: request field "model" is missing`)
	}
	if len(r.Messages) == 0 {
		return errors.New(`llm: request field "messages" is missing or empty`)
	}
	for i := range r.Messages {
		if err := r.Messages[i].validate(); err != nil {
			return fmt.Errorf("llm: request field \"messages[%d]\": %w", i, err)
		}
	}
	if r.MaxTokens != 0 {
		if err := checkCount(float64(r.MaxTokens), strconv.Itoa(r.MaxTokens), MaxOutputTokens); err != nil {
			return fmt.Errorf("llm: request field %q: %w", r.MaxTokensName(), err)
		}
	}
	if v, ok := r.Extra["n"]; ok {
		if err := checkChoices(v); err != nil {
			return fmt.Errorf(`llm: request field "n": %w`, err)
		}
	}
	return nil
}

// validate checks a message of a client's request.
func (m *Message) validate() error {
	if m.Role == "" {
		return errors.New(`"role" is missing`)
	}
	if !slices.Contains(roles, m.Role) {
		return fmt.Errorf(`"role" %s is not one of %s`, shortQuote(m.Role), strings.Join(roles, ", "))
	}
	calls := m.Role == "assistant" && (sent(m.Extra["tool_calls"]) || sent(m.Extra["function_call"]))
	raw := bytes.TrimSpace(m.RawContent)
	switch {
	case len(raw) == 0 && (m.contentSent || m.Content != ""):
		return nil // a string
	case len(raw) == 0:
		if calls {
			return nil
		}
		return errors.New(`"content" is missing`)
	case isNull(raw):
		if calls {
			return nil
		}
		return errors.New(`"content" is null; only an assistant message with tool_calls may leave it out`)
	case raw[0] == '"':
		return nil
	case raw[0] == '[':
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) == nil && !slices.ContainsFunc(parts, func(p json.RawMessage) bool {
			p = bytes.TrimSpace(p)
			return len(p) == 0 || p[0] != '{'
		}) {
			return nil
		}
	}
	return errors.New(`"content" must be a string or an array of content parts`)
}

// sent reports whether a field is there and not null.
func sent(raw json.RawMessage) bool { return len(raw) > 0 && !isNull(raw) }

// checkUTF8 refuses a body with bytes that are not UTF-8, naming where.
func checkUTF8(body []byte) error {
	if utf8.Valid(body) {
		return nil
	}
	at := 0
	for at < len(body) {
		r, n := utf8.DecodeRune(body[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	return fmt.Errorf("llm: request body is not valid UTF-8: invalid byte at offset %d", at)
}

// trailingData reports where a body that starts with a whole JSON value has
// more after it.
func trailingData(body []byte) (int, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	if dec.Decode(&v) != nil || v[0] != '{' {
		return 0, false
	}
	at := int(dec.InputOffset())
	rest := body[at:]
	trimmed := bytes.TrimLeft(rest, " \t\r\n")
	if len(trimmed) == 0 {
		return 0, false
	}
	return at + len(rest) - len(trimmed), true
}

// decodeCount reads a whole number from 1 to limit; null is 0 (unset).
func decodeCount(raw json.RawMessage, limit int) (int, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return 0, nil
	}
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, errors.New("must be a whole number")
	}
	// raw is a JSON number: ParseFloat reads every one, out of range as ±Inf
	// or 0, which the bounds refuse.
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, errors.New("must be a whole number")
	}
	if err := checkCount(f, string(raw), limit); err != nil {
		return 0, err
	}
	return int(f), nil
}

// checkCount checks that f, sent as text, is a whole number from 1 to limit.
func checkCount(f float64, text string, limit int) error {
	switch {
	case f != math.Trunc(f):
		return fmt.Errorf("must be a whole number, got %s", shortNumber(text))
	case f < 1:
		return fmt.Errorf("must be at least 1, got %s", shortNumber(text))
	case f > float64(limit):
		return fmt.Errorf("%s is over the limit of %d", shortNumber(text), limit)
	}
	return nil
}

// checkChoices checks n as ChatRequest.Extra may hold it: raw JSON from a
// decoded body, or a number set in code.
func checkChoices(v any) error {
	switch x := v.(type) {
	case json.RawMessage:
		_, err := decodeCount(x, MaxChoices)
		return err
	case nil:
		return nil
	case int:
		return checkCount(float64(x), strconv.Itoa(x), MaxChoices)
	case int64:
		return checkCount(float64(x), strconv.FormatInt(x, 10), MaxChoices)
	case float64:
		return checkCount(x, strconv.FormatFloat(x, 'g', -1, 64), MaxChoices)
	}
	return errors.New("must be a whole number")
}

// shortNumber keeps an error message short when a client sends a number of
// a thousand digits.
func shortNumber(s string) string {
	if len(s) > 40 {
		return s[:20] + "…" + s[len(s)-10:]
	}
	return s
}

// shortQuote quotes s for an error message, cut to a readable length.
func shortQuote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return strconv.Quote(s)
}
