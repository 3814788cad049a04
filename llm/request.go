package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/governor"
)

// Message is one chat message. Content holds text; content that is not a
// plain string (an array of parts, or null next to tool calls) is kept as
// sent in RawContent so it is forwarded unchanged, while Content gets the
// text of its text parts for counting.
type Message struct {
	Role    string
	Content string
	// RawContent, when set, is sent as "content" in place of Content.
	RawContent json.RawMessage
	// Extra holds the message's other fields (name, tool_calls,
	// tool_call_id, ...), forwarded unchanged.
	Extra map[string]json.RawMessage

	// contentSent records that a decoded message had a "content" field,
	// which an empty Content alone cannot tell.
	contentSent bool
}

// MarshalJSON writes role, content and the extra fields.
func (m Message) MarshalJSON() ([]byte, error) {
	fields := make(map[string]json.RawMessage, len(m.Extra)+2)
	for k, v := range m.Extra {
		fields[k] = v
	}
	role, err := json.Marshal(m.Role)
	if err != nil {
		return nil, err
	}
	fields["role"] = role
	if len(m.RawContent) > 0 {
		fields["content"] = m.RawContent
	} else {
		c, err := json.Marshal(m.Content)
		if err != nil {
			return nil, err
		}
		fields["content"] = c
	}
	return marshalFields(fields)
}

// UnmarshalJSON reads a message, keeping fields it does not model in Extra.
func (m *Message) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return errors.New("a message must be a JSON object")
	}
	if fields == nil {
		return errors.New("a message must be a JSON object")
	}
	*m = Message{}
	if raw, ok := fields["role"]; ok {
		if err := json.Unmarshal(raw, &m.Role); err != nil {
			return errors.New(`"role" must be a string`)
		}
		delete(fields, "role")
	}
	if raw, ok := fields["content"]; ok {
		m.contentSent = true
		delete(fields, "content")
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '"' {
			if err := json.Unmarshal(raw, &m.Content); err != nil {
				return errors.New(`"content" is not a valid string`)
			}
		} else {
			m.RawContent = slices.Clone(raw)
			m.Content = partsText(raw)
		}
	}
	if len(fields) > 0 {
		m.Extra = fields
	}
	return nil
}

// partsText joins the text of [{"type":"text","text":"..."}] content parts.
func partsText(raw json.RawMessage) string {
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Text == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// MaxOutputTokens bounds max_tokens and max_completion_tokens in a request a
// client sends: 2^20 = 1,048,576 tokens, several times the largest output any
// model offers today (tens to a few hundred thousand tokens), so no real
// request is refused, while a client's 2^62 is refused where it enters
// instead of wrapping the cost it is priced at.
const MaxOutputTokens = 1 << 20

// MaxChoices bounds n, the number of choices a request asks for: 128, the
// largest OpenAI accepts. Output is reserved for every choice.
const MaxChoices = 128

// roles lists the message roles a request may carry, in the order error
// messages name them.
var roles = []string{"system", "user", "assistant", "tool", "developer", "function"}

// ChatRequest is a chat completions request. Fields the type does not model
// go in Extra and are sent as they are, so a request decoded from a client's
// JSON is forwarded without loss.
type ChatRequest struct {
	Model    string
	Messages []Message
	// MaxTokens caps the output; 0 means unset. Every request the Client
	// sends carries one (see Config.DefaultMaxTokens). A request decoded
	// from a client has at most MaxOutputTokens.
	MaxTokens int
	// CompletionTokensName sends MaxTokens as max_completion_tokens, the
	// newer OpenAI name its reasoning models require, instead of max_tokens.
	// DecodeChatRequest sets it when the client used that name, and
	// SetDefaultMaxTokens as the profile takes it.
	CompletionTokensName bool
	Temperature          *float64
	Stop                 []string
	User                 string
	// Stream asks for an event stream. ChatStream sets it; Chat clears it.
	Stream bool
	// Extra holds any other field (tools, response_format, seed, n,
	// stream_options, ...). Values are marshalled with encoding/json;
	// json.RawMessage values are sent as they are (only compacted), so
	// numbers keep their precision. A key that names a modelled field
	// above is ignored.
	Extra map[string]any
}

// SetDefaultMaxTokens gives r, a request that names no maximum, one of n
// output tokens under the name profile p takes for r's model
// (Profile.CompletionTokensName), or max_completion_tokens when r asks for
// that name (CompletionTokensName): a maximum the client did not ask for
// must not be one the provider refuses, as OpenAI's reasoning models
// refuse max_tokens. A request that names its own maximum keeps the name
// it used: change only its MaxTokens.
func (r *ChatRequest) SetDefaultMaxTokens(p Profile, n int) {
	r.MaxTokens = n
	r.CompletionTokensName = r.CompletionTokensName || p.CompletionTokensName(r.Model)
}

// MaxTokensName is the name MaxTokens is sent under: "max_completion_tokens"
// or "max_tokens". Messages about the maximum name it so, as the client
// wrote it.
func (r *ChatRequest) MaxTokensName() string {
	if r.CompletionTokensName {
		return "max_completion_tokens"
	}
	return "max_tokens"
}

// modelledFields are written from ChatRequest's own fields, never Extra.
var modelledFields = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "max_completion_tokens": true,
	"temperature": true, "stop": true, "user": true, "stream": true,
}

