package llm

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// messageByMap is how Message.UnmarshalJSON read a message before it
// walked the object: through a map[string]json.RawMessage. The walk must
// read every input as it did.
func messageByMap(m *Message, data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
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

var messageSeeds = []string{
	`{"role":"user","content":"hi"}`,
	` { "role" : "system" , "content" : "a\nb \u00e9 \ud83d\ude00" , "name" : "x" } `,
	`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":[1,2]}"}}]}`,
	`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`,
	`{"role":"user","role":"system","content":"a","content":"b","x":1,"x":{"y":[true,false,null]}}`,
	`{"Role":"user","CONTENT":"x"}`,
	`{"role":1,"content":"x"}`,
	`{"role":null,"content":2.5e3}`,
	`{"r\u006fle":"user","content":"\ud800"}`,
	"{\"role\":\"us\xffer\",\"content\":\"\xfe\"}",
	`{"role":"user","content":"x"}trailing`,
	`{}`, `[]`, `null`, `"x"`, `1`, ``, `{`, `{"a":}`, `{"a" 1}`,
}

// FuzzMessageUnmarshal: the object walk reads any input as the map did,
// field for field, error for error.
func FuzzMessageUnmarshal(f *testing.F) {
	for _, s := range messageSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want Message
		gotErr, wantErr := got.UnmarshalJSON(data), messageByMap(&want, data)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: error %v, want %v", data, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
		}
	})
}

// TestMessageInRequest: a message inside a request decodes as it did,
// messages as encoding/json hands them over.
func TestMessageInRequest(t *testing.T) {
	t.Parallel()
	for _, s := range messageSeeds[:10] {
		body := []byte(`{"model":"m","messages":[` + s + `, {"role":"user","content":"x"}]}`)
		var got struct{ Messages []Message }
		var raw struct{ Messages []json.RawMessage }
		gotErr, rawErr := json.Unmarshal(body, &got), json.Unmarshal(body, &raw)
		if rawErr != nil {
			continue // not valid JSON: no message is read
		}
		want := make([]Message, len(raw.Messages))
		var wantErr error
		for i, r := range raw.Messages {
			if err := messageByMap(&want[i], r); err != nil && wantErr == nil {
				wantErr = err
			}
		}
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%s: error %v, want %v", s, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got.Messages, want) {
			t.Fatalf("%s:\n got %#v\nwant %#v", s, got.Messages, want)
		}
	}
}

// FuzzReadAnswer: the walk reads any answer's choices and usage as
// encoding/json reads them, and fails where it fails; and its usage is read
// as encoding/json reads that object into a Usage wherever that succeeds
// with counts of at least 0, and as not reported wherever it fails for anything but a
// whole number written with a fraction or an exponent.
func FuzzReadAnswer(f *testing.F) {
	for _, s := range []string{
		`{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":31,"completion_tokens":5,"total_tokens":36}}`,
		`{"choices":[],"usage":null}`, `{"choices":null}`, `{"CHOICES":[1],"Usage":{"Prompt_Tokens":2}}`,
		`{"choices":[1],"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
		`{"choices":[1],"usage":{"prompt_tokens":1},"usage":null}`, `{"choices":[1],"usage":null,"usage":{"total_tokens":3}}`,
		`{"choices":[1],"choices":[]}`, `{"choices":[1],"usage":{"prompt_tokens":"12"}}`, `{"choices":[1],"usage":{"prompt_tokens":1e3}}`,
		`{"choices":[1],"usage":{"prompt_tokens":99999999999999999999}}`, `{"choices":[1],"usage":[]}`, `{"choices":[1],"usage":7}`,
		`{"ch\u006fices":[1],"u\u017fage":{"prompt_tokens":4}}`, `{"choices":[1]} x`, `[]`, `null`, `"s"`, ``, `{`,
		`{"choices":[1],"usage":{"prompt_tokens":10.0,"completion_tokens":1.5}}`, `{"choices":[1],"usage":{"prompt_tokens":-3}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		choices, usage, err := readAnswer(data)
		var want struct {
			Choices json.RawMessage `json:"choices"`
			Usage   json.RawMessage `json:"usage"`
		}
		wantErr := json.Unmarshal(data, &want)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("%q: error %v, want %v", data, err, wantErr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(choices, want.Choices) || !bytes.Equal(usage, want.Usage) {
			t.Fatalf("%q: choices %q usage %q, want %q %q", data, choices, usage, want.Choices, want.Usage)
		}
		u, odd := readUsage(usage)
		var std struct {
			Usage *Usage `json:"usage"`
		}
		if json.Unmarshal([]byte(`{"usage":`+cmp.Or(string(usage), "null")+`}`), &std) == nil {
			if s := std.Usage; s == nil || s.PromptTokens >= 0 && s.CompletionTokens >= 0 && s.TotalTokens >= 0 &&
				(s.PromptTokensDetails == nil || s.PromptTokensDetails.CachedTokens >= 0) {
				if !reflect.DeepEqual(u, std.Usage) {
					t.Fatalf("%q: usage %+v (%+v), encoding/json %+v", data, u, odd, std.Usage)
				}
			}
		} else if u != nil && !bytes.ContainsAny(usage, ".eE") {
			t.Fatalf("%q: usage %+v read where encoding/json fails, with no fraction or exponent", data, u)
		}
		if (u == nil) == (odd == nil) && !noValue(usage) {
			t.Fatalf("%q: usage %+v and oddity %+v", data, u, odd)
		}
	})
}

// TestWalkAllocations: reading a message allocates its role and content
// only, and an answer's usage only its Usage: no decoder, map or key.
func TestWalkAllocations(t *testing.T) {
	if raceOn {
		t.Skip("allocation counts differ under the race detector: pinned without it (scripts/test.sh)")
	}
	msg := []byte(`{"role":"user","content":"Give this article a title."}`)
	var m Message
	if n := testing.AllocsPerRun(100, func() { _ = m.UnmarshalJSON(msg) }); n > 2 {
		t.Errorf("a message: %v allocations, want 2", n)
	}
	ans := []byte(`{"id":"c1","choices":[{"index":0}],"usage":{"prompt_tokens":31,"completion_tokens":5,"total_tokens":36}}`)
	if n := testing.AllocsPerRun(100, func() { _, u, _ := readAnswer(ans); _, _ = readUsage(u) }); n > 1 {
		t.Errorf("an answer: %v allocations, want 1", n)
	}
}
