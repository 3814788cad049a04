package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// errorReply is an error body of any profile's shape.
type errorReply struct {
	Type  string `json:"type"` // "error" for Anthropic
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

func (r reply) errorReply(t *testing.T) errorReply {
	t.Helper()
	var e errorReply
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return e
}

// TestSimModelRequired: a request without a model (absent, null or empty)
// is a 400 in the provider's words and shape, as at the providers; it is
// never served as some default model.
func TestSimModelRequired(t *testing.T) {
	t.Parallel()
	want := map[llm.Profile]string{
		"openai":    "you must provide a model parameter",
		"groq":      "'model' : property 'model' is missing",
		"anthropic": "model: Field required",
	}
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, profile := range llm.Profiles() {
		t.Run(string(profile), func(t *testing.T) {
			t.Parallel()
			f := serve(t, forecast.ModelConfig{Profile: profile}, ServerConfig{Models: []string{"default-model"}})
			for _, body := range []string{`{` + msgs + `}`, `{"model":null,` + msgs + `}`, `{"model":"",` + msgs + `}`, `{"model":""}`, `{}`} {
				r := f.post(t, body)
				e := r.errorReply(t)
				if r.status != 400 || e.Error.Message != want[profile] || e.Error.Type != "invalid_request_error" {
					t.Errorf("%s: %d %s, want 400 %q", body, r.status, r.body, want[profile])
				}
				if profile == "openai" && !bytes.Contains(r.body, []byte(`"type":"invalid_request_error","param":null,"code":null`)) {
					t.Errorf("%s: not in OpenAI's shape: %s", body, r.body)
				}
				if profile == "anthropic" && e.Type != "error" {
					t.Errorf("%s: not in Anthropic's shape: %s", body, r.body)
				}
			}
			if st := f.model.Stats(); st.Requests != 0 {
				t.Errorf("requests without a model reached the model: %+v", st)
			}
			// The answer names the model the request named, never a default.
			r := f.post(t, `{"model":"named",`+msgs+`}`)
			var c completionJSON
			if err := json.Unmarshal(r.body, &c); err != nil || r.status != 200 || c.Model != "named" {
				t.Errorf("named model: %d %s", r.status, r.body)
			}
		})
	}
}

// TestSimBadBodiesInProviderWords: whatever is wrong with a body, the 400
// says so in the provider's words and names no Go type, struct or decoder.
func TestSimBadBodiesInProviderWords(t *testing.T) {
	t.Parallel()
	const parse = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. " +
		"The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"
	msg := `{"role":"user","content":"x"}`
	msgs := `"messages":[` + msg + `]`
	typeMsg := func(path, want, got string) string {
		return fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", path, want, got)
	}
	cases := []struct {
		name, body, want string
	}{
		{"model integer", `{"model":7,` + msgs + `}`, typeMsg("model", "a string", "an integer")},
		{"model decimal", `{"model":7.5,` + msgs + `}`, typeMsg("model", "a string", "a decimal")},
		{"model exponent", `{"model":1e3,` + msgs + `}`, typeMsg("model", "a string", "a decimal")},
		{"model object", `{"model":{"name":"m"},` + msgs + `}`, typeMsg("model", "a string", "an object")},
		{"model array", `{"model":["m"],` + msgs + `}`, typeMsg("model", "a string", "an array")},
		{"model boolean", `{"model":true,` + msgs + `}`, typeMsg("model", "a string", "a boolean")},
		{"messages string", `{"model":"m","messages":"hi"}`, typeMsg("messages", "an array", "a string")},
		{"messages object", `{"model":"m","messages":` + msg + `}`, typeMsg("messages", "an array", "an object")},
		{"message string", `{"model":"m","messages":[` + msg + `,"hi"]}`, typeMsg("messages[1]", "an object", "a string")},
		{"role integer", `{"model":"m","messages":[{"role":1,"content":"x"}]}`, typeMsg("messages[0].role", "a string", "an integer")},
		{"name array", `{"model":"m","messages":[{"role":"user","name":[],"content":"x"}]}`, typeMsg("messages[0].name", "a string", "an array")},
		{"content integer", `{"model":"m","messages":[{"role":"user","content":7}]}`, typeMsg("messages[0].content", "one of a string or array of objects", "an integer")},
		{"content boolean", `{"model":"m","messages":[` + msg + `,{"role":"user","content":false}]}`, typeMsg("messages[1].content", "one of a string or array of objects", "a boolean")},
		{"content object", `{"model":"m","messages":[{"role":"user","content":{"text":"x"}}]}`, typeMsg("messages[0].content", "one of a string or array of objects", "an object")},
		{"content part string", `{"model":"m","messages":[{"role":"user","content":["x"]}]}`, typeMsg("messages[0].content[0]", "an object", "a string")},
		{"content part type", `{"model":"m","messages":[{"role":"user","content":[{"type":1}]}]}`, typeMsg("messages[0].content[0].type", "a string", "an integer")},
		{"content part text", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":2.5}]}]}`, typeMsg("messages[0].content[1].text", "a string", "a decimal")},
		{"max_tokens string", `{"model":"m","max_tokens":"10",` + msgs + `}`, typeMsg("max_tokens", "an integer", "a string")},
		{"max_tokens decimal", `{"model":"m","max_tokens":1.5,` + msgs + `}`, typeMsg("max_tokens", "an integer", "a decimal")},
		{"max_tokens exponent", `{"model":"m","max_tokens":1e7,` + msgs + `}`, typeMsg("max_tokens", "an integer", "a decimal")},
		{"max_tokens boolean", `{"model":"m","max_tokens":true,` + msgs + `}`, typeMsg("max_tokens", "an integer", "a boolean")},
		{"max_completion_tokens array", `{"model":"m","max_completion_tokens":[1],` + msgs + `}`, typeMsg("max_completion_tokens", "an integer", "an array")},
		{"n string", `{"model":"m","n":"2",` + msgs + `}`, typeMsg("n", "an integer", "a string")},
		{"n object", `{"model":"m","n":{"a":1},` + msgs + `}`, typeMsg("n", "an integer", "an object")},
		{"stream string", `{"model":"m","stream":"true",` + msgs + `}`, typeMsg("stream", "a boolean", "a string")},
		{"stream integer", `{"model":"m","stream":1,` + msgs + `}`, typeMsg("stream", "a boolean", "an integer")},
		{"stream_options string", `{"model":"m","stream":true,"stream_options":"usage",` + msgs + `}`, typeMsg("stream_options", "an object", "a string")},
		{"include_usage string", `{"model":"m","stream":true,"stream_options":{"include_usage":"yes"},` + msgs + `}`, typeMsg("stream_options.include_usage", "a boolean", "a string")},
		{"user integer", `{"model":"m","user":42,` + msgs + `}`, typeMsg("user", "a string", "an integer")},
		{"body array", `[]`, "Invalid type for the request body: expected an object, but got an array instead."},
		{"body string", `"hello"`, "Invalid type for the request body: expected an object, but got a string instead."},
		{"body number", `42`, "Invalid type for the request body: expected an object, but got an integer instead."},
		{"body null", `null`, "Invalid type for the request body: expected an object, but got null instead."},
		{"empty body", ``, parse},
		{"cut short", `{"model":`, parse},
		{"unquoted key", `{model:"m",` + msgs + `}`, parse},
		{"trailing comma", `{"model":"m",` + msgs + `,}`, parse},
		{"bad literal", `{"model":"m","stream":tru,` + msgs + `}`, parse},
		{"bad escape", `{"model":"\x",` + msgs + `}`, parse},
		{"control character", "{\"model\":\"a\x01b\"," + msgs + `}`, parse},
		{"trailing object", `{"model":"m",` + msgs + `} {}`, parse},
		{"trailing word", `{"model":"m",` + msgs + `} x`, parse},
		{"trailing bracket", `{"model":"m",` + msgs + `}]`, parse},
		{"no messages", `{"model":"m"}`, "Missing required parameter: 'messages'."},
		{"null messages", `{"model":"m","messages":null}`, "Missing required parameter: 'messages'."},
		{"empty messages", `{"model":"m","messages":[]}`, "'messages' must contain at least one message."},
	}
	// Go's names for types and its decoder's words: none may reach a client.
	goWords := []string{"Go ", "go value", "struct", "chatRequest", "chatMessage", "json:", "json.", "RawMessage", "unmarshal",
		"int64", "float64", "uint", "map[", "[]", "interface", "sim.", "invalid character", "unexpected end of JSON"}
	for _, profile := range llm.Profiles() {
		t.Run(string(profile), func(t *testing.T) {
			t.Parallel()
			f := serve(t, forecast.ModelConfig{Profile: profile}, ServerConfig{})
			for _, tc := range cases {
				r := f.post(t, tc.body)
				e := r.errorReply(t)
				if r.status != 400 || e.Error.Message != tc.want || e.Error.Type != "invalid_request_error" {
					t.Errorf("%s: %d %s\nwant 400 %q", tc.name, r.status, r.body, tc.want)
				}
				for _, w := range goWords {
					if strings.Contains(e.Error.Message, w) {
						t.Errorf("%s: message %q names %q", tc.name, e.Error.Message, w)
					}
				}
			}
			if st := f.model.Stats(); st.Requests != 0 {
				t.Errorf("bad bodies reached the model: %+v", st)
			}
		})
	}
}

// TestSimChoices: the openai profile answers n choices (1 to 128), each its
// own text, and charges the output of them all: n × max_tokens reserved, the
// sum of the real outputs settled; usage and /sim/stats agree.
func TestSimChoices(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		f := serve(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=100,tpm=10000")}, ServerConfig{})
		r := f.post(t, `{"model":"gpt-4o","n":3,"max_tokens":40,"messages":[{"role":"user","content":"go"}]}`)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		var c struct {
			completionJSON
			Choices []struct {
				Index   int `json:"index"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(r.body, &c); err != nil || len(c.Choices) != 3 {
			t.Fatalf("%v: %s", err, r.body)
		}
		var sum int64
		seen := map[string]bool{}
		for i, ch := range c.Choices {
			n, _ := cl100k().Count(ch.Message.Content)
			if ch.Index != i || n < 20 || n > 40 || (n == 40) != (ch.FinishReason == "length") {
				t.Errorf("choice %d: index %d, %d tokens, finish %q", i, ch.Index, n, ch.FinishReason)
			}
			seen[ch.Message.Content] = true
			sum += int64(n)
		}
		if len(seen) != 3 {
			t.Errorf("the choices share texts: %s", r.body)
		}
		in := prompt("go")
		if c.Usage != (usageJSON{in, sum, in + sum}) {
			t.Errorf("usage %+v, want completion tokens %d", c.Usage, sum)
		}
		// Reserve accounting: 3 × 40 output tokens counted on tpm.
		if got, want := r.header.Get("x-ratelimit-remaining-tokens"), strconv.FormatInt(10000-in-3*40, 10); got != want {
			t.Errorf("remaining tokens %s, want %s", got, want)
		}
		if st := f.model.Stats(); st.Charged.Output != 3*40 || st.Succeeded != 1 {
			t.Errorf("stats %+v, want 120 output tokens charged", st)
		}
		// The same request to a server of the same seed gets the same answer.
		g := serve(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=100,tpm=10000")}, ServerConfig{})
		if r2 := g.post(t, `{"model":"gpt-4o","n":3,"max_tokens":40,"messages":[{"role":"user","content":"go"}]}`); !bytes.Equal(r2.body, r.body) {
			t.Errorf("not deterministic:\n%s\n%s", r.body, r2.body)
		}
	})
	t.Run("settled", func(t *testing.T) {
		t.Parallel()
		f := serve(t, forecast.ModelConfig{Profile: "openai", SettleOutput: true, Limits: limits("tpm=100000")}, ServerConfig{})
		r := f.post(t, `{"model":"m","n":4,"max_completion_tokens":50,"messages":[{"role":"user","content":"go"}]}`, OutputTokensHeader, "10")
		var c completionJSON
		if err := json.Unmarshal(r.body, &c); err != nil || len(c.Choices) != 4 || c.Usage.CompletionTokens != 40 {
			t.Fatalf("%d %v: %s", r.status, err, r.body)
		}
		if st := f.model.Stats(); st.Charged.Output != 40 {
			t.Errorf("settled output %d, want the 4 × 10 produced", st.Charged.Output)
		}
	})
	t.Run("limits count every choice", func(t *testing.T) {
		t.Parallel()
		f := serve(t, forecast.ModelConfig{Profile: "openai", Limits: limits("tpm=1000")}, ServerConfig{})
		r := f.post(t, `{"model":"gpt-4o","n":5,"max_tokens":300,"messages":[{"role":"user","content":"go"}]}`)
		want := fmt.Sprintf("Request too large for gpt-4o in organization org-sim on tokens per min (TPM): Limit 1000, Requested %d.", prompt("go")+1500)
		if r.status != 429 || !strings.HasPrefix(r.errorMessage(t), want) {
			t.Errorf("%d %s\nwant %q", r.status, r.body, want)
		}
		if r := f.post(t, `{"model":"gpt-4o","n":3,"max_tokens":300,"messages":[{"role":"user","content":"go"}]}`); r.status != 200 {
			t.Errorf("n=3 of 300 in 1000: %d %s", r.status, r.body)
		}
		if r := f.post(t, `{"model":"gpt-4o","n":1,"max_tokens":100,"messages":[{"role":"user","content":"go"}]}`); r.status != 429 ||
			!strings.Contains(r.errorMessage(t), fmt.Sprintf("Used %d, Requested %d.", prompt("go")+900, prompt("go")+100)) {
			t.Errorf("after n=3: %d %s", r.status, r.body)
		}
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		f := serve(t, forecast.ModelConfig{Profile: "openai"}, ServerConfig{})
		r := f.post(t, `{"model":"m","n":2,"max_tokens":30,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"go"}]}`,
			OutputTokensHeader, "13")
		chunks, done := readStream(t, r.body)
		var text [2]strings.Builder
		var roles, finishes [2]int
		for _, ch := range chunks {
			if len(ch.Choices) > 1 {
				t.Fatalf("a chunk of %d choices", len(ch.Choices))
			}
			for _, c := range ch.Choices {
				if c.Index < 0 || c.Index > 1 {
					t.Fatalf("choice index %d", c.Index)
				}
				if c.Delta["role"] == "assistant" {
					roles[c.Index]++
				}
				text[c.Index].WriteString(c.Delta["content"])
				if c.FinishReason != nil {
					finishes[c.Index]++
				}
			}
		}
		last := chunks[len(chunks)-1]
		if !done || last.Usage == nil || last.Usage.CompletionTokens != 26 || len(last.Choices) != 0 {
			t.Errorf("done %v, last chunk %+v", done, last)
		}
		for i := range 2 {
			if n, _ := cl100k().Count(text[i].String()); n != 13 || roles[i] != 1 || finishes[i] != 1 {
				t.Errorf("choice %d: %d tokens, %d role chunks, %d finish chunks", i, n, roles[i], finishes[i])
			}
		}
		if text[0].String() == text[1].String() {
			t.Error("the two choices have the same text")
		}
	})
}

// TestSimChoicesBounds: OpenAI takes n from 1 to 128; Groq and Anthropic's
// OpenAI-compatible API only 1, each refusing in its own words.
func TestSimChoicesBounds(t *testing.T) {
	t.Parallel()
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct {
		profile, body string
		status        int
		want          string
	}{
		{"openai", `{"model":"m","n":0,` + msgs + `}`, 400, "0 is less than the minimum of 1 - 'n'"},
		{"openai", `{"model":"m","n":-2,` + msgs + `}`, 400, "-2 is less than the minimum of 1 - 'n'"},
		{"openai", `{"model":"m","n":129,` + msgs + `}`, 400, "129 is greater than the maximum of 128 - 'n'"},
		{"openai", `{"model":"m","n":99999999999999999999999,` + msgs + `}`, 400, "99999999999999999999999 is greater than the maximum of 128 - 'n'"},
		{"openai", `{"model":"m","n":1.5,` + msgs + `}`, 400, "Invalid type for 'n': expected an integer, but got a decimal instead."},
		{"openai", `{"model":"m","n":128,"max_tokens":8192,` + msgs + `}`, 200, ""},
		{"openai", `{"model":"m","n":128,"max_tokens":8193,` + msgs + `}`, 400,
			"Invalid 'n': the simulator answers at most 1048576 output tokens in all the choices of a request, and 128 choices of 8193 tokens would be 1048704."},
		{"openai", `{"model":"m","n":null,` + msgs + `}`, 200, ""},
		{"groq", `{"model":"m","n":2,` + msgs + `}`, 400, "'n' : number must be at most 1"},
		{"groq", `{"model":"m","n":128,` + msgs + `}`, 400, "'n' : number must be at most 1"},
		{"groq", `{"model":"m","n":0,` + msgs + `}`, 400, "'n' : number must be at least 1"},
		{"groq", `{"model":"m","n":1,` + msgs + `}`, 200, ""},
		{"anthropic", `{"model":"m","n":2,` + msgs + `}`, 400, "n: must be exactly 1"},
		{"anthropic", `{"model":"m","n":0,` + msgs + `}`, 400, "n: must be exactly 1"},
		{"anthropic", `{"model":"m","n":1,` + msgs + `}`, 200, ""},
	} {
		f := serve(t, forecast.ModelConfig{Profile: llm.Profile(tc.profile)}, ServerConfig{})
		r := f.post(t, tc.body, OutputTokensHeader, "1")
		if r.status != tc.status {
			t.Errorf("%s %s: %d %.300s, want %d", tc.profile, tc.body, r.status, r.body, tc.status)
			continue
		}
		if tc.status != 200 {
			if e := r.errorReply(t); e.Error.Message != tc.want || e.Error.Type != "invalid_request_error" {
				t.Errorf("%s %s: %s, want %q", tc.profile, tc.body, r.body, tc.want)
			}
			if st := f.model.Stats(); st.Requests != 0 {
				t.Errorf("%s %s reached the model", tc.profile, tc.body)
			}
			continue
		}
		var c completionJSON
		if err := json.Unmarshal(r.body, &c); err != nil {
			t.Fatal(err)
		}
		var v struct {
			N json.RawMessage `json:"n"`
		}
		_ = json.Unmarshal([]byte(tc.body), &v)
		want := 1
		if n, err := strconv.Atoi(string(v.N)); err == nil {
			want = n
		}
		if len(c.Choices) != want || c.Usage.CompletionTokens != int64(want) {
			t.Errorf("%s %s: %d choices, usage %+v", tc.profile, tc.body, len(c.Choices), c.Usage)
		}
	}
}

// finishedCall waits for the server's OnFinish.
func finishedCall(t *testing.T, calls <-chan Call) Call {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("OnFinish was not called")
		return Call{}
	}
}

// TestSimSpeed: a server whose clock runs 50 times as fast holds a request
// its latency divided by 50 of wall time, and records its times on the fast
// clock; a timeout fault's hang is divided the same way.
func TestSimSpeed(t *testing.T) {
	t.Parallel()
	t.Run("latency", func(t *testing.T) {
		t.Parallel()
		ck := clock.New(50)
		calls := make(chan Call, 1)
		m := servedModel(t, forecast.ModelConfig{Profile: "openai", Latency: 5 * time.Second, Limits: limits("rpm=10")})
		ts := httptest.NewServer(NewServer(m, ServerConfig{Now: ck.Now, Speed: ck.Speed(), OnFinish: func(c Call) { calls <- c }}))
		t.Cleanup(ts.Close)
		start := time.Now()
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("x", 5)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		wall := time.Since(start)
		if resp.StatusCode != 200 || wall > 2*time.Second {
			t.Fatalf("status %d after %s of wall time, want 200 in about 50 to 150 ms", resp.StatusCode, wall)
		}
		c := finishedCall(t, calls)
		// 5 s ± 50 % of latency on the fast clock.
		if held := c.End.Sub(c.Start); held < 2500*time.Millisecond || held > time.Minute {
			t.Errorf("held %s on the server's clock (%s of wall time), want 2.5 to 7.5 s", held, wall)
		}
		if got := resp.Header.Get("x-ratelimit-reset-requests"); got != "1m0s" {
			t.Errorf("reset %q, want 1m0s of the server's clock", got)
		}
	})
	t.Run("hang", func(t *testing.T) {
		t.Parallel()
		ck := clock.New(6000) // the 10 minutes of a timeout fault's hang are 100 ms
		calls := make(chan Call, 1)
		m := servedModel(t, forecast.ModelConfig{Profile: "openai", Faults: forecast.Faults{Timeout: 1}})
		ts := httptest.NewServer(NewServer(m, ServerConfig{Now: ck.Now, Speed: ck.Speed(), OnFinish: func(c Call) { calls <- c }}))
		t.Cleanup(ts.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(chatBody("x", 5)))
		start := time.Now()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a timeout fault answered %d", resp.StatusCode)
		}
		if wall := time.Since(start); wall > 5*time.Second {
			t.Errorf("the hang lasted %s of wall time, want about 100 ms", wall)
		}
		if c := finishedCall(t, calls); c.End.Sub(c.Start) < 10*time.Minute || c.Answered {
			t.Errorf("call %+v: want 10 min held on the server's clock, unanswered", c)
		}
	})
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		for _, speed := range []float64{0, -3, 0.5, math.NaN()} {
			if s := NewServer(servedModel(t, forecast.ModelConfig{}), ServerConfig{Speed: speed}); s.cfg.Speed != 1 {
				t.Errorf("speed %v taken as %v, want 1", speed, s.cfg.Speed)
			}
		}
	})
}
