package llm

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"

	"github.com/sluice-dev/sluice/governor"
)

// Token overheads of the chat format, from OpenAI's cookbook ("How to count
// tokens with tiktoken"): every message is wrapped in about 3 tokens of
// markup, a message with a name costs 1 more, and the reply is primed with
// 3. Other providers' templates differ by a few tokens; the learned
// correction absorbs that.
const (
	DefaultTokensPerMessage = 3
	DefaultTokensPerReply   = 3
	tokensPerName           = 1
)

// maxOverhead bounds the configured overheads: real templates add a few
// tokens a message, and a bounded overhead keeps PromptTokens' sum far from
// wrapping.
const maxOverhead = 1000

// DefaultMargin is the fraction added to every input estimate unless
// EstimatorConfig.Margin says otherwise.
const DefaultMargin = 0.05

// DefaultDecay is how fast a learned correction relaxes per observation
// unless EstimatorConfig.Decay says otherwise.
const DefaultDecay = 0.01

// maxRatio bounds what one observation can teach: a provider count more than
// this many times the estimate means the request carried something the
// estimator cannot see (images, say), not that the tokenizer is that wrong.
const maxRatio = 8

// EstimatorConfig configures an Estimator. The zero value uses every default.
type EstimatorConfig struct {
	// Margin is the fraction added on top of every input estimate, after
	// the learned correction, so the factor applied is never below
	// 1+Margin. Default: DefaultMargin (5 %). Must not be negative.
	Margin float64

	// TokensPerMessage is the chat markup counted per message. Default:
	// DefaultTokensPerMessage (3). At most 1000.
	TokensPerMessage int

	// TokensPerReply is the priming of the reply, counted once. Default:
	// DefaultTokensPerReply (3). At most 1000.
	TokensPerReply int

	// Decay is the fraction by which a learned ratio relaxes toward 1 at
	// every observation, so one odd request does not inflate estimates
	// forever. Default: DefaultDecay (1 %). Must be in [0, 1).
	Decay float64
}

func (c EstimatorConfig) withDefaults() EstimatorConfig {
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.TokensPerMessage == 0 {
		c.TokensPerMessage = DefaultTokensPerMessage
	}
	if c.TokensPerReply == 0 {
		c.TokensPerReply = DefaultTokensPerReply
	}
	if c.Decay == 0 {
		c.Decay = DefaultDecay
	}
	return c
}

func (c EstimatorConfig) validate() error {
	if c.Margin < 0 || math.IsNaN(c.Margin) || math.IsInf(c.Margin, 0) {
		return fmt.Errorf("llm: estimator margin %v: want a fraction ≥ 0", c.Margin)
	}
	if c.TokensPerMessage < 0 || c.TokensPerReply < 0 || c.TokensPerMessage > maxOverhead || c.TokensPerReply > maxOverhead {
		return fmt.Errorf("llm: estimator token overheads must be between 0 and %d", maxOverhead)
	}
	if c.Decay < 0 || c.Decay >= 1 || math.IsNaN(c.Decay) {
		return fmt.Errorf("llm: estimator decay %v: want a fraction in [0, 1)", c.Decay)
	}
	return nil
}

// Estimator prices a request before it is sent, as a governor.Cost: one
// request; input tokens counted with an offline tokenizer, plus the chat
// format's overhead, times a per-model correction; output tokens = the
// request's max_tokens. The correction is (learned ratio) × (1+Margin); the
// ratio starts at 1 and is learned from the prompt_tokens providers report
// (Observe), so estimates cover the provider's count with high probability
// even when its tokenizer is not OpenAI's.
//
// The zero value is ready to use with the defaults. An Estimator is safe for
// simultaneous use by multiple goroutines.
type Estimator struct {
	cfg EstimatorConfig // zero until first use when the zero value is used

	mu     sync.Mutex
	once   sync.Once
	factor map[string]float64 // learned ratio provider count / raw estimate, per model; absent: none yet
}

// NewEstimator checks cfg and returns an Estimator.
func NewEstimator(cfg EstimatorConfig) (*Estimator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Estimator{cfg: cfg}
	e.init()
	return e, nil
}

func (e *Estimator) init() {
	e.once.Do(func() {
		e.cfg = e.cfg.withDefaults()
		e.factor = make(map[string]float64)
	})
}

// Cost returns the cost of sending req. Output is req.MaxTokens (times n
// when the request asks for several choices): apply the client's defaults
// first (Client.ApplyDefaults) so it is the max_tokens really sent. Both
// parts saturate at math.MaxInt64 instead of wrapping, so a request whose
// numbers were never bounded (ChatRequest.Validate bounds a client's) costs
// too much for any governor, never a negative amount.
func (e *Estimator) Cost(req *ChatRequest) governor.Cost {
	raw := e.PromptTokens(req)
	f := e.Factor(req.Model)
	return governor.Cost{
		Requests: 1,
		Input:    ceilTokens(float64(raw) * f),
		Output:   outputTokens(int64(req.MaxTokens), choices(req)),
	}
}

// ceilTokens rounds an estimate up to whole tokens, held at math.MaxInt64
// (converting a larger float to int64 is undefined); NaN, from no tokens
// times an infinite factor, is 0.
func ceilTokens(f float64) int64 {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case !(f > 0):
		return 0
	}
	return int64(math.Ceil(f))
}

// outputTokens is max_tokens × n (n ≥ 1), held at math.MaxInt64; an unset
// or negative max_tokens reserves nothing.
func outputTokens(maxTokens, n int64) int64 {
	if maxTokens <= 0 {
		return 0
	}
	if maxTokens > math.MaxInt64/n {
		return math.MaxInt64
	}
	return maxTokens * n
}

