package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// words are common English words each of which, with a leading space, is a
// single cl100k_base token, so n of them make a text of exactly n tokens.
var words = strings.Fields(`river flows past an old stone bridge and every morning light falls on quiet
water while birds sing above green fields of wheat near a small town where people walk slowly home
after long days in warm summer air under clear blue sky with friends who know each other well`)

// Words returns a deterministic text of n tokens (cl100k_base); seed picks
// where in the word list it starts, so responses differ.
func Words(n int64, seed uint64) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(int(n) * 7)
	start := int(seed % uint64(len(words)))
	for i := int64(0); i < n; i++ {
		if i == 0 {
			b.WriteString("The") // one token without a leading space, unlike some capitalised words
			continue
		}
		w := words[(start+int(i))%len(words)]
		b.WriteByte(' ')
		b.WriteString(w)
	}
	return b.String()
}

// completion is one successful answer, plain or streamed.
type completion struct {
	id, model, text, finish string
	created                 int64
	input                   int64
	broken                  bool // FaultBadJSON: cut the body short
}

type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// usage reports the true token count of the text, so a client can check
// the simulator's accounting against its own tokenizer.
func (c *completion) usage() usageJSON {
	n, _ := cl100k().Count(c.text)
	return usageJSON{c.input, int64(n), c.input + int64(n)}
}

func (c *completion) write(w http.ResponseWriter) {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Message      message `json:"message"`
		Logprobs     *int    `json:"logprobs"`
		FinishReason string  `json:"finish_reason"`
	}
	body, err := json.Marshal(struct {
		ID                string    `json:"id"`
		Object            string    `json:"object"`
		Created           int64     `json:"created"`
		Model             string    `json:"model"`
		Choices           []choice  `json:"choices"`
		Usage             usageJSON `json:"usage"`
		SystemFingerprint string    `json:"system_fingerprint"`
	}{c.id, "chat.completion", c.created, c.model,
		[]choice{{Message: message{"assistant", c.text}, FinishReason: c.finish}}, c.usage(), "fp_sluice_sim"})
	if err != nil {
		panic(err) // plain values: cannot fail
	}
	if c.broken {
		body = body[:len(body)/2]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

type chunkJSON struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usageJSON    `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int               `json:"index"`
	Delta        map[string]string `json:"delta"`
	FinishReason *string           `json:"finish_reason"`
}

// stream writes the completion as server-sent events: a role chunk, content
// chunks of a few words, a chunk with the finish reason, the usage chunk when
// asked for, and [DONE].
func (c *completion) stream(w http.ResponseWriter, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(ch chunkJSON) {
		b, err := json.Marshal(ch)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	chunk := func(delta map[string]string, finish *string) chunkJSON {
		return chunkJSON{c.id, "chat.completion.chunk", c.created, c.model, []chunkChoice{{Delta: delta, FinishReason: finish}}, nil}
	}
	send(chunk(map[string]string{"role": "assistant", "content": ""}, nil))
	if c.broken {
		fmt.Fprintf(w, "data: {\"id\":\"%s\",\"object\":\"chat.comp\n\n", c.id)
		return
	}
	fields := strings.SplitAfter(c.text, " ")
	for i := 0; i < len(fields); i += 4 {
		send(chunk(map[string]string{"content": strings.Join(fields[i:min(i+4, len(fields))], "")}, nil))
		if flusher != nil {
			flusher.Flush()
		}
	}
	send(chunk(map[string]string{}, &c.finish))
	if includeUsage {
		u := c.usage()
		send(chunkJSON{c.id, "chat.completion.chunk", c.created, c.model, []chunkChoice{}, &u})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
