package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// MaxOutputTokens bounds max_tokens and max_completion_tokens in a request a
// client sends: 2^20 = 1,048,576 tokens, several times the largest output any
// model offers today (tens to a few hundred thousand tokens), so no real
// request is refused, while a client's 2^62 is refused where it enters
// instead of wrapping the cost it is priced at.
const MaxOutputTokens = 1 << 20

// MaxChoices bounds n, the number of choices a request asks for: 128, the
// largest OpenAI accepts. Output is reserved for every choice.
const MaxChoices = 128

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
