package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// setClock is a settable clock for the server.
type setClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *setClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

type fixture struct {
	url   string
	model *forecast.Model
	clock *setClock
}

func serve(t *testing.T, cfg forecast.ModelConfig, scfg ServerConfig) *fixture {
	t.Helper()
	m := servedModel(t, cfg)
	ck := &setClock{t: t0.Add(30 * time.Second)}
	if scfg.Now == nil {
		scfg.Now = ck.Now
	}
	ts := httptest.NewServer(NewServer(m, scfg))
	t.Cleanup(ts.Close)
	return &fixture{url: ts.URL, model: m, clock: ck}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) errorMessage(t *testing.T) string {
	t.Helper()
	var v struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return v.Error.Message
}

func (f *fixture) post(t *testing.T, body string, header ...string) reply {
	t.Helper()
	return f.postTo(t, "/v1/chat/completions", body, header...)
}

// postTo posts body to path with the headers given (name, value, …).
func (f *fixture) postTo(t *testing.T, path, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// chatBody is a request whose prompt is 3 + 3 + tokens(text) tokens.
func chatBody(text string, maxTokens int) string {
	return chatBodyModel("llama-3.1-8b-instant", text, maxTokens)
}

func chatBodyModel(model, text string, maxTokens int) string {
	b, _ := json.Marshal(map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "user", "content": text}},
		"max_tokens": maxTokens,
	})
	return string(b)
}

func prompt(text string) int64 {
	n, _ := cl100k().Count(text)
	return int64(n) + perMessageTokens + replyPriming
}

type completionJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usageJSON `json:"usage"`
}

func TestWords(t *testing.T) {
	t.Parallel()
	for n := int64(0); n <= 400; n++ {
		text := Words(n, uint64(n*31))
		if got, _ := cl100k().Count(text); int64(got) != n {
			t.Fatalf("Words(%d) has %d tokens: %q", n, got, text)
		}
	}
	if a, b := Words(5, 1), Words(5, 1); a != b || a == Words(5, 2) {
		t.Error("Words is not deterministic per seed")
	}
}

