package llm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"maps"
	"math"
	"slices"
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
// estimator priced too low (a PDF whose pages it miscounted, say), not that
// the tokenizer is that wrong.
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

	// Profile is the provider whose prices apply to the content parts that
	// are not text — images, audio and files (see the package doc, "Cost
	// estimates"): pass the client's Client.Profile. Default: none, which
	// prices each such part at the most any profile charges for it.
	Profile Profile
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
	if c.Profile != "" && !slices.Contains(Profiles(), c.Profile) {
		return fmt.Errorf("llm: estimator profile %q: want groq, openai, anthropic or none", c.Profile)
	}
	return nil
}

// Estimator prices a request before it is sent, as a governor.Cost: one
// request; input tokens counted with an offline tokenizer, plus the chat
// format's overhead and what the profile charges for images, audio and
// files, times a per-model correction; output tokens = the request's
// max_tokens. The correction is (learned ratio) × (1+Margin); the
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

	counts countCache // raw counts of requests priced recently
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
// reply overheads, the request's tool and format definitions, and its
// content parts that are not text (image_url, input_audio, file) at the
// prices of the configured profile. No margin or correction is applied.
// The sum saturates at math.MaxInt64.
//
// The count of a request priced recently is remembered (the last 256
// requests'), so pricing the same request again, as a backfill does when it
// sizes a batch and then calls it, does not tokenize its text again: the
// tokenizer is most of what pricing a call allocates.
func (e *Estimator) PromptTokens(req *ChatRequest) int64 {
	e.init()
	key := promptKey(e.cfg.Profile, req)
	if n, ok := e.counts.get(key); ok {
		return n
	}
	n := e.promptTokens(req)
	e.counts.put(key, n)
	return n
}

// promptTokens is PromptTokens without the cache.
func (e *Estimator) promptTokens(req *ChatRequest) int64 {
	model := req.Model
	pricer, media := newMediaPricer(e.cfg.Profile, model), int64(0)
	n := int64(e.cfg.TokensPerReply)
	for _, m := range req.Messages {
		media = addTokens(media, pricer.tokens(m.RawContent))
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
	// The text's count is bounded by its length; what the parts that are
	// not text cost is not.
	return addTokens(n, media)
}

// promptExtras are request fields the provider turns into prompt tokens.
var promptExtras = []string{"tools", "functions", "tool_choice", "response_format"}

// countCacheSize is how many requests' counts an Estimator remembers. A
// backfill prices each batch's request while it selects the batch and again
// when it calls it, with the other lanes' requests in between: 256 covers
// dozens of lanes at a few hundred bytes each.
const countCacheSize = 256

// countCache remembers the raw counts of the last countCacheSize requests,
// keyed by promptKey; the oldest is forgotten first. The zero value is
// empty and ready. It is safe for simultaneous use by multiple goroutines.
type countCache struct {
	mu     sync.Mutex
	counts map[[sha256.Size]byte]int64
	order  [countCacheSize][sha256.Size]byte // keys in the order they came; next is the oldest once full
	next   int
}

func (c *countCache) get(key [sha256.Size]byte) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.counts[key]
	return n, ok
}

func (c *countCache) put(key [sha256.Size]byte, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[[sha256.Size]byte]int64, countCacheSize)
	}
	if _, ok := c.counts[key]; ok {
		return // counted twice at once: the same count
	}
	if len(c.counts) == countCacheSize {
		delete(c.counts, c.order[c.next])
	}
	c.counts[key] = n
	c.order[c.next] = key
	c.next = (c.next + 1) % countCacheSize
}

// promptKey is a SHA-256 of everything promptTokens reads: the model's
// encoding and image price on profile p, each message's role, content (its
// parts as sent too) and extra fields, and the request's prompt-bearing
// fields, each written with its length so that no two requests that count
// differently write the same bytes. Fields that are not counted
// (max_tokens, temperature...) are left out, so a request that differs only
// in them shares its count.
func promptKey(p Profile, req *ChatRequest) [sha256.Size]byte {
	k := keyWriter{h: sha256.New(), buf: make([]byte, 0, 512)}
	k.string(Encoding(req.Model))
	k.string(imagePriceOf(p, req.Model).name)
	k.int(len(req.Messages))
	for _, m := range req.Messages {
		k.string(m.Role)
		k.string(m.Content)
		k.bytes(m.RawContent)
		k.int(len(m.Extra))
		if len(m.Extra) == 0 {
			continue // no keys to sort
		}
		for _, name := range slices.Sorted(maps.Keys(m.Extra)) {
			k.string(name)
			k.string(string(m.Extra[name]))
		}
	}
	for _, name := range promptExtras {
		v, ok := req.Extra[name]
		if !ok {
			k.int(0)
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			k.int(1) // not counted, as promptTokens does not
			continue
		}
		k.int(2)
		k.string(string(raw))
	}
	return k.sum()
}

// keyWriter feeds a hash through a small buffer, so that writing a long
// text does not copy it whole into a new byte slice first.
type keyWriter struct {
	h   hash.Hash
	buf []byte
}

func (k *keyWriter) int(n int) {
	k.buf = binary.AppendUvarint(k.buf, uint64(n))
	k.flush(false)
}

func (k *keyWriter) string(s string) {
	k.int(len(s))
	for len(s) > 0 {
		n := min(len(s), cap(k.buf)-len(k.buf))
		k.buf = append(k.buf, s[:n]...)
		s = s[n:]
		k.flush(false)
	}
}

// flush writes the buffer to the hash once it is full, or always when all
// is true.
// bytes writes b's length, then b itself straight to the hash: a
// message's parts may hold megabytes of images, not worth a copy.
func (k *keyWriter) bytes(b []byte) {
	k.int(len(b))
	k.flush(true)
	k.h.Write(b)
}

func (k *keyWriter) flush(all bool) {
	if all || len(k.buf) > cap(k.buf)-binary.MaxVarintLen64 {
		k.h.Write(k.buf)
		k.buf = k.buf[:0]
	}
}

func (k *keyWriter) sum() [sha256.Size]byte {
	k.flush(true)
	var key [sha256.Size]byte
	k.h.Sum(key[:0])
	return key
}

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
	switch Encoding(model) {
	case string(tokenizer.O200kBase):
		codec = o200k
	case cl100kName:
		if n, ok := countCl100k(text); ok {
			return n
		}
	}
	n, err := codec().Count(text)
	if err != nil {
		// Only invalid input can fail; a rough bytes/4 keeps the estimate
		// from being zero.
		return (len(text) + 3) / 4
	}
	return n
}
