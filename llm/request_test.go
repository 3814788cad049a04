package llm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestDecodeChatRequestForwardsUnknownFields(t *testing.T) {
	t.Parallel()
	bodies := []string{
		// Tools, tool calls, multi-part content and a null content: all kept.
		`{"model":"gpt-4o","messages":[
			{"role":"system","content":"You are terse.","name":"rules"},
			{"role":"user","content":[{"type":"text","text":"What is in"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"look","arguments":"{\"q\":1}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"a cat"}],
		  "tools":[{"type":"function","function":{"name":"look","parameters":{"type":"object"}}}],
		  "tool_choice":"auto","response_format":{"type":"json_object"},"seed":12345678901234567890,
		  "max_tokens":256,"temperature":0.7,"top_p":0.9,"stop":["END","STOP"],"user":"u-1","stream":true,
		  "stream_options":{"include_usage":false},"logit_bias":{"50256":-100},"n":2}`,
		`{"model":"llama-3.1-8b-instant","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"low","x_vendor":{"a":[1,2,3]}}`,
	}
	for _, body := range bodies {
		req, err := DecodeChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(t, []byte(body), out) {
			t.Errorf("round trip changed the request:\n in %s\nout %s", body, out)
		}
		// Large integers in unknown fields are forwarded byte for byte.
		if strings.Contains(body, "12345678901234567890") && !strings.Contains(string(out), "12345678901234567890") {
			t.Errorf("seed lost precision: %s", out)
		}
	}
}

func TestDecodeChatRequestFields(t *testing.T) {
	t.Parallel()
	req, err := DecodeChatRequest([]byte(`{"model":"gpt-4o","messages":[
		{"role":"user","content":[{"type":"text","text":"part one"},{"type":"text","text":"part two"}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}],
		"max_tokens":256,"temperature":0.5,"stop":"END","user":"u","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "gpt-4o" || req.MaxTokens != 256 || req.CompletionTokensName || *req.Temperature != 0.5 ||
		!reflect.DeepEqual(req.Stop, []string{"END"}) || req.User != "u" || !req.Stream {
		t.Errorf("req = %+v", req)
	}
	if req.Messages[0].Content != "part one\npart two" || req.Messages[1].Content != "" ||
		string(req.Messages[1].RawContent) != "null" {
		t.Errorf("messages = %+v", req.Messages)
	}
}

func TestDecodeMaxCompletionTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body     string
		want     int
		wantName bool
		sent     string
	}{
		{`{"model":"o3","messages":[{"role":"user","content":"x"}],"max_completion_tokens":900}`, 900, true, `"max_completion_tokens":900`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":300}`, 300, false, `"max_tokens":300`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":300,"max_completion_tokens":500}`, 500, true, `"max_completion_tokens":500`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":null}`, 0, false, ``},
	}
	for _, tt := range tests {
		req, err := DecodeChatRequest([]byte(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		if req.MaxTokens != tt.want || req.CompletionTokensName != tt.wantName {
			t.Errorf("%s: MaxTokens %d name %v", tt.body, req.MaxTokens, req.CompletionTokensName)
		}
		out, _ := json.Marshal(req)
		if tt.sent != "" && !strings.Contains(string(out), tt.sent) {
			t.Errorf("%s: sent %s", tt.body, out)
		}
		if strings.Count(string(out), "max_") > 1 {
			t.Errorf("both names sent: %s", out)
		}
	}
}

func TestDecodeChatRequestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want string
	}{
		{`[]`, "must be a JSON object"},
		{`nope`, "must be a JSON object"},
		{`null`, "must be a JSON object"},
		{`{"messages":[{"role":"user","content":"x"}]}`, `"model" is missing`},
		{`{"model":"m"}`, `"messages" is missing`},
		{`{"model":"m","messages":[]}`, `"messages" is missing or empty`},
		{`{"model":5,"messages":[{"role":"user","content":"x"}]}`, `"model": must be a string`},
		{`{"model":"m","messages":{"role":"user"}}`, `"messages": must be an array`},
		{`{"model":"m","messages":["hi"]}`, `"messages": must be an array of messages`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`, `"max_tokens": must be at least 1, got -1`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":1.5}`, `"max_completion_tokens": must be a whole number`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"}`, `"temperature": must be a number`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":[1]}`, `"stop": must be a string or an array`},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`, `"stream": must be true or false`},
	}
	for _, tt := range tests {
		_, err := DecodeChatRequest([]byte(tt.body))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tt.body, err, tt.want)
		}
	}
}

func TestMarshalChatRequest(t *testing.T) {
	t.Parallel()
	temp := 0.0
	req := &ChatRequest{
		Model:       "m",
		Messages:    []Message{{Role: "user", Content: "hi", Extra: map[string]json.RawMessage{"name": json.RawMessage(`"ann"`)}}},
		MaxTokens:   50,
		Temperature: &temp,
		Extra: map[string]any{
			"model":       "ignored: modelled fields win",
			"max_tokens":  9999,
			"top_p":       0.5,
			"raw":         json.RawMessage(`{"kept":[1, 2]}`),
			"response_id": nil,
		},
	}
	out, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_tokens":50,"messages":[{"content":"hi","name":"ann","role":"user"}],"model":"m","raw":{"kept":[1,2]},"response_id":null,"temperature":0,"top_p":0.5}`
	if string(out) != want {
		t.Errorf("marshal:\n got %s\nwant %s", out, want)
	}
	// Marshalling twice gives the same bytes: keys are sorted.
	again, _ := json.Marshal(req)
	if string(again) != string(out) {
		t.Error("marshal is not stable")
	}
	if _, err := json.Marshal(&ChatRequest{Model: "m", Extra: map[string]any{"bad": make(chan int)}}); err == nil ||
		!strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("unmarshallable extra: %v", err)
	}
}