func TestGroqWire(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpd=100,tpm=1000,otpm=600")}, ServerConfig{})
	hello := "Say hello to the simulator"
	r := f.post(t, chatBody(hello, 100), OutputTokensHeader, "37")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var c completionJSON
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatal(err)
	}
	in := prompt(hello)
	if c.Usage != (usageJSON{in, 37, in + 37}) || c.Choices[0].FinishReason != "stop" || c.Model != "llama-3.1-8b-instant" || c.Object != "chat.completion" {
		t.Errorf("completion = %+v, want usage {%d 37}", c, in)
	}
	if n, _ := cl100k().Count(c.Choices[0].Message.Content); n != 37 {
		t.Errorf("content has %d tokens, want 37", n)
	}
	used := in + 100
	wantHeaders := map[string]string{
		"x-ratelimit-limit-requests":     "100",
		"x-ratelimit-remaining-requests": "99",
		"x-ratelimit-reset-requests":     "24h0m0s",
		"x-ratelimit-limit-tokens":       "1000",
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(1000-used, 10),
		"x-ratelimit-reset-tokens":       "1m0s",
		"retry-after":                    "",
	}
	for k, v := range wantHeaders {
		if got := r.header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if r.header.Get("x-request-id") == "" {
		t.Error("no x-request-id")
	}

	// 20.5 s later the minute is not over: a request that needs more than is left gets a 429.
	f.clock.Set(t0.Add(50*time.Second + 500*time.Millisecond))
	big := strings.Repeat("word ", 400)
	r = f.post(t, chatBody(big, 500))
	if r.status != 429 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	need := prompt(big) + 500
	msg := r.errorMessage(t)
	want := "Rate limit reached for model `llama-3.1-8b-instant` in organization `org_sim` service tier `on_demand` on tokens per minute (TPM): Limit 1000, Used " +
		strconv.FormatInt(used, 10) + ", Requested " + strconv.FormatInt(need, 10) + ". Please try again in 39.5s."
	if !strings.HasPrefix(msg, want) {
		t.Errorf("message %q\nwant prefix %q", msg, want)
	}
	if got := r.header.Get("retry-after"); got != "40" {
		t.Errorf("retry-after = %q, want 40 (39.5 s rounded up)", got)
	}
	if got := r.header.Get("x-ratelimit-reset-tokens"); got != "39.5s" {
		t.Errorf("reset-tokens = %q, want 39.5s", got)
	}
	if !bytes.Contains(r.body, []byte(`"type":"tokens","code":"rate_limit_exceeded"`)) {
		t.Errorf("body %s", r.body)
	}

	// Too large for TPM: 413, never worth a retry.
	huge := strings.Repeat("word ", 1200)
	r = f.post(t, chatBody(huge, 10))
	if r.status != 413 || r.header.Get("retry-after") != "" {
		t.Fatalf("status %d retry-after %q, want 413 and none", r.status, r.header.Get("retry-after"))
	}
	if msg := r.errorMessage(t); !strings.Contains(msg, "Request too large for model `llama-3.1-8b-instant` in organization `org_sim` service tier `on_demand` on tokens per minute (TPM): Limit 1000, Requested "+strconv.FormatInt(prompt(huge)+10, 10)+", please reduce your message size and try again.") {
		t.Errorf("413 message %q", msg)
	}
	// Too large for OTPM: Groq's 429 with a 900 s retry-after (seed 000).
	r = f.post(t, chatBody("hi", 700))
	if r.status != 429 || r.header.Get("retry-after") != "900" {
		t.Fatalf("status %d retry-after %q, want 429 900", r.status, r.header.Get("retry-after"))
	}
	if msg := r.errorMessage(t); !strings.Contains(msg, "on output tokens per minute (OTPM): Limit 600, Requested 700. The request's expected output tokens exceed the enforced limit; reduce max_tokens (or the request's expected output) and try again.") {
		t.Errorf("OTPM message %q", msg)
	}
}

