package llm

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var fuzzProfiles = Profiles()

// FuzzSnapshot: any header values parse without panicking, and whatever is
// read is sane: counts and waits are never negative, waits are bounded.
func FuzzSnapshot(f *testing.F) {
	seeds := [][4]string{
		{"14400", "14370", "2m59.56s", "7.66s"},
		{"30000", "29000", "6m0s", "20ms"},
		{"50", "49", "2026-10-19T03:59:01Z", "2026-10-19T12:59:02+09:00"},
		{"1h2m3s", "120ms", "1", "0.5"},
		{"-1", "NaN", "-3s", "1e300"},
		{"", "", "", ""},
	}
	for i, s := range seeds {
		f.Add(uint8(i%3), s[0], s[1], s[2], s[3])
	}
	now := time.Date(2026, 10, 19, 3, 59, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, p uint8, limit, remaining, reset1, reset2 string) {
		profile := fuzzProfiles[int(p)%len(fuzzProfiles)]
		h := http.Header{}
		for _, kind := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
			for _, prefix := range []string{"x-ratelimit-", "anthropic-ratelimit-"} {
				if prefix == "x-ratelimit-" {
					h.Set(prefix+"limit-"+kind, limit)
					h.Set(prefix+"remaining-"+kind, remaining)
					h.Set(prefix+"reset-"+kind, reset1)
				} else {
					h.Set(prefix+kind+"-limit", limit)
					h.Set(prefix+kind+"-remaining", remaining)
					h.Set(prefix+kind+"-reset", reset2)
				}
			}
		}
		s := profile.Snapshot(h, now)
		for l, o := range s {
			if o.Limit < 0 || o.Remaining < 0 || o.Reset < 0 || o.Reset > maxWait {
				t.Fatalf("%s %d: %+v", profile, l, o)
			}
			if !o.Known && o.Remaining != 0 {
				t.Fatalf("remaining without Known: %+v", o)
			}
		}
	})
}

// FuzzClassify: any status, headers and body classify without panicking
// into exactly what the contract promises.
func FuzzClassify(f *testing.F) {
	bodies := []string{groqTPMBody, groqRPDBody, groqRPMBody, groqTPDBody, groqTooLarge413Body, groqOTPMSeedBody,
		openaiTPMBody, openaiRPMBody, openaiRPDBody, openaiTPDBody, openaiTooLargeBody, openaiQuotaBody, openaiLegacyRPMBody,
		anthropicITPMBody, anthropicOTPMBody, anthropicRPMBody, anthropicLegacyBody, anthropicOverloadedBody,
		anthropicCreditBody, anthropicTooLargeBody, "", "<html>", `{"error":"x"}`, `{"error":{"message":1e999}}`}
	if seedLog, err := os.ReadFile("testdata/seed000_otpm_log.txt"); err == nil {
		bodies = append(bodies, string(seedLog))
	}
	statuses := []int{429, 413, 529, 503, 500, 400, 401, 200, 0, 498}
	for i, b := range bodies {
		f.Add(uint8(i%3), statuses[i%len(statuses)], "900", "1500", b)
	}
	now := time.Date(2026, 10, 19, 3, 59, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, p uint8, status int, retryAfter, retryAfterMs, body string) {
		profile := fuzzProfiles[int(p)%len(fuzzProfiles)]
		h := http.Header{}
		h.Set("retry-after", retryAfter)
		h.Set("retry-after-ms", retryAfterMs)
		err := profile.classify(status, h, []byte(body), now)
		if status >= 200 && status < 300 {
			if err != nil {
				t.Fatalf("2xx gave %v", err)
			}
			return
		}
		if err == nil {
			t.Fatalf("status %d gave no error", status)
		}
		_ = err.Error()
		if d, ok := RetryAfter(err); d < 0 || d > maxWait || (ok && d == 0) {
			t.Fatalf("RetryAfter = %v, %v", d, ok)
		}
		var tl *TooLargeError
		if errors.As(err, &tl) && Retryable(err) {
			t.Fatal("a too-large request is retryable")
		}
		if status == http.StatusTooManyRequests && !Retryable(err) {
			var q *QuotaError
			if !errors.As(err, &tl) && !errors.As(err, &q) {
				t.Fatalf("a 429 that is neither too large nor quota is not retryable: %#v", err)
			}
		}
		if status == http.StatusRequestEntityTooLarge && !errors.As(err, &tl) {
			t.Fatalf("413 is not too large: %#v", err)
		}
	})
}

// FuzzRetryIn: the wait named in a message is never negative nor unbounded.
func FuzzRetryIn(f *testing.F) {
	for _, s := range []string{"Please try again in 7m12s.", "try again in 5.289s", "try again in 120ms",
		"try again in 1m30.5s", "Please retry after 20 seconds", "try again in 99999999999h", "try again in 1.s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d := messageRetryAfter(normalize(s)); d < 0 || d > maxWait {
			t.Fatalf("messageRetryAfter(%q) = %v", s, d)
		}
		_, _ = limitFromMessage(s)
		n := numbersFromMessage(s)
		if n.max < 0 || n.used < 0 || n.requested < 0 {
			t.Fatalf("negative numbers from %q: %+v", s, n)
		}
	})
}

