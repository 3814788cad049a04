package llm

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// The cached part of a prompt, as OpenAI and Groq report it, reaches the
// governor, which prices it at the cached price; the walk over an answer
// reads it as encoding/json does.
func TestUsageCachedTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want governor.Cost
	}{
		{`{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020,"prompt_tokens_details":{"cached_tokens":400}}}`,
			governor.Cost{Input: 1000, Output: 20, Cached: 400}},
		{`{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":20,"prompt_tokens_details":null}}`,
			governor.Cost{Input: 1000, Output: 20}},
		{`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":99,"audio_tokens":0}}}`,
			governor.Cost{Input: 10, Output: 2, Cached: 10}}, // never more than the prompt
		{`{"choices":[],"usage":{"prompt_tokens":10,"PROMPT_TOKENS_DETAILS":{"Cached_Tokens":3}}}`,
			governor.Cost{Input: 10, Cached: 3}},
	} {
		_, raw, err := readAnswer([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		u, odd := readUsage(raw)
		if odd != nil {
			t.Fatalf("%s: read as odd: %+v", tc.body, odd)
		}
		var std struct{ Usage *Usage }
		if err := json.Unmarshal([]byte(tc.body), &std); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(u, std.Usage) {
			t.Errorf("%s: walked %+v, encoding/json %+v", tc.body, u, std.Usage)
		}
		if got := u.Governor(); got != tc.want {
			t.Errorf("%s: governor cost %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

// TestUsageCounts: a count is read as the whole number it is, however JSON
// writes it; a usage with any count that is not a whole number from 0 to
// 2^63−1 (once: the whole answer failed as malformed, and the gateway
// bought it again 8 times) is read as not reported, saying which count
// and why.
func TestUsageCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		count string
		want  int64
		what  string // "": read as want
	}{
		{"10", 10, ""}, {"10.0", 10, ""}, {"1e3", 1000, ""}, {"1E+3", 1000, ""}, {"0.1e2", 10, ""},
		{"12.500e1", 125, ""}, {"0", 0, ""}, {"-0", 0, ""}, {"0.0e-7", 0, ""}, {"null", 0, ""},
		{"9223372036854775807", 9223372036854775807, ""}, {"9.223372036854775807e18", 9223372036854775807, ""},
		{"1.5", 0, "not a whole number"}, {"1e-1", 0, "not a whole number"}, {"10.000000000000000001", 0, "not a whole number"},
		{"1e30", 0, "too large"}, {"9223372036854775808", 0, "too large"}, {"1e999999999999", 0, "too large"},
		{"1e-999999999999", 0, "not a whole number"},
		{"-1", 0, "negative"}, {"-1.0", 0, "negative"}, {"-1e30", 0, "negative"},
		{`"10"`, 0, "not a number"}, {"true", 0, "not a number"}, {"[]", 0, "not a number"}, {"{}", 0, "not a number"},
	} {
		n, what := readCount([]byte(tc.count))
		if n != tc.want || what != tc.what {
			t.Errorf("readCount(%s) = %d %q, want %d %q", tc.count, n, what, tc.want, tc.what)
		}
		for _, field := range []string{"prompt_tokens", "completion_tokens", "total_tokens"} {
			body := `{"prompt_tokens":7,"completion_tokens":3,"` + field + `":` + tc.count + `}`
			u, odd := readUsage([]byte(body))
			if tc.what != "" {
				if u != nil || odd == nil || odd.field != field || odd.what != tc.what || string(odd.said) != tc.count {
					t.Errorf("%s: usage %+v, oddity %+v: want none reported, %s %s", body, u, odd, field, tc.what)
				}
				continue
			}
			if u == nil || odd != nil {
				t.Errorf("%s: usage %+v, oddity %+v", body, u, odd)
			}
		}
	}
	for _, body := range []string{`7`, `"x"`, `[]`, `{"prompt_tokens_details":5}`, `{"prompt_tokens_details":{"cached_tokens":"x"}}`} {
		if u, odd := readUsage([]byte(body)); u != nil || odd == nil {
			t.Errorf("%s: usage %+v, oddity %+v: want none reported", body, u, odd)
		}
	}
	for _, body := range []string{``, `null`} {
		if u, odd := readUsage([]byte(body)); u != nil || odd != nil {
			t.Errorf("%q: usage %+v, oddity %+v: want none, and nothing odd", body, u, odd)
		}
	}
}

// TestOddUsageKeepsTheAnswer: an answer whose usage has a count that is
// not a whole number (once: a malformed answer, which the gateway and an
// LLM step bought again) is the provider's answer, plain, raw or
// streamed; its usage is not reported, and each kind of oddity is logged
// once, not once a call.
func TestOddUsageKeepsTheAnswer(t *testing.T) {
	t.Parallel()
	const usage = `{"prompt_tokens":10.0,"completion_tokens":1.5,"total_tokens":1e30}`
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if body["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n")
			io.WriteString(w, "data: {\"id\":\"c\",\"choices\":[],\"usage\":"+usage+"}\n\n")
			io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":`+usage+`}`)
	})
	log := &testenv.Buffer{}
	c, err := NewClient(Config{BaseURL: srv.URL, APIKey: "sk-test-key-0123456789", Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := &ChatRequest{Model: "m", MaxTokens: 5, Messages: []Message{{Role: "user", Content: "hi"}}}
	for range 2 {
		resp, err := c.Chat(ctx, req)
		if err != nil {
			t.Fatalf("Chat: %v", err)
		}
		if resp.Text() != "hi" || resp.Usage != (Usage{}) {
			t.Errorf("Chat: text %q usage %+v, want hi and none", resp.Text(), resp.Usage)
		}
		raw, err := c.ChatRaw(ctx, []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatalf("ChatRaw: %v", err)
		}
		if raw.Usage != nil || !strings.Contains(string(raw.Body), `"prompt_tokens":10.0`) {
			t.Errorf("ChatRaw: usage %+v, body %s: want none, and the body as sent", raw.Usage, raw.Body)
		}
		s, err := c.ChatStream(ctx, req)
		if err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
		var carried bool
		for s.Next() {
			carried = carried || s.Chunk().CarriesUsage()
		}
		if s.Err() != nil || s.Usage() != nil || !carried {
			t.Errorf("stream: err %v, usage %+v, a chunk carried usage %v: want nil, none, true", s.Err(), s.Usage(), carried)
		}
	}
	if n := rec.count.Load(); n != 6 {
		t.Errorf("%d calls to the provider, want 6: one per answer", n)
	}
	if n := strings.Count(log.String(), "read a provider's usage as not reported"); n != 1 {
		t.Errorf("%d lines logged, want 1: the first odd count is the kind\n%s", n, log)
	}
	if !strings.Contains(log.String(), "field=completion_tokens problem=\"not a whole number\" said=1.5") {
		t.Errorf("the line does not say which count and why:\n%s", log)
	}
}