func TestOpenAIWire(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=2,tpm=30000")}, ServerConfig{})
	r := f.post(t, chatBodyModel("gpt-4o", "a", 50))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for k, v := range map[string]string{"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "1",
		"x-ratelimit-reset-requests": "1m0s", "x-ratelimit-limit-tokens": "30000"} {
		if got := r.header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	f.clock.Set(t0.Add(45 * time.Second))
	if r := f.post(t, chatBodyModel("gpt-4o", "b", 50)); r.status != 200 {
		t.Fatalf("second: %d", r.status)
	}
	r = f.post(t, chatBodyModel("gpt-4o", "c", 50))
	if r.status != 429 || r.header.Get("retry-after") != "45" || r.header.Get("x-ratelimit-reset-requests") != "1m0s" {
		t.Fatalf("third: %d retry-after %q reset %q", r.status, r.header.Get("retry-after"), r.header.Get("x-ratelimit-reset-requests"))
	}
	if msg := r.errorMessage(t); !strings.HasPrefix(msg, "Rate limit reached for gpt-4o in organization org-sim on requests per min (RPM): Limit 2, Used 2, Requested 1. Please try again in 45s.") {
		t.Errorf("message %q", msg)
	}
	if !bytes.Contains(r.body, []byte(`"type":"requests","param":null,"code":"rate_limit_exceeded"`)) {
		t.Errorf("body %s", r.body)
	}
	// Too large is a 429 at OpenAI.
	r = f.post(t, chatBodyModel("gpt-4o", "d", 31000))
	if r.status != 429 || r.header.Get("retry-after") != "" {
		t.Fatalf("too large: %d retry-after %q", r.status, r.header.Get("retry-after"))
	}
	if msg := r.errorMessage(t); !strings.Contains(msg, "Request too large for gpt-4o in organization org-sim on tokens per min (TPM): Limit 30000, Requested "+strconv.FormatInt(prompt("d")+31000, 10)+". The input or output tokens must be reduced in order to run successfully.") {
		t.Errorf("message %q", msg)
	}
}

func TestAnthropicWire(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "anthropic", SettleOutput: true, Limits: limits("rpm=50,itpm=30000,otpm=8000")}, ServerConfig{})
	r := f.post(t, chatBody("hello", 2500), OutputTokensHeader, "10")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	reset := t0.Add(90 * time.Second).Format(time.RFC3339)
	for k, v := range map[string]string{
		"anthropic-ratelimit-requests-limit":          "50",
		"anthropic-ratelimit-requests-remaining":      "49",
		"anthropic-ratelimit-requests-reset":          reset,
		"anthropic-ratelimit-input-tokens-limit":      "30000",
		"anthropic-ratelimit-input-tokens-remaining":  "29000", // 29,991 rounded down to thousands
		"anthropic-ratelimit-output-tokens-limit":     "8000",
		"anthropic-ratelimit-output-tokens-remaining": "5000", // 5,500 before the response ends
		"anthropic-ratelimit-output-tokens-reset":     reset,
		"anthropic-ratelimit-tokens-limit":            "", // no tpm configured
		"request-id":                                  "req_sim_000001",
	} {
		if got := r.header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	// The response ended: settle accounting gave back 2,490 output tokens.
	r = f.post(t, chatBody("again", 5000), OutputTokensHeader, "5000")
	if r.status != 200 {
		t.Fatalf("after settling: %d %s", r.status, r.body)
	}
	if got := r.header.Get("anthropic-ratelimit-output-tokens-remaining"); got != "2000" { // 8000-10-5000 = 2990
		t.Errorf("output remaining = %q, want 2000", got)
	}
	r = f.post(t, chatBody("more", 3000))
	if r.status != 429 || r.header.Get("retry-after") != "60" {
		t.Fatalf("status %d retry-after %q, want 429 60", r.status, r.header.Get("retry-after"))
	}
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Type != "error" || v.Error.Type != "rate_limit_error" || v.RequestID == "" ||
		!strings.HasPrefix(v.Error.Message, "This request would exceed your organization's rate limit of 8,000 output tokens per minute (org: org-sim, model: llama-3.1-8b-instant).") {
		t.Errorf("body %s", r.body)
	}
	r = f.post(t, chatBody("x", 9000))
	if r.status != 413 || !bytes.Contains(r.body, []byte(`"type":"invalid_request_error"`)) || !bytes.Contains(r.body, []byte("8,000 output tokens per minute")) {
		t.Errorf("too large: %d %s", r.status, r.body)
	}
}