// FuzzDecodeChatRequest: a body that decodes re-encodes to one that decodes
// to the same request, so forwarding is stable; and what is accepted is
// bounded: valid UTF-8, max_tokens and n within their limits, every message
// with a known role, a cost no governor sum can wrap on.
func FuzzDecodeChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"max_completion_tokens":9,"tools":[]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[]}],"stop":"x","stream":true,"n":2}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":4611686018427387904,"n":2}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1048576,"max_completion_tokens":1,"n":128}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1e400,"n":1e2}`,
		`{"model":"m","messages":[{}]} trailing`,
		`{"model":"0","messages":[{"role":"user","content":""}],"max_":0,"max_0":0}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		`{"model":"m","messages":[{"role":"tool","content":"\ud800"}],"x":"\u0000"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeChatRequest([]byte(body))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "llm: request ") {
				t.Fatalf("error without the request's words: %v", err)
			}
			return
		}
		if !utf8.ValidString(body) {
			t.Fatalf("accepted invalid UTF-8: %q", body)
		}
		if req.MaxTokens < 0 || req.MaxTokens > MaxOutputTokens {
			t.Fatalf("accepted max_tokens %d", req.MaxTokens)
		}
		if n := choices(req); n < 1 || n > MaxChoices {
			t.Fatalf("accepted n %d", n)
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("decoded request does not validate: %v", err)
		}
		for i, m := range req.Messages {
			if !slices.Contains(roles, m.Role) {
				t.Fatalf("message %d has role %q", i, m.Role)
			}
		}
		out, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if !utf8.Valid(out) {
			t.Fatalf("re-encoded to invalid UTF-8: %q", out)
		}
		again, err := DecodeChatRequest(out)
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		if again.Model != req.Model || again.MaxTokens != req.MaxTokens || again.CompletionTokensName != req.CompletionTokensName ||
			again.User != req.User || again.Stream != req.Stream || len(again.Messages) != len(req.Messages) ||
			!slices.Equal(again.Stop, req.Stop) || len(again.Extra) != len(req.Extra) {
			t.Fatalf("re-decoded differently:\n%+v\n%+v", req, again)
		}
		for i := range req.Messages {
			a, b := req.Messages[i], again.Messages[i]
			if a.Role != b.Role || a.Content != b.Content || len(a.Extra) != len(b.Extra) {
				t.Fatalf("message %d re-decoded differently:\n%+v\n%+v", i, a, b)
			}
		}
		out2, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != string(out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(out, &fields); err != nil {
			t.Fatal(err)
		}
		_, mt := fields["max_tokens"]
		_, mct := fields["max_completion_tokens"]
		if mt && mct {
			t.Fatalf("two max_tokens names: %s", out)
		}
		var e Estimator
		c := e.Cost(req)
		if c.Input < 0 || c.Output < 0 || c.Requests != 1 || c.Output > MaxOutputTokens*MaxChoices {
			t.Fatalf("cost %+v", c)
		}
		// Text costs at most about two tokens a byte; the parts that are
		// not text what their profile charges (FuzzMediaTokens bounds that).
		media, mp := int64(0), newMediaPricer("", req.Model)
		for _, m := range req.Messages {
			media = addTokens(media, mp.tokens(m.RawContent))
		}
		if text := c.Input - ceilTokens(float64(media)*(1+DefaultMargin)); text > int64(len(body))*2+101 {
			t.Fatalf("input estimate %d (%d for parts that are not text) for a body of %d bytes", c.Input, media, len(body))
		}
	})
}

// FuzzStream: any bytes from upstream read as a stream without panicking
// and end it: every chunk is the JSON of one event, no more chunks than data
// lines, the end is sticky, and a clean end (no error) was earned by [DONE]
// or a finish.
func FuzzStream(f *testing.F) {
	for _, s := range []string{
		": keep-alive\n\n" + `data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n" +
			`data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n",
		"event: error\ndata: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"}}\n\n",
		"data: {\"id\":1,\n" + "data: \"choices\":[]}\r\n\r\n",
		`data: {"choices":[],"x_groq":{"usage":{"prompt_tokens":-1,"completion_tokens":9223372036854775807}}}`,
		"data: {\"error\":{\"message\":\"Rate limit reached: Please try again in 2s.\",\"code\":\"rate_limit_exceeded\"}}\n\n",
		"data: [DONE]",
		"data:\ndata:\n\n",
		"\xff\xfe\x00data: {}",
		"",
	} {
		f.Add(s)
	}
	c, err := NewClient(Config{Profile: Groq})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s := readerStream(c, strings.NewReader(body))
		chunks := 0
		for s.Next() {
			chunks++
			ch := s.Chunk()
			if !json.Valid(ch.Raw) || len(ch.Raw) > maxEvent {
				t.Fatalf("chunk %d: raw %q", chunks, ch.Raw)
			}
		}
		if max := strings.Count(body, "data"); chunks > max {
			t.Fatalf("%d chunks from %d data lines", chunks, max)
		}
		err := s.Err()
		if s.Next() || s.Err() != err {
			t.Fatal("Next after the end read more or changed the error")
		}
		if err == nil && !strings.Contains(body, "[DONE]") && !s.finished {
			t.Fatalf("clean end without [DONE] or a finish: %q", body)
		}
		if err != nil {
			_ = err.Error()
			if d, _ := RetryAfter(err); d < 0 || d > maxWait {
				t.Fatalf("RetryAfter %v", d)
			}
		}
	})
}