// MarshalJSON writes the request as the OpenAI wire format, with Extra's
// fields merged in and keys in a stable order.
func (r ChatRequest) MarshalJSON() ([]byte, error) {
	fields := make(map[string]json.RawMessage, len(r.Extra)+8)
	for k, v := range r.Extra {
		if modelledFields[k] {
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("llm: request field %q: %w", k, err)
		}
		fields[k] = raw
	}
	put := func(k string, v any) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("llm: request field %q: %w", k, err)
		}
		fields[k] = raw
		return nil
	}
	msgs := r.Messages
	if msgs == nil {
		msgs = []Message{}
	}
	if err := put("model", r.Model); err != nil {
		return nil, err
	}
	if err := put("messages", msgs); err != nil {
		return nil, err
	}
	if r.MaxTokens > 0 {
		if err := put(r.MaxTokensName(), r.MaxTokens); err != nil {
			return nil, err
		}
	}
	if r.Temperature != nil {
		if err := put("temperature", *r.Temperature); err != nil {
			return nil, err
		}
	}
	if len(r.Stop) > 0 {
		if err := put("stop", r.Stop); err != nil {
			return nil, err
		}
	}
	if r.User != "" {
		if err := put("user", r.User); err != nil {
			return nil, err
		}
	}
	if r.Stream {
		fields["stream"] = json.RawMessage("true")
	}
	return marshalFields(fields)
}

// UnmarshalJSON reads a request, keeping unmodelled fields in Extra as
// json.RawMessage. max_completion_tokens is read as MaxTokens; when both
// names are present the larger value is kept, so an output reservation is
// never smaller than what the provider may produce. Each must be a whole
// number from 1 to MaxOutputTokens, and n one from 1 to MaxChoices (null
// means unset); an error names the field and the bound.
func (r *ChatRequest) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return errors.New("llm: request body must be a JSON object")
	}
	*r = ChatRequest{}
	for k, raw := range fields {
		var err error
		switch k {
		case "model":
			err = decodeString(raw, &r.Model)
		case "messages":
			if isNull(raw) {
				break
			}
			if err = json.Unmarshal(raw, &r.Messages); err != nil {
				err = fmt.Errorf("must be an array of messages: %w", unwrapJSON(err))
			}
		case "max_tokens", "max_completion_tokens":
			var n int
			if n, err = decodeCount(raw, MaxOutputTokens); err == nil && n > 0 {
				if k == "max_completion_tokens" {
					r.CompletionTokensName = true
				}
				r.MaxTokens = max(r.MaxTokens, n)
			}
		case "temperature":
			if isNull(raw) {
				break
			}
			var t float64
			if err = json.Unmarshal(raw, &t); err != nil {
				err = errors.New("must be a number")
			} else {
				r.Temperature = &t
			}
		case "stop":
			err = decodeStop(raw, &r.Stop)
		case "user":
			err = decodeString(raw, &r.User)
		case "stream":
			if !isNull(raw) && json.Unmarshal(raw, &r.Stream) != nil {
				err = errors.New("must be true or false")
			}
		case "n":
			// Checked here, kept as sent: the estimator reads it from Extra.
			if _, err = decodeCount(raw, MaxChoices); err == nil {
				r.setExtra(k, raw)
			}
		default:
			r.setExtra(k, raw)
		}
		if err != nil {
			return fmt.Errorf("llm: request field %q: %w", k, err)
		}
	}
	return nil
}