// streamChunk is a chunk of a stream as a client reads it, with the raw
// fields to tell a null from an absent one.
type streamChunk struct {
	ID                string  `json:"id"`
	Object            string  `json:"object"`
	Model             string  `json:"model"`
	SystemFingerprint *string `json:"system_fingerprint"`
	Choices           []struct {
		Index        int               `json:"index"`
		Delta        map[string]string `json:"delta"`
		FinishReason *string           `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
	raw   map[string]json.RawMessage
}

// readStream parses a stream's chunks; done reports a final [DONE].
func readStream(t *testing.T, body []byte) (chunks []streamChunk, done bool) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %q", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var ch streamChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if err := json.Unmarshal([]byte(data), &ch.raw); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, ch)
	}
	return chunks, done
}

// TestStreaming: a stream has a role chunk, content chunks, a finish chunk
// and, when asked, a usage chunk without choices; every chunk carries the
// system_fingerprint of a plain answer, and with usage asked for every chunk
// before the usage chunk carries "usage": null, as OpenAI's do.
func TestStreaming(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "groq", Limits: limits("tpm=10000")}, ServerConfig{})
	for _, includeUsage := range []bool{true, false} {
		body := `{"model":"m","stream":true,"stream_options":{"include_usage":` + strconv.FormatBool(includeUsage) +
			`},"max_tokens":40,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"tell me"}]}]}`
		r := f.post(t, body, OutputTokensHeader, "25")
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d type %q", r.status, r.header.Get("Content-Type"))
		}
		chunks, done := readStream(t, r.body)
		var text strings.Builder
		var usage *usageJSON
		var finish string
		for i, ch := range chunks {
			if ch.SystemFingerprint == nil || *ch.SystemFingerprint != "fp_sluice_sim" || ch.Object != "chat.completion.chunk" || ch.Model != "m" {
				t.Errorf("chunk %d: fingerprint, object or model missing: %s", i, ch.raw["system_fingerprint"])
			}
			u, has := ch.raw["usage"]
			last := i == len(chunks)-1
			switch {
			case !includeUsage && has:
				t.Errorf("chunk %d carries usage unasked: %s", i, u)
			case includeUsage && !last && (!has || string(u) != "null"):
				t.Errorf("chunk %d: usage %q, want null", i, u)
			case includeUsage && last && (ch.Usage == nil || len(ch.Choices) != 0 || string(ch.raw["choices"]) != "[]"):
				t.Errorf("last chunk: usage %s choices %s, want the usage and []", u, ch.raw["choices"])
			}
			if ch.Usage != nil {
				usage = ch.Usage
			}
			for _, c := range ch.Choices {
				text.WriteString(c.Delta["content"])
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
		}
		in := int64(3 + 2*perMessageTokens)
		for _, s := range []string{"be brief", "tell me"} {
			n, _ := cl100k().Count(s)
			in += int64(n)
		}
		if n, _ := cl100k().Count(text.String()); n != 25 || finish != "stop" || !done {
			t.Errorf("streamed %d tokens finish %q done %v", n, finish, done)
		}
		if includeUsage && (usage == nil || *usage != (usageJSON{in, 25, in + 25})) {
			t.Errorf("usage = %+v, want {%d 25}", usage, in)
		}
		if !includeUsage && usage != nil {
			t.Errorf("usage chunk sent unasked")
		}
	}
}

func TestDefaultMaxAndFinishReason(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "openai", DefaultMaxTokens: 30, Limits: limits("otpm=1000")}, ServerConfig{})
	// No max_tokens: the default is reserved and output is drawn within [15, 30].
	for range 20 {
		r := f.post(t, `{"model":"m","messages":[{"role":"user","content":"go"}]}`)
		var c completionJSON
		if err := json.Unmarshal(r.body, &c); err != nil {
			t.Fatal(err)
		}
		if n := c.Usage.CompletionTokens; n < 15 || n > 30 || (n == 30) != (c.Choices[0].FinishReason == "length") {
			t.Fatalf("completion tokens %d finish %q", n, c.Choices[0].FinishReason)
		}
	}
	if st := f.model.Stats(); st.Charged.Output != 20*30 {
		t.Errorf("charged output %d, want the default max reserved 20 times", st.Charged.Output)
	}
	// max_completion_tokens is read too, and the header caps at it.
	r := f.post(t, `{"model":"m","max_completion_tokens":7,"messages":[{"role":"user","content":"go"}]}`, OutputTokensHeader, "100")
	var c completionJSON
	_ = json.Unmarshal(r.body, &c)
	if c.Usage.CompletionTokens != 7 || c.Choices[0].FinishReason != "length" {
		t.Errorf("usage %+v finish %q", c.Usage, c.Choices[0].FinishReason)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "groq"}, ServerConfig{})
	for _, tc := range []struct {
		name, body string
		header     []string
		want       string
	}{
		{"not json", `{"model":`, nil, "not valid JSON"},
		{"no messages", `{"model":"m","messages":[]}`, nil, "messages"},
		{"bad content", `{"model":"m","messages":[{"role":"user","content":7}]}`, nil, "messages[0].content"},
		{"zero max", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, nil, "max_tokens"},
		{"bad output header", chatBody("x", 5), []string{OutputTokensHeader, "many"}, OutputTokensHeader},
	} {
		r := f.post(t, tc.body, tc.header...)
		if r.status != 400 || !strings.Contains(r.errorMessage(t), tc.want) {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
		}
	}
	if st := f.model.Stats(); st.Requests != 0 {
		t.Errorf("bad requests reached the model: %+v", st)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	const key = "sk-sim-secret-1234"
	for _, profile := range llm.Profiles() {
		t.Run(string(profile), func(t *testing.T) {
			t.Parallel()
			f := serve(t, forecast.ModelConfig{Profile: profile}, ServerConfig{APIKey: key})
			for _, h := range [][]string{nil, {"Authorization", "Bearer sk-wrong-9876"}, {"Authorization", key}} {
				r := f.post(t, chatBody("x", 5), h...)
				if r.status != 401 {
					t.Fatalf("header %v: status %d", h, r.status)
				}
				if bytes.Contains(r.body, []byte("sk-")) {
					t.Errorf("401 body shows a key: %s", r.body)
				}
				if profile == "anthropic" && !bytes.Contains(r.body, []byte(`"authentication_error"`)) ||
					profile != "anthropic" && !bytes.Contains(r.body, []byte(`"invalid_api_key"`)) {
					t.Errorf("401 body not in the %s shape: %s", profile, r.body)
				}
			}
			if r := f.post(t, chatBody("x", 5), "Authorization", "Bearer "+key); r.status != 200 {
				t.Fatalf("right key: %d", r.status)
			}
			resp, err := http.Get(f.url + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Errorf("/v1/models without a key: %d", resp.StatusCode)
			}
		})
	}
}

func TestModelsAndStats(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "groq", Model: "qwen/qwen3-32b", Limits: limits("rpm=1,tpm=9000")}, ServerConfig{Models: []string{"a", "b"}})
	resp, err := http.Get(f.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "a" || list.Data[1].Object != "model" {
		t.Fatalf("models = %+v, %v", list, err)
	}
	f.post(t, chatBody("one", 10), FlowHeader, "summary")
	f.post(t, chatBody("two", 10), FlowHeader, "title")
	f.post(t, chatBody("three", 20000))
	resp, err = http.Get(f.url + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Requests         int64            `json:"requests"`
		Succeeded        int64            `json:"succeeded"`
		Rejected         int64            `json:"rejected"`
		TooLarge         int64            `json:"too_large"`
		RejectedByStatus map[string]int64 `json:"rejected_by_status"`
		RejectedByLimit  map[string]int64 `json:"rejected_by_limit"`
		Faults           map[string]int64 `json:"faults"`
		Charged          map[string]int64 `json:"charged"`
		Limits           map[string]int64 `json:"limits"`
		Flows            map[string]struct {
			Requests int64 `json:"requests"`
			Rejected int64 `json:"rejected"`
		} `json:"flows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	wantTokens := prompt("one") + 10
	if st.Requests != 3 || st.Succeeded != 1 || st.Rejected != 2 || st.TooLarge != 1 ||
		st.RejectedByStatus["429"] != 1 || st.RejectedByStatus["413"] != 1 ||
		st.RejectedByLimit["rpm"] != 1 || st.RejectedByLimit["tpm"] != 1 ||
		st.Charged["rpm"] != 1 || st.Charged["tpm"] != wantTokens || st.Limits["tpm"] != 9000 ||
		st.Flows["summary"].Requests != 1 || st.Flows["title"].Rejected != 1 || st.Faults["timeout"] != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestFaultsOverHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		faults forecast.Faults
		check  func(t *testing.T, resp *http.Response, err error)
	}{
		{"5xx", forecast.Faults{Error5xx: 1}, func(t *testing.T, resp *http.Response, err error) {
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode < 500 || !bytes.Contains(b, []byte(`"error"`)) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		}},
		{"bad json", forecast.Faults{BadJSON: 1}, func(t *testing.T, resp *http.Response, err error) {
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			var v any
			if resp.StatusCode != 200 || json.Unmarshal(b, &v) == nil || !bytes.HasPrefix(b, []byte(`{"id":"chatcmpl-sim-`)) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		}},
		{"reset", forecast.Faults{Reset: 1}, func(t *testing.T, resp *http.Response, err error) {
			if err == nil {
				resp.Body.Close()
				t.Fatalf("got a response %d, want a connection error", resp.StatusCode)
			}
		}},
		{"timeout", forecast.Faults{Timeout: 1}, func(t *testing.T, resp *http.Response, err error) {
			if err == nil {
				resp.Body.Close()
				t.Fatalf("got a response %d, want none", resp.StatusCode)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := serve(t, forecast.ModelConfig{Profile: "openai", Faults: tc.faults, SettleOutput: true, Limits: limits("tpm=100000")},
				ServerConfig{HangTimeout: 20 * time.Millisecond})
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := client.Post(f.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("x", 100)))
			tc.check(t, resp, err)
			if err == nil {
				resp.Body.Close()
			}
			st := f.model.Stats()
			if st.Charged.Requests != 1 || st.Succeeded != 0 {
				t.Errorf("a faulted request is charged and not a success: %+v", st)
			}
		})
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	m := servedModel(t, forecast.ModelConfig{Profile: "groq", Latency: time.Hour})
	arrived := make(chan struct{}, 1)
	s := NewServer(m, ServerConfig{Now: func() time.Time {
		select {
		case arrived <- struct{}{}:
		default:
		}
		return time.Now()
	}})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Addr() == "" || !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr = %q", s.Addr())
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("x", 5)))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("request never reached the model")
	}
	// The request waits out an hour of latency; Stop must not.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	select {
	case <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request did not end with Stop")
	}
}

