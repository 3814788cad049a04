package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/llm"
)

// decodeByStruct is how decode read a request before it walked the
// object: encoding/json into a struct of the priced fields. decode must
// read every body as it did.
func decodeByStruct(body []byte) (*llm.ChatRequest, error) {
	var s struct {
		Model               string          `json:"model"`
		Messages            []llm.Message   `json:"messages"`
		MaxTokens           *int            `json:"max_tokens"`
		MaxCompletionTokens *int            `json:"max_completion_tokens"`
		Stream              *bool           `json:"stream"`
		N                   json.RawMessage `json:"n"`
		Tools               json.RawMessage `json:"tools"`
		Functions           json.RawMessage `json:"functions"`
		ToolChoice          json.RawMessage `json:"tool_choice"`
		ResponseFormat      json.RawMessage `json:"response_format"`
	}
	named := (bytes.Contains(body, []byte(`"max_tokens"`)) || bytes.Contains(body, []byte(`"max_completion_tokens"`))) &&
		readKeysExact(body)
	if !named || !utf8.Valid(body) {
		return llm.DecodeChatRequest(body)
	}
	err := json.Unmarshal(body, &s)
	p := priced{model: s.Model, messages: s.Messages, maxTokens: s.MaxTokens, maxCompletionTokens: s.MaxCompletionTokens,
		stream: s.Stream, n: s.N, tools: s.Tools, functions: s.Functions, toolChoice: s.ToolChoice, responseFormat: s.ResponseFormat}
	return p.request(body, err == nil)
}

// FuzzDecodeWalk: decode reads any body as decodeByStruct did: the same
// request, or an error where it had one.
func FuzzDecodeWalk(f *testing.F) {
	for _, s := range []string{
		chatBody("Say hello.", 40, ""),
		chatBody("Say hello.", 40, `,"n":3,"tools":[{"type":"function"}],"tool_choice":"auto","response_format":{"type":"json_object"},"functions":null`),
		chatBody("x", 5, `,"model":null,"max_tokens":null,"max_completion_tokens":7`),
		chatBody("x", 5, `,"messages":[{"role":"user","content":"y"}],"stream":false,"stream":null`),
		chatBody("x", 5, `,"messages":null`),
		chatBody("x", 5, `,"messages":[]`),
		chatBody("x", 5, `,"messages":[null]`),
		chatBody("x", 5, `,"max_tokens":5.0`),
		chatBody("x", 5, `,"max_tokens":"5"`),
		chatBody("x", 5, `,"max_tokens":99999999999999999999`),
		chatBody("x", 5, `,"stream":"true"`),
		chatBody("x", 5, `,"model":7`),
		chatBody("x", 5, `,"model":"m\u00e9"`),
		chatBody("x", 5, `,"n":null`),
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]} `,
		`[{"model":"m","max_tokens":5}]`, `null`, `{"max_tokens":5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := decode(body)
		want, wantErr := decodeByStruct(body)
		// Not the errors' words: the whole decoder names one of several
		// bad fields at random (it ranges over a map).
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, want %v", body, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", body, got, want)
		}
	})
}

// scanKeysByByte is scanKeys as it was first written, one byte at a time:
// scanKeys must read every body as it does.
func scanKeysByByte(body []byte) (exact, named bool) {
	depth, inStr, isKey, expectKey, start := 0, false, false, false, 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inStr {
			switch c {
			case '\\':
				if isKey {
					return false, named
				}
				i++
			case '"':
				inStr = false
				if isKey {
					key := string(body[start:i])
					for _, k := range readKeys {
						if key != k && strings.EqualFold(key, k) {
							return false, named
						}
					}
					named = named || key == "max_tokens" || key == "max_completion_tokens"
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr, isKey, start = true, depth == 1 && expectKey, i+1
		case '{':
			depth++
			if depth == 1 {
				expectKey = true
			}
		case '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				expectKey = true
			}
		case ':':
			if depth == 1 {
				expectKey = false
			}
		}
	}
	return true, named
}

// FuzzScanKeys: scanKeys, which crosses strings from quote to quote, reads
// every body as the byte-by-byte loop does.
func FuzzScanKeys(f *testing.F) {
	for _, s := range []string{
		chatBody("Say hello.", 40, ""),
		chatBody(`a \"quoted\" word and a backslash \\`, 40, `,"max_completion_tokens":3`),
		`{"max_tokens":1,"x":{"Max_Tokens":2}}`, `{"Max_Tokens":1}`, `{"max\u005ftokens":1}`, `{"a":"\"Max_Tokens\"","max_tokens":1}`,
		`{"a":["Max_Tokens"],"max_tokens":1}`, `{"messAges":[],"max_tokens":1}`, `{"max_tokens`, `{"a":"x\`, `{"max_tokens\`,
		`{"a":"\\","max_tokens":1}`, `{"a":"\\\"","max_tokens":1}`, `[{"max_tokens":1}]`, `{"stop":["max_tokens"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		exact, named := scanKeys(body)
		wantExact, wantNamed := scanKeysByByte(body)
		if exact != wantExact || exact && named != wantNamed {
			t.Fatalf("%q: scanKeys = %v, %v; byte by byte %v, %v", body, exact, named, wantExact, wantNamed)
		}
	})
}
