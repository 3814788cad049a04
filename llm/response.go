package llm

import (
	"encoding/json"
	"net/http"

	"github.com/sluice-dev/sluice/governor"
)

// Usage is the token usage a provider reports for a call.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	// PromptTokensDetails says, where the provider reports it (OpenAI,
	// Groq), how many of the prompt's tokens were read from its cache,
	// which some providers price lower.
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails is the part of a usage that details the prompt's tokens.
type PromptTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// Governor returns the usage in the governor's terms, for settling a
// reservation: its prompt tokens as input, of which the cached ones (at
// most all of them) as Cached, and its completion tokens as output.
func (u Usage) Governor() governor.Cost {
	c := governor.Cost{Input: u.PromptTokens, Output: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		c.Cached = min(max(d.CachedTokens, 0), max(u.PromptTokens, 0))
	}
	return c
}

// Choice is one completion of a response.
type Choice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	FinishReason string  `json:"finish_reason"`
}

// ChatResponse is a finished chat completion.
type ChatResponse struct {
	ID      string   `json:"id"`
	Model   string   `json:"model"`
	Created int64    `json:"created"`
	Choices []Choice `json:"choices"`
	Usage   Usage    `json:"usage"`

	// Target names the provider key (sluice's name for it, never the
	// secret) the call ran on, and Cost what it cost there with the real
	// usage at that key's price, in billionths of the unit of money (0
	// without a price): a governed call sets both, and a durable step
	// records them with the response.
	Target string `json:"sluice_target,omitempty"`
	Cost   int64  `json:"sluice_cost,omitempty"`

	// Snapshot is what the response headers said about the key's limits.
	Snapshot governor.Snapshot `json:"-"`
	// Header is the response's header.
	Header http.Header `json:"-"`
	// Body is the response body as received.
	Body []byte `json:"-"`
}

// Text returns the first choice's content, or "" when there is none.
func (r *ChatResponse) Text() string {
	if len(r.Choices) == 0 {
		return ""
	}
	return r.Choices[0].Message.Content
}

// Model is one entry of GET /models.
type Model struct {
	ID      string `json:"id"`
	OwnedBy string `json:"owned_by"`
	Created int64  `json:"created"`
	// Raw is the entry as received; providers add their own fields
	// (context_window, display_name, ...).
	Raw json.RawMessage `json:"-"`
}