func TestErrorBodyWithoutRequest(t *testing.T) {
	t.Parallel()
	if b := string(forecast.ErrorBody("anthropic", "rate_limit_error", "", "m", 0)); strings.Contains(b, "request_id") {
		t.Errorf("anthropic body for no request carries a request_id: %s", b)
	}
	if b := string(forecast.ErrorBody("anthropic", "rate_limit_error", "", "m", 7)); !strings.Contains(b, `"request_id":"req_sim_000007"`) {
		t.Errorf("anthropic body lost its request_id: %s", b)
	}
}

// TestSimRequestBounds: the server validates like a provider: max_tokens and
// max_completion_tokens from 1 to the model's max output tokens, n an
// integer (its bounds per profile: TestSimChoicesBounds), one JSON object of
// at most MaxRequestBytes. Every refusal is a 4xx in the profile's shape and
// never reaches the model.
func TestSimRequestBounds(t *testing.T) {
	t.Parallel()
	msgs := `"model":"m","messages":[{"role":"user","content":"x"}]`
	for _, profile := range llm.Profiles() {
		t.Run(string(profile), func(t *testing.T) {
			t.Parallel()
			f := serve(t, forecast.ModelConfig{Profile: profile}, ServerConfig{})
			for _, tc := range []struct {
				name, body string
				status     int
				want       string
			}{
				{"max zero", `{"max_tokens":0,` + msgs + `}`, 400, "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead."},
				{"max negative", `{"max_tokens":-3,` + msgs + `}`, 400, "but got -3 instead"},
				{"max fraction", `{"max_tokens":1.5,` + msgs + `}`, 400, "Invalid type for 'max_tokens': expected an integer, but got a decimal instead."},
				{"max string", `{"max_tokens":"10",` + msgs + `}`, 400, `expected an integer, but got a string instead`},
				{"max exponent", `{"max_tokens":1e7,` + msgs + `}`, 400, "expected an integer, but got a decimal instead"},
				{"max over", `{"max_tokens":32769,` + msgs + `}`, 400, "max_tokens is too large: 32769. This model supports at most 32768 completion tokens, whereas you provided 32769."},
				{"max 2^62", `{"max_tokens":4611686018427387904,` + msgs + `}`, 400, "max_tokens is too large: 4611686018427387904."},
				{"max 2^63-1", `{"max_tokens":9223372036854775807,` + msgs + `}`, 400, "max_tokens is too large"},
				{"max beyond int64", `{"max_tokens":99999999999999999999999,` + msgs + `}`, 400, "max_tokens is too large: 99999999999999999999999."},
				{"max below int64", `{"max_tokens":-99999999999999999999999,` + msgs + `}`, 400, "integer below minimum value"},
				{"max completion over", `{"max_completion_tokens":10000000,` + msgs + `}`, 400, "max_completion_tokens is too large: 10000000."},
				{"max completion bad, max fine", `{"max_tokens":5,"max_completion_tokens":0,` + msgs + `}`, 400, "Invalid 'max_completion_tokens'"},
				{"n fraction", `{"n":1.5,` + msgs + `}`, 400, "Invalid type for 'n': expected an integer, but got a decimal instead."},
				{"n object", `{"n":{"a":` + strings.Repeat("1", 100) + `},` + msgs + `}`, 400, "Invalid type for 'n': expected an integer, but got an object instead."},
				{"trailing data", `{` + msgs + `} {}`, 400, "We could not parse the JSON body of your request."},
				{"model name", `{` + msgs + `,"model":"` + strings.Repeat("m", 257) + `"}`, 400, "Invalid 'model': a model name is at most 256 bytes, got 257."},
				{"too large", `{"user":"` + strings.Repeat("m", MaxRequestBytes) + `",` + msgs + `}`, 413, "Request body too large: the simulator reads at most 2097152 bytes."},
			} {
				r := f.post(t, tc.body)
				if r.status != tc.status || !strings.Contains(r.errorMessage(t), tc.want) {
					t.Errorf("%s: %d %.300s, want %d and %q", tc.name, r.status, r.body, tc.status, tc.want)
				}
				if profile == "anthropic" && !bytes.HasPrefix(r.body, []byte(`{"type":"error","error":{"type":"`)) {
					t.Errorf("%s: body not in the anthropic shape: %.200s", tc.name, r.body)
				}
			}
			if st := f.model.Stats(); st.Requests != 0 {
				t.Errorf("refused requests reached the model: %+v", st)
			}
			for _, body := range []string{`{"n":1,"max_tokens":null,` + msgs + `}`, `{"n":null,"max_completion_tokens":7,` + msgs + "}\n"} {
				if r := f.post(t, body); r.status != 200 {
					t.Errorf("%s: %d %s", body, r.status, r.body)
				}
			}
		})
	}
}