// Factor returns the correction Cost applies to a model's raw count: the
// learned ratio (at least 1) times 1+Margin. The margin sits on top of
// what was learned because the learned ratio is a recent maximum, which
// the next call exceeds now and then; the margin covers those.
func (e *Estimator) Factor(model string) float64 {
	e.init()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.factorLocked(model)
}

func (e *Estimator) factorLocked(model string) float64 {
	return max(1, e.factor[model]) * (1 + e.cfg.Margin)
}

// Observe teaches the estimator from a finished call: estimated is the
// Input of the Cost that Cost returned for the request, actual the
// prompt_tokens the provider reported. The model's learned ratio of the
// provider's count to the raw estimate becomes the largest ratio seen
// recently: older ratios relax toward 1 by Decay per observation, so the
// correction follows a provider that changes, and a single odd call is
// bounded by a factor of 8. The factor applied never goes below 1+Margin.
// Non-positive values are ignored.
func (e *Estimator) Observe(model string, estimated, actual int64) {
	if estimated <= 0 || actual <= 0 {
		return
	}
	e.init()
	e.mu.Lock()
	defer e.mu.Unlock()
	// Undo the factor the estimate carried to get the tokenizer's own
	// ratio. If another goroutine changed the factor in between, the
	// ratio is off by that change, which the next observations correct.
	ratio := min(e.factorLocked(model)*float64(actual)/float64(estimated), maxRatio)
	learned := e.factor[model]
	if learned > 1 {
		learned = 1 + (learned-1)*(1-e.cfg.Decay)
	}
	e.factor[model] = max(learned, ratio)
}

// PromptTokens returns the raw input estimate of req: tokens of every
// message's text and extra fields (tool calls...), the per-message and
// reply overheads, and the request's tool and format definitions. No
// margin or correction is applied.
func (e *Estimator) PromptTokens(req *ChatRequest) int64 {
	e.init()
	model := req.Model
	n := int64(e.cfg.TokensPerReply)
	for _, m := range req.Messages {
		n += int64(e.cfg.TokensPerMessage)
		n += int64(CountTokens(model, m.Role))
		n += int64(CountTokens(model, m.Content))
		for k, v := range m.Extra {
			if k == "name" {
				n += tokensPerName
				var s string
				if json.Unmarshal(v, &s) == nil {
					n += int64(CountTokens(model, s))
					continue
				}
			}
			n += int64(CountTokens(model, string(v)))
		}
	}
	for _, k := range promptExtras {
		if v, ok := req.Extra[k]; ok {
			if raw, err := json.Marshal(v); err == nil {
				n += int64(CountTokens(model, string(raw)))
			}
		}
	}
	return n
}

// promptExtras are request fields the provider turns into prompt tokens.
var promptExtras = []string{"tools", "functions", "tool_choice", "response_format"}

// choices returns the request's n (number of choices), for which output is
// reserved each, held between 1 and MaxChoices: a request with a larger n
// (ChatRequest.Validate refuses it) is priced at the most a provider serves.
func choices(req *ChatRequest) int64 {
	v, ok := req.Extra["n"]
	if !ok {
		return 1
	}
	var n float64
	switch x := v.(type) {
	case json.RawMessage:
		if json.Unmarshal(x, &n) != nil {
			return 1
		}
	case int:
		n = float64(x)
	case int64:
		n = float64(x)
	case float64:
		n = x
	default:
		return 1
	}
	if !(n >= 1) { // NaN too
		return 1
	}
	return int64(min(n, MaxChoices))
}

var (
	o200k  = sync.OnceValue(func() tokenizer.Codec { return mustCodec(tokenizer.O200kBase) })
	cl100k = sync.OnceValue(func() tokenizer.Codec { return mustCodec(tokenizer.Cl100kBase) })
)

func mustCodec(enc tokenizer.Encoding) tokenizer.Codec {
	c, err := tokenizer.Get(enc)
	if err != nil {
		panic("llm: tokenizer " + string(enc) + ": " + err.Error())
	}
	return c
}

// o200kPrefixes are the model families tokenized with o200k_base: GPT-4o,
// GPT-4.1, GPT-4.5, GPT-5, gpt-oss and the o-series reasoning models.
var o200kPrefixes = []string{"gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "o1", "o3", "o4"}

// Encoding returns the name of the tokenizer encoding used for model:
// "o200k_base" for OpenAI's newer families (matched after any "vendor/"
// prefix, as in "openai/gpt-oss-20b"), "cl100k_base" for everything else,
// which is close enough for most other models' tokenizers for the learned
// correction to cover the rest.
func Encoding(model string) string {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range o200kPrefixes {
		if strings.HasPrefix(m, p) {
			rest := m[len(p):]
			if rest == "" || rest[0] == '-' || rest[0] == '.' || p[0] != 'o' {
				return string(tokenizer.O200kBase)
			}
		}
	}
	return string(tokenizer.Cl100kBase)
}

// CountTokens returns the number of tokens in text with model's encoding
// (see Encoding). The vocabularies are compiled into the binary; nothing is
// downloaded.
func CountTokens(model, text string) int {
	if text == "" {
		return 0
	}
	codec := cl100k
	if Encoding(model) == string(tokenizer.O200kBase) {
		codec = o200k
	}
	n, err := codec().Count(text)
	if err != nil {
		// Only invalid input can fail; a rough bytes/4 keeps the estimate
		// from being zero.
		return (len(text) + 3) / 4
	}
	return n
}
