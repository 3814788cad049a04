package llm

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/internal/jsonwalk"
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
// It reads the message as decoding it into a map[string]json.RawMessage
// would, a key written twice keeping its last value, without building one.
func (m *Message) UnmarshalJSON(data []byte) error {
	var role, content []byte
	var extra map[string]json.RawMessage
	if !jsonwalk.Object(data, func(k, v []byte) {
		switch string(k) {
		case "role":
			role = v
		case "content":
			content = v
		default:
			if extra == nil {
				extra = make(map[string]json.RawMessage)
			}
			extra[string(k)] = slices.Clone(v)
		}
	}) {
		return errors.New("a message must be a JSON object")
	}
	*m = Message{Extra: extra}
	switch {
	case role == nil || isNull(role):
	case jsonwalk.IsString(role):
		m.Role = jsonwalk.Unquote(role)
	default:
		return errors.New(`"role" must be a string`)
	}
	if content != nil {
		m.contentSent = true
		if jsonwalk.IsString(content) {
			m.Content = jsonwalk.Unquote(content)
		} else {
			m.RawContent = slices.Clone(content)
			m.Content = partsText(content)
		}
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