// TestSimLongestAnswer: a request for the model's max output tokens gets an
// answer of exactly that length, bounded in size; a smaller configured bound
// is enforced the same way.
func TestSimLongestAnswer(t *testing.T) {
	t.Parallel()
	f := serve(t, forecast.ModelConfig{Profile: "groq"}, ServerConfig{})
	r := f.post(t, chatBody("x", forecast.MaxOutputTokens), OutputTokensHeader, "1000000000")
	var c completionJSON
	if err := json.Unmarshal(r.body, &c); err != nil || r.status != 200 {
		t.Fatalf("%d %v", r.status, err)
	}
	if c.Usage.CompletionTokens != forecast.MaxOutputTokens || c.Choices[0].FinishReason != "length" {
		t.Errorf("usage %+v finish %q", c.Usage, c.Choices[0].FinishReason)
	}
	if len(r.body) > 12*forecast.MaxOutputTokens {
		t.Errorf("answer of %d bytes", len(r.body))
	}
	small := serve(t, forecast.ModelConfig{Profile: "openai", MaxOutputTokens: 100, DefaultMaxTokens: 50}, ServerConfig{})
	if r := small.post(t, chatBody("x", 101)); r.status != 400 || !strings.Contains(r.errorMessage(t), "at most 100 completion tokens") {
		t.Errorf("over a configured bound: %d %s", r.status, r.body)
	}
	if r := small.post(t, chatBody("x", 100)); r.status != 200 {
		t.Errorf("at a configured bound: %d %s", r.status, r.body)
	}
}

