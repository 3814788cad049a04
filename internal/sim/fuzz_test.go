package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// FuzzSimChat drives the chat handler with arbitrary bodies and headers. It
// never panics and never answers a client's bad input with a 5xx; it answers
// at once (no latency is configured) and within a size bound; what reaches
// the model is charged within bounds: at most the model's max output tokens
// for each of at most MaxChoices choices, and no more input tokens than the
// body could hold; a 400 names no Go type.
func FuzzSimChat(f *testing.F) {
	for _, s := range []struct {
		body, output, flow string
		profile            byte
	}{
		{chatBody("Say hello.", 40), "", "", 0},
		{chatBody("Say hello.", 40), "7", "summary", 1},
		{`{"model":"m","max_tokens":32768,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, "", "", 2},
		{`{"model":"m","max_completion_tokens":4611686018427387904,"messages":[{"role":"user","content":"x"}]}`, "", "", 0},
		{`{"model":"m","max_tokens":1e7,"n":3,"messages":[{"role":"user","name":"a","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`, "", "", 1},
		{`{"model":"m","max_tokens":20000,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 2000) + `"}]}`, "-1", "", 0},
		{`{"messages":[{}],"user":"u","n":null,"max_tokens":null}`, "99999999999999999999", "f", 2},
		{`{"model":"m","messages":[{}],"user":"u","n":null,"max_tokens":null}`, "99999999999999999999", "f", 2},
		{`{"model":"m","n":7,"max_tokens":300,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, "", "", 1},
		{`{"model":"m","n":128,"max_tokens":8192,"messages":[{"role":"user","content":"x"}]}`, "3", "", 1},
		{`{"model":"m","n":128,"max_tokens":8193,"messages":[{"role":"user","content":"x"}]}`, "", "", 1},
		{`{"model":7,"stream":"yes","messages":[{"role":1,"content":[{"type":"text","text":2}]}]}`, "", "", 0},
		{`{"messages":[{"content":null}]} x`, "", "", 1},
		{`[]`, "", "", 0},
		{``, "", "", 0},
	} {
		f.Add([]byte(s.body), s.output, s.flow, s.profile)
	}
	f.Fuzz(func(t *testing.T, body []byte, output, flow string, profile byte) {
		cfg := forecast.ModelConfig{Profile: llm.Profiles()[int(profile)%len(llm.Profiles())], Wire: true,
			Limits: limits("rpm=1000,tpm=200000,otpm=30000")}
		m, err := forecast.NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(m, ServerConfig{Now: func() time.Time { return t0 }})
		req := httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if output != "" {
			req.Header.Set(OutputTokensHeader, output)
		}
		if flow != "" {
			req.Header.Set(FlowHeader, flow)
		}
		w := httptest.NewRecorder()
		start := time.Now()
		srv.ServeHTTP(w, req)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("answered in %s", d)
		}
		mo := m.Config().MaxOutputTokens
		if w.Code >= 500 || w.Code < 200 {
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body.Bytes())
		}
		st := m.Stats()
		// Each token of text is a word of at most 7 bytes; a stream repeats
		// the id and the model (bounded) in a chunk of about 4 words, and
		// each choice has a role chunk and a finish chunk.
		if n, most := w.Body.Len(), 2*len(body)+8192+128*int(max(mo, st.Charged.Output)); n > most {
			t.Fatalf("answer of %d bytes, more than %d", n, most)
		}
		switch w.Code {
		case http.StatusOK:
			if st.Requests != 1 || st.Succeeded != 1 {
				t.Fatalf("200 without a success: %+v", st)
			}
			c := st.Charged
			if c.Requests != 1 || c.Output < 1 || c.Output > MaxChoices*mo || c.Output > MaxAnswerTokens || c.Input < 1 || c.Input > 3+4*int64(len(body)) {
				t.Fatalf("charged %+v for a body of %d bytes", c, len(body))
			}
			if ct := w.Header().Get("Content-Type"); ct == "application/json" {
				var v completionJSON
				if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v.Usage.CompletionTokens > c.Output || len(v.Choices) < 1 ||
					len(v.Choices) > MaxChoices || int64(len(v.Choices)) > c.Output {
					t.Fatalf("answer %v: %.300s", err, w.Body.Bytes())
				}
			} else if !bytes.HasSuffix(w.Body.Bytes(), []byte("data: [DONE]\n\n")) {
				t.Fatalf("stream does not end with [DONE]: %.300s", w.Body.Bytes())
			}
		case http.StatusTooManyRequests, http.StatusRequestEntityTooLarge:
			if st.Requests == 0 {
				// Only a body over MaxRequestBytes is refused before the model with these.
				if w.Code != http.StatusRequestEntityTooLarge || len(body) <= MaxRequestBytes {
					t.Fatalf("%d before the model: %s", w.Code, w.Body.Bytes())
				}
				break
			}
			if st.Rejected != 1 || st.Charged != (governor.Cost{}) {
				t.Fatalf("a rejection charged %+v", st)
			}
		case http.StatusBadRequest:
			if st.Requests != 0 {
				t.Fatalf("a 400 reached the model: %+v", st)
			}
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.Bytes())
		}
		if w.Code != http.StatusOK {
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
				t.Fatalf("error body %v: %s", err, w.Body.Bytes())
			}
			// (The output header's refusal quotes the header, which may say anything.)
			for _, goWord := range []string{"Go ", "struct", "chatRequest", "json:", "json.", "unmarshal", "int64", "float64", "map[", "[]", "invalid character"} {
				if strings.Contains(e.Error.Message, goWord) && !strings.HasPrefix(e.Error.Message, OutputTokensHeader) {
					t.Fatalf("message %q names %q", e.Error.Message, goWord)
				}
			}
		}
	})
}
