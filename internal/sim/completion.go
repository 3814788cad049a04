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

// fingerprint is the system_fingerprint of every answer and stream chunk.
const fingerprint = "fp_sluice_sim"

// completion is one successful answer, plain or streamed.
type completion struct {
	id, model string
	created   int64
	input     int64
	choices   []choiceText // one per n
	broken    bool         // forecast.FaultBadJSON: cut the body short
}

// choiceText is one choice of an answer.
type choiceText struct {
	text, finish string
}

type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// usage reports the true token count of the texts of all the choices, so a
// client can check the simulator's accounting against its own tokenizer.
func (c *completion) usage() usageJSON {
	var out int64
	for _, ch := range c.choices {
		n, _ := cl100k().Count(ch.text)
		out += int64(n)
	}
	return usageJSON{c.input, out, c.input + out}
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
	choices := make([]choice, len(c.choices))
	for i, ch := range c.choices {
		choices[i] = choice{Index: i, Message: message{"assistant", ch.text}, FinishReason: ch.finish}
	}
	body, err := json.Marshal(struct {
		ID                string    `json:"id"`
		Object            string    `json:"object"`
		Created           int64     `json:"created"`
		Model             string    `json:"model"`
		Choices           []choice  `json:"choices"`
		Usage             usageJSON `json:"usage"`
		SystemFingerprint string    `json:"system_fingerprint"`
	}{c.id, "chat.completion", c.created, c.model, choices, c.usage(), fingerprint})
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
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	// Usage is left out unless the request asked for usage; then it is
	// null in every chunk but the last, which holds the usage.
	Usage json.RawMessage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int               `json:"index"`
	Delta        map[string]string `json:"delta"`
	Logprobs     *int              `json:"logprobs"`
	FinishReason *string           `json:"finish_reason"`
}

// stream writes the completion as server-sent events: for each choice a role
// chunk; content chunks of a few words, the choices taking turns (each chunk
// names its choice's index); for each choice a chunk with its finish reason;
// the usage chunk (no choices) when asked for; and [DONE]. With usage asked
// for, every chunk before the usage chunk carries "usage": null, as OpenAI's
// do.
func (c *completion) stream(w http.ResponseWriter, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var noUsage json.RawMessage
	if includeUsage {
		noUsage = json.RawMessage("null")
	}
	send := func(ch chunkJSON) {
		b, err := json.Marshal(ch)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	chunk := func(index int, delta map[string]string, finish *string) chunkJSON {
		return chunkJSON{c.id, "chat.completion.chunk", c.created, c.model, fingerprint,
			[]chunkChoice{{Index: index, Delta: delta, FinishReason: finish}}, noUsage}
	}
	for i := range c.choices {
		send(chunk(i, map[string]string{"role": "assistant", "content": ""}, nil))
	}
	if c.broken {
		fmt.Fprintf(w, "data: {\"id\":\"%s\",\"object\":\"chat.comp\n\n", c.id)
		return
	}
	fields := make([][]string, len(c.choices))
	for i, ch := range c.choices {
		fields[i] = strings.SplitAfter(ch.text, " ")
	}
	for at, more := 0, true; more; at += 4 {
		more = false
		for i, f := range fields {
			if at >= len(f) {
				continue
			}
			send(chunk(i, map[string]string{"content": strings.Join(f[at:min(at+4, len(f))], "")}, nil))
			more = true
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	for i := range c.choices {
		send(chunk(i, map[string]string{}, &c.choices[i].finish))
	}
	if includeUsage {
		u, err := json.Marshal(c.usage())
		if err != nil {
			panic(err)
		}
		send(chunkJSON{c.id, "chat.completion.chunk", c.created, c.model, fingerprint, []chunkChoice{}, u})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