func TestMarshalChatRequestByValue(t *testing.T) {
	t.Parallel()
	// Structs that hold a request by value must marshal it in wire format too.
	holder := struct {
		Req ChatRequest `json:"req"`
	}{ChatRequest{Model: "m", MaxTokens: 5}}
	out, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"req":{"max_tokens":5,"messages":[],"model":"m"}}`; string(out) != want {
		t.Fatalf("got %s, want %s", out, want)
	}
}

func TestDecodeChatRequestBounds(t *testing.T) {
	t.Parallel()
	const user = `"messages":[{"role":"user","content":"x"}]`
	tests := []struct {
		name string
		body string
		want string // the whole error
	}{
		{"max_tokens at int64's top", `{"model":"m",` + user + `,"max_tokens":9223372036854775807}`,
			`llm: request field "max_tokens": 9223372036854775807 is over the limit of 1048576`},
		{"max_tokens over the bound", `{"model":"m",` + user + `,"max_tokens":1048577}`,
			`llm: request field "max_tokens": 1048577 is over the limit of 1048576`},
		{"max_tokens beyond float64", `{"model":"m",` + user + `,"max_tokens":1e400}`,
			`llm: request field "max_tokens": 1e400 is over the limit of 1048576`},
		{"max_tokens 0", `{"model":"m",` + user + `,"max_tokens":0}`,
			`llm: request field "max_tokens": must be at least 1, got 0`},
		{"max_completion_tokens negative", `{"model":"m",` + user + `,"max_completion_tokens":-5}`,
			`llm: request field "max_completion_tokens": must be at least 1, got -5`},
		{"max_completion_tokens 2^62", `{"model":"m",` + user + `,"max_completion_tokens":4611686018427387904}`,
			`llm: request field "max_completion_tokens": 4611686018427387904 is over the limit of 1048576`},
		{"max_tokens a string", `{"model":"m",` + user + `,"max_tokens":"5"}`,
			`llm: request field "max_tokens": must be a whole number`},
		{"max_tokens of a thousand digits", `{"model":"m",` + user + `,"max_tokens":` + strings.Repeat("9", 1000) + `}`,
			`llm: request field "max_tokens": 99999999999999999999…9999999999 is over the limit of 1048576`},
		{"n 0", `{"model":"m",` + user + `,"n":0}`, `llm: request field "n": must be at least 1, got 0`},
		{"n over 128", `{"model":"m",` + user + `,"n":129}`, `llm: request field "n": 129 is over the limit of 128`},
		{"n fractional", `{"model":"m",` + user + `,"n":1.5}`, `llm: request field "n": must be a whole number, got 1.5`},
		{"n a string", `{"model":"m",` + user + `,"n":"2"}`, `llm: request field "n": must be a whole number`},
		{"trailing garbage", `{"model":"m",` + user + `} {"model":"x"}`,
			`llm: request body has data after the JSON object, at byte 57`},
		{"trailing garbage after a newline", `{"model":"m",` + user + "}\nxyz",
			`llm: request body has data after the JSON object, at byte 57`},
		{"invalid UTF-8 in content", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xffb\"}]}",
			`llm: request body is not valid UTF-8: invalid byte at offset 52`},
		{"invalid UTF-8 in an unknown field", "{\"model\":\"m\"," + user + ",\"user_tag\":\"\xc3\"}",
			`llm: request body is not valid UTF-8: invalid byte at offset 68`},
		{"empty message", `{"model":"m","messages":[{}]}`, `llm: request field "messages[0]": "role" is missing`},
		{"unknown role", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"robot","content":"x"}]}`,
			`llm: request field "messages[1]": "role" "robot" is not one of system, user, assistant, tool, developer, function`},
		{"no content", `{"model":"m","messages":[{"role":"user"}]}`, `llm: request field "messages[0]": "content" is missing`},
		{"null content from a user", `{"model":"m","messages":[{"role":"user","content":null}]}`,
			`llm: request field "messages[0]": "content" is null; only an assistant message with tool_calls may leave it out`},
		{"assistant with null tool_calls", `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":null}]}`,
			`llm: request field "messages[0]": "content" is null; only an assistant message with tool_calls may leave it out`},
		{"content a number", `{"model":"m","messages":[{"role":"user","content":5}]}`,
			`llm: request field "messages[0]": "content" must be a string or an array of content parts`},
		{"content an object", `{"model":"m","messages":[{"role":"user","content":{"text":"a"}}]}`,
			`llm: request field "messages[0]": "content" must be a string or an array of content parts`},
		{"content parts that are not objects", `{"model":"m","messages":[{"role":"user","content":["a"]}]}`,
			`llm: request field "messages[0]": "content" must be a string or an array of content parts`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := DecodeChatRequest([]byte(tt.body))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want %s (req %+v)", err, tt.want, req)
			}
		})
	}
}

