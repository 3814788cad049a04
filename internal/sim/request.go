package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// MaxChoices is the largest n the openai profile accepts, as OpenAI does;
// the groq and anthropic profiles accept only 1.
const MaxChoices = 128

// MaxAnswerTokens bounds the output one answer may hold in all its choices
// together (n × max_tokens): a request asking more gets a 400, so that no
// answer is longer than about 7 MB of text, whatever n asks. It is the
// simulator's own bound, not a provider's.
const MaxAnswerTokens = forecast.MaxOutputTokensCap

// chatRequest is the part of a chat completion request the simulator reads.
type chatRequest struct {
	Model    string
	Messages []chatMessage
	// Numbers are kept raw, so that a fraction, a string or a number beyond
	// int64 gets the provider's 400 rather than a decoder's message.
	MaxTokens           json.RawMessage
	MaxCompletionTokens json.RawMessage
	N                   json.RawMessage
	Stream              bool
	IncludeUsage        bool // stream_options.include_usage
	User                string
}

// chatMessage is one message: its text (a string content, or the text parts
// of an array of content parts) and whether it has a name.
type chatMessage struct {
	Text  string
	Named bool
}

// parseChat reads a request body that is one valid JSON value. It checks the
// type of every field it reads and returns the 400's message for the first
// one that is wrong, in OpenAI's words ("Invalid type for 'messages[0].role':
// expected a string, but got an integer instead."). Fields it does not read
// are ignored, as the providers ignore what they do not know; names match
// exactly, as the providers match them.
func parseChat(raw json.RawMessage) (req chatRequest, msg string) {
	if k := jsonKind(raw); k != "an object" {
		return req, fmt.Sprintf("Invalid type for the request body: expected an object, but got %s instead.", k)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return req, invalidJSON // raw is one object: cannot fail
	}
	if msg := decodeAs("model", top["model"], &req.Model, "a string"); msg != "" {
		return req, msg
	}
	if msg := req.parseMessages(top["messages"]); msg != "" {
		return req, msg
	}
	req.MaxTokens, req.MaxCompletionTokens, req.N = top["max_tokens"], top["max_completion_tokens"], top["n"]
	if msg := decodeAs("stream", top["stream"], &req.Stream, "a boolean"); msg != "" {
		return req, msg
	}
	if opts := top["stream_options"]; !isNull(opts) {
		var fields map[string]json.RawMessage
		if jsonKind(opts) != "an object" || json.Unmarshal(opts, &fields) != nil {
			return req, typeError("stream_options", "an object", opts)
		}
		if msg := decodeAs("stream_options.include_usage", fields["include_usage"], &req.IncludeUsage, "a boolean"); msg != "" {
			return req, msg
		}
	}
	if msg := decodeAs("user", top["user"], &req.User, "a string"); msg != "" {
		return req, msg
	}
	return req, ""
}

// parseMessages reads the messages array; absent or null leaves it nil, an
// empty array empty but not nil.
func (req *chatRequest) parseMessages(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var list []json.RawMessage
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &list) != nil {
		return typeError("messages", "an array", raw)
	}
	req.Messages = make([]chatMessage, len(list))
	for i, m := range list {
		path := fmt.Sprintf("messages[%d]", i)
		var fields map[string]json.RawMessage
		if jsonKind(m) != "an object" || json.Unmarshal(m, &fields) != nil {
			return typeError(path, "an object", m)
		}
		var role, name string
		if msg := decodeAs(path+".role", fields["role"], &role, "a string"); msg != "" {
			return msg
		}
		if msg := decodeAs(path+".name", fields["name"], &name, "a string"); msg != "" {
			return msg
		}
		text, msg := contentText(path+".content", fields["content"])
		if msg != "" {
			return msg
		}
		req.Messages[i] = chatMessage{Text: text, Named: name != ""}
	}
	return ""
}