func (r *ChatRequest) setExtra(k string, raw json.RawMessage) {
	if r.Extra == nil {
		r.Extra = make(map[string]any)
	}
	r.Extra[k] = json.RawMessage(slices.Clone(raw))
}

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

// clone returns a copy that can be changed without touching r's maps and
// slices (values inside Extra are shared; they are never modified).
func (r *ChatRequest) clone() *ChatRequest {
	c := *r
	c.Messages = slices.Clone(r.Messages)
	c.Stop = slices.Clone(r.Stop)
	if r.Extra != nil {
		c.Extra = make(map[string]any, len(r.Extra))
		for k, v := range r.Extra {
			c.Extra[k] = v
		}
	}
	return &c
}

func decodeString(raw json.RawMessage, dst *string) error {
	if isNull(raw) {
		return nil
	}
	if json.Unmarshal(raw, dst) != nil {
		return errors.New("must be a string")
	}
	return nil
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

func decodeStop(raw json.RawMessage, dst *[]string) error {
	raw = bytes.TrimSpace(raw)
	switch {
	case isNull(raw):
		return nil
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return errors.New("must be a string or an array of strings")
		}
		*dst = []string{s}
		return nil
	}
	if json.Unmarshal(raw, dst) != nil {
		return errors.New("must be a string or an array of strings")
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// unwrapJSON keeps a nested message's own explanation and drops
// encoding/json's type-path prefix.
func unwrapJSON(err error) error {
	var ue *json.UnmarshalTypeError
	if errors.As(err, &ue) {
		return errors.New("wrong JSON type")
	}
	return err
}

// marshalFields writes an object with sorted keys, so bodies are stable.
func marshalFields(fields map[string]json.RawMessage) ([]byte, error) {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(fields[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Usage is the token usage a provider reports for a call.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Governor returns the usage in the governor's terms, for settling a
// reservation.
func (u Usage) Governor() governor.Usage {
	return governor.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
}

// Choice is one completion of a response.
type Choice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	FinishReason string  `json:"finish_reason"`
}

// ChatResponse is a finished chat completion.
type ChatResponse struct {
	ID      string   `json:"id"`
	Model   string   `json:"model"`
	Created int64    `json:"created"`
	Choices []Choice `json:"choices"`
	Usage   Usage    `json:"usage"`

	// Snapshot is what the response headers said about the key's limits.
	Snapshot governor.Snapshot `json:"-"`
	// Header is the response's header.
	Header http.Header `json:"-"`
	// Body is the response body as received.
	Body []byte `json:"-"`
}

// Text returns the first choice's content, or "" when there is none.
func (r *ChatResponse) Text() string {
	if len(r.Choices) == 0 {
		return ""
	}
	return r.Choices[0].Message.Content
}

// Model is one entry of GET /models.
type Model struct {
	ID      string `json:"id"`
	OwnedBy string `json:"owned_by"`
	Created int64  `json:"created"`
	// Raw is the entry as received; providers add their own fields
	// (context_window, display_name, ...).
	Raw json.RawMessage `json:"-"`
}