func TestDecodeChatRequestAccepts(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":""}],"max_tokens":1048576,"n":128}`,
		`{"model":"m","messages":[{"role":"developer","content":"be terse"},{"role":"user","content":[]}],"max_tokens":null,"n":null}`,
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"ok"}]}],"max_completion_tokens":1}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},` +
			`{"role":"function","name":"f","content":"42"}],"max_tokens":5.0}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"h\u00e9 \U0001F600\"}]}\n\t ",
	} {
		if _, err := DecodeChatRequest([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// A request decoded some other way (the gateway reads only what prices a
// call) is checked by Validate with the same words.
func TestValidate(t *testing.T) {
	t.Parallel()
	var p struct {
		Model     string    `json:"model"`
		Messages  []Message `json:"messages"`
		MaxTokens *int      `json:"max_tokens"`
	}
	if err := json.Unmarshal([]byte(`{"model":"m","messages":[{"role":"user"}],"max_tokens":9223372036854775807}`), &p); err != nil {
		t.Fatal(err)
	}
	req := &ChatRequest{Model: p.Model, Messages: p.Messages, MaxTokens: *p.MaxTokens}
	if err := req.Validate(); err == nil || err.Error() != `llm: request field "messages[0]": "content" is missing` {
		t.Errorf("Validate() = %v", err)
	}
	req.Messages = []Message{{Role: "user", Content: "hi"}}
	if err := req.Validate(); err == nil || err.Error() != `llm: request field "max_tokens": 9223372036854775807 is over the limit of 1048576` {
		t.Errorf("Validate() = %v", err)
	}
	req.MaxTokens, req.CompletionTokensName = -3, true
	if err := req.Validate(); err == nil || err.Error() != `llm: request field "max_completion_tokens": must be at least 1, got -3` {
		t.Errorf("Validate() = %v", err)
	}
	req.MaxTokens = 100
	for _, n := range []any{json.RawMessage("1000"), 0, int64(129), 2.5, "2"} {
		req.Extra = map[string]any{"n": n}
		if err := req.Validate(); err == nil || !strings.HasPrefix(err.Error(), `llm: request field "n": `) {
			t.Errorf("n %v: Validate() = %v", n, err)
		}
	}
	req.Extra = map[string]any{"n": 3}
	if err := req.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

// The maximum sluice gives a request that names none is named as the
// profile and model take it: max_completion_tokens on OpenAI (whose
// reasoning models refuse max_tokens) and Groq, max_tokens on Anthropic
// but for OpenAI's reasoning models, which refuse it wherever they are.
func TestCompletionTokensName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile Profile
		model   string
		want    string
	}{
		{OpenAI, "gpt-5", "max_completion_tokens"},
		{OpenAI, "gpt-5-mini", "max_completion_tokens"},
		{OpenAI, "o3", "max_completion_tokens"},
		{OpenAI, "gpt-4o-mini", "max_completion_tokens"},
		{"", "o4-mini", "max_completion_tokens"},
		{Groq, "llama-3.1-8b-instant", "max_completion_tokens"},
		{Groq, "openai/gpt-oss-120b", "max_completion_tokens"},
		{Anthropic, "claude-sonnet-4-5", "max_tokens"},
		{Anthropic, "claude-o3-lookalike", "max_tokens"},
		{Anthropic, "openai/o1-preview", "max_completion_tokens"},
		{Anthropic, "gpt-5.1", "max_completion_tokens"},
		{Anthropic, "gpt-50", "max_tokens"},
		{Anthropic, "o10", "max_tokens"},
		{Anthropic, "asks for max_completion_tokens", "max_completion_tokens"},
	} {
		t.Run(string(tc.profile)+"/"+tc.model, func(t *testing.T) {
			t.Parallel()
			req := &ChatRequest{Model: tc.model, Messages: []Message{{Role: "user", Content: "hi"}}}
			req.CompletionTokensName = strings.HasPrefix(tc.model, "asks for")
			req.SetDefaultMaxTokens(tc.profile, 300)
			if got := req.MaxTokensName(); got != tc.want {
				t.Errorf("named %s, want %s", got, tc.want)
			}
			out, err := json.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			var fields map[string]any
			if err := json.Unmarshal(out, &fields); err != nil {
				t.Fatal(err)
			}
			other := "max_tokens"
			if tc.want == other {
				other = "max_completion_tokens"
			}
			if fields[tc.want] != 300.0 || fields[other] != nil {
				t.Errorf("sent %s, want %s: 300 alone", out, tc.want)
			}
		})
	}
}

// Acceptance: a request with no maximum to a gpt-5-style model reaches the
// provider with max_completion_tokens, never max_tokens, plain or streamed;
// one that names its own maximum keeps the name it used.
func TestClientAddsTheMaximumTheModelTakes(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if body["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"Hi."},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
			return
		}
		io.WriteString(w, completionBody)
	})
	c := newTestClient(t, Config{BaseURL: srv.URL, DefaultMaxTokens: 2000})
	for _, tc := range []struct {
		name   string
		req    *ChatRequest
		stream bool
		field  string
		want   float64
	}{
		{"plain", userRequest("gpt-5-mini", "hi"), false, "max_completion_tokens", 2000},
		{"stream", userRequest("gpt-5", "hi"), true, "max_completion_tokens", 2000},
		{"its own max_tokens", &ChatRequest{Model: "gpt-4o", MaxTokens: 50, Messages: []Message{{Role: "user", Content: "hi"}}}, false, "max_tokens", 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stream {
				s, err := c.ChatStream(context.Background(), tc.req)
				if err != nil {
					t.Fatal(err)
				}
				for s.Next() {
				}
				s.Close()
			} else if _, err := c.Chat(context.Background(), tc.req); err != nil {
				t.Fatal(err)
			}
			body := rec.last(t).body
			other := "max_tokens"
			if tc.field == other {
				other = "max_completion_tokens"
			}
			if body[tc.field] != tc.want || body[other] != nil {
				t.Errorf("the provider got %v; want %s %v and no %s", body, tc.field, tc.want, other)
			}
		})
	}
}