// contentText returns a message's text: a string, or the text parts of an
// array of content parts; msg is the 400's message for anything else.
func contentText(path string, raw json.RawMessage) (text, msg string) {
	if isNull(raw) {
		return "", ""
	}
	if jsonKind(raw) == "a string" {
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", typeError(path, "a string", raw) // a valid string: cannot fail
		}
		return text, ""
	}
	var parts []json.RawMessage
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &parts) != nil {
		return "", typeError(path, "one of a string or array of objects", raw)
	}
	var b strings.Builder
	for i, p := range parts {
		ppath := fmt.Sprintf("%s[%d]", path, i)
		var fields map[string]json.RawMessage
		if jsonKind(p) != "an object" || json.Unmarshal(p, &fields) != nil {
			return "", typeError(ppath, "an object", p)
		}
		var typ, t string
		if msg := decodeAs(ppath+".type", fields["type"], &typ, "a string"); msg != "" {
			return "", msg
		}
		if typ != "text" {
			continue // images and the like count no tokens here
		}
		if msg := decodeAs(ppath+".text", fields["text"], &t, "a string"); msg != "" {
			return "", msg
		}
		b.WriteString(t)
	}
	return b.String(), ""
}

// decodeAs decodes a field's raw value into dst, whose JSON type is want
// ("a string", "a boolean"); absent or null leaves dst as it is.
func decodeAs(path string, raw json.RawMessage, dst any, want string) string {
	if isNull(raw) {
		return ""
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return typeError(path, want, raw)
	}
	return ""
}

// typeError is OpenAI's message for a field of the wrong JSON type.
func typeError(path, want string, raw json.RawMessage) string {
	return fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", path, want, jsonKind(raw))
}

// jsonKind names the JSON type of a valid JSON value as OpenAI's messages
// do: "an integer" or "a decimal" for a number, "a string", "an object", "an
// array", "a boolean", "null".
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(raw, ".eE") {
		return "a decimal"
	}
	return "an integer"
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// invalidJSON is OpenAI's message for a body that is not one JSON value
// (nothing, a syntax error, a value cut short, data after the value).
const invalidJSON = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. " +
	"The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"

// missingModel is each profile's message for a request without a model.
func missingModel(profile llm.Profile) string {
	switch profile {
	case "groq":
		return "'model' : property 'model' is missing"
	case "anthropic":
		return "model: Field required"
	default:
		return "you must provide a model parameter"
	}
}

// maxTokens returns the request's max_completion_tokens, else its
// max_tokens, or 0 when it sets neither; msg is the 400's message for a value
// that is not an integer from 1 to the model's max output tokens.
func maxTokens(req *chatRequest, maxOutput int64) (n int64, msg string) {
	for _, p := range []struct {
		name string
		raw  json.RawMessage
	}{{"max_completion_tokens", req.MaxCompletionTokens}, {"max_tokens", req.MaxTokens}} {
		v, set, msg := intParam(p.name, p.raw)
		switch {
		case msg != "":
			return 0, msg
		case !set:
			continue
		case v < 1:
			return 0, fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1, but got %s instead.", p.name, clip(string(p.raw)))
		case v > maxOutput:
			return 0, fmt.Sprintf("%s is too large: %s. This model supports at most %d completion tokens, whereas you provided %s.",
				p.name, clip(string(p.raw)), maxOutput, clip(string(p.raw)))
		}
		if n == 0 {
			n = v
		}
	}
	return n, ""
}

// choices returns the request's n (1 when absent or null); msg is the 400's
// message, in the profile's words, for an n the profile does not accept:
// OpenAI accepts 1 to 128, Groq and Anthropic's OpenAI-compatible API only 1.
func choices(profile llm.Profile, raw json.RawMessage) (n int64, msg string) {
	v, set, msg := intParam("n", raw)
	switch {
	case msg != "":
		return 0, msg
	case !set || v == 1:
		return 1, ""
	}
	shown := clip(strings.TrimSpace(string(raw)))
	switch profile {
	case "groq":
		if v < 1 {
			return 0, "'n' : number must be at least 1"
		}
		return 0, "'n' : number must be at most 1"
	case "anthropic":
		return 0, "n: must be exactly 1"
	default:
		if v < 1 {
			return 0, fmt.Sprintf("%s is less than the minimum of 1 - 'n'", shown)
		}
		if v > MaxChoices {
			return 0, fmt.Sprintf("%s is greater than the maximum of %d - 'n'", shown, MaxChoices)
		}
		return v, ""
	}
}

// intParam reads an integer parameter: absent or null is unset; a number
// beyond int64 reads as the nearest int64, which every bound refuses.
func intParam(name string, raw json.RawMessage) (v int64, set bool, msg string) {
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		return 0, false, ""
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false, typeError(name, "an integer", raw)
	}
	return v, true, ""
}

// clip shortens what a client sent before it is echoed in an error.
func clip(s string) string {
	const n = 40
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}