// TestSimStartGuarded: the listening server has the guard in front: a request
// naming a foreign host (DNS rebinding) is refused in the profile's shape,
// and a reset fault still resets the connection through the guard's writer.
func TestSimStartGuarded(t *testing.T) {
	t.Parallel()
	m := servedModel(t, forecast.ModelConfig{Profile: "anthropic", Faults: forecast.Faults{Reset: 1}})
	s := NewServer(m, ServerConfig{})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	url := "http://" + s.Addr() + "/v1/chat/completions"
	req, _ := http.NewRequest("POST", url, strings.NewReader(chatBody("x", 5)))
	req.Header.Set("Content-Type", "application/json")
	req.Host = "attacker.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || !bytes.HasPrefix(b, []byte(`{"type":"error","error":{"type":"invalid_request_error"`)) {
		t.Errorf("foreign host: %d %s", resp.StatusCode, b)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err = client.Post(url, "application/json", strings.NewReader(chatBody("x", 5)))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("reset fault answered %d", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "reset") {
		t.Errorf("reset fault: %v, want a connection reset", err)
	}
}

func TestOnFinish(t *testing.T) {
	t.Parallel()
	finished := func(t *testing.T, calls <-chan Call) Call {
		t.Helper()
		select {
		case c := <-calls:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("OnFinish was not called")
			return Call{}
		}
	}
	t.Run("an answer is logged with its prompt", func(t *testing.T) {
		t.Parallel()
		calls := make(chan Call, 2)
		f := serve(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=1")}, ServerConfig{OnFinish: func(c Call) { calls <- c }})
		if r := f.post(t, chatBody("hello there", 10), FlowHeader, "docs"); r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		c := finished(t, calls)
		if !c.Answered || c.Fault != forecast.NoFault || c.ID != 1 || c.Flow != "docs" || len(c.Messages) != 1 || c.Messages[0] != "hello there" || c.End.Before(c.Start) {
			t.Fatalf("call %+v", c)
		}
		// A rejection charged nothing: it is no call.
		if r := f.post(t, chatBody("again", 10)); r.status != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429", r.status)
		}
		select {
		case c := <-calls:
			t.Fatalf("a rejected request was logged: %+v", c)
		default:
		}
	})
	t.Run("a call the client gave up is not answered", func(t *testing.T) {
		t.Parallel()
		calls := make(chan Call, 1)
		m := servedModel(t, forecast.ModelConfig{Profile: "groq", Latency: time.Hour})
		ts := httptest.NewServer(NewServer(m, ServerConfig{OnFinish: func(c Call) { calls <- c }}))
		t.Cleanup(ts.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(chatBody("x", 10)))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("got %d, want the client's deadline", resp.StatusCode)
		}
		if c := finished(t, calls); c.Answered || c.Fault != forecast.NoFault {
			t.Fatalf("call %+v: want an admitted call without answer", c)
		}
	})
	t.Run("a reset is logged with its fault", func(t *testing.T) {
		t.Parallel()
		calls := make(chan Call, 1)
		f := serve(t, forecast.ModelConfig{Profile: "openai", Faults: forecast.Faults{Reset: 1}}, ServerConfig{OnFinish: func(c Call) { calls <- c }})
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		if resp, err := client.Post(f.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("x", 10))); err == nil {
			resp.Body.Close()
			t.Fatalf("got %d, want a reset", resp.StatusCode)
		}
		if c := finished(t, calls); c.Answered || c.Fault != forecast.FaultReset {
			t.Fatalf("call %+v", c)
		}
	})
}
