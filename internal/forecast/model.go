package forecast

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
)

// ModelConfig is the provider a Model simulates: the provider section of a
// scenario plus the seed and the model name its messages use.
type ModelConfig struct {
	// Profile is the status codes, headers and error bodies of the
	// responses: one of llm.Profiles. Default llm.OpenAI.
	Profile llm.Profile
	// FixedWindows: each limit counts per fixed window, not a rolling one
	// (the default).
	FixedWindows bool
	// SettleOutput: an admission charge's output part is corrected at
	// Finish; by default the admission charge stands.
	SettleOutput bool
	// Latency is the mean time a response takes; each response takes it
	// ±50 % uniformly. Zero answers at once.
	Latency time.Duration
	// DefaultMaxTokens is reserved for a request that sets no max_tokens.
	// Default 1000; at most MaxOutputTokens.
	DefaultMaxTokens int64
	// DefaultMaxTokensMin, when set, makes the reservation of a request
	// without max_tokens vary: a seeded draw, uniform between it and
	// DefaultMaxTokens, as a provider's own guess of a request's output
	// does (Groq asked 1,038 to 2,048 output tokens of DevPick's requests
	// without max_tokens). Default 0: always DefaultMaxTokens.
	DefaultMaxTokensMin int64
	// MaxOutputTokens is the simulated model's max output tokens: an HTTP
	// server answers a request asking more max_tokens with a 400, and no
	// response is longer. Default MaxOutputTokens (32,768); at most
	// MaxOutputTokensCap.
	MaxOutputTokens int64
	// Faults are the fractions of admitted requests that fail.
	Faults Faults
	// Limits holds the allowance of each limit; zero means unlimited.
	Limits governor.Limits
	// Seed seeds every random draw (faults, latency): the same seed and the
	// same sequence of calls give the same sequence of responses.
	Seed int64
	// Model names the model in error messages. Default "sim-model".
	Model string
	// Wire makes Submit build each Response's Header and Body, as an HTTP
	// server needs, and a replay, whose policies read the answers as their
	// clients would. Off, Submit only decides, without allocating.
	Wire bool
}

// ModelConfig returns the ModelConfig of a scenario's provider section and
// seed.
func (p *Provider) ModelConfig(seed int64) ModelConfig {
	return ModelConfig{
		Profile: p.Profile, FixedWindows: p.FixedWindows, SettleOutput: p.SettleOutput, Latency: p.Latency,
		DefaultMaxTokens: p.DefaultMaxTokens, Faults: p.Faults, Limits: p.Limits, Seed: seed,
	}
}

// MaxOutputTokensCap bounds ModelConfig.MaxOutputTokens, so that no response the
// server writes is longer than about 7 MB of text, whatever it is configured.
const MaxOutputTokensCap = 1 << 20

func (c ModelConfig) withDefaults() ModelConfig {
	if c.Profile == "" {
		c.Profile = llm.OpenAI
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = DefaultMaxTokens
	}
	if c.MaxOutputTokens == 0 {
		c.MaxOutputTokens = MaxOutputTokens
	}
	if c.Model == "" {
		c.Model = "sim-model"
	}
	return c
}

func (c ModelConfig) validate() error {
	p := Provider{Profile: c.Profile, FixedWindows: c.FixedWindows, SettleOutput: c.SettleOutput, Latency: c.Latency,
		DefaultMaxTokens: c.DefaultMaxTokens, Faults: c.Faults, Limits: c.Limits}
	if err := p.Validate(); err != nil {
		return err
	}
	if c.MaxOutputTokens < 1 || c.MaxOutputTokens > MaxOutputTokensCap {
		return fmt.Errorf("max output tokens: %d is not between 1 and %d", c.MaxOutputTokens, MaxOutputTokensCap)
	}
	if c.DefaultMaxTokensMin < 0 || c.DefaultMaxTokensMin > c.DefaultMaxTokens {
		return fmt.Errorf("default max tokens min: %d is not between 0 and the default max tokens, %d", c.DefaultMaxTokensMin, c.DefaultMaxTokens)
	}
	if c.DefaultMaxTokens > c.MaxOutputTokens {
		return fmt.Errorf("default max tokens: %d is more than the model's max output tokens, %d", c.DefaultMaxTokens, c.MaxOutputTokens)
	}
	return nil
}

// Fault is how an admitted request fails.
type Fault uint8

// The faults a provider shows. A faulted request was admitted and charged.
const (
	NoFault      Fault = iota
	Fault5xx           // a 500, 503 or (Anthropic) 529 with an error body
	FaultTimeout       // no response at all (Status 0)
	FaultReset         // the connection is reset (Status 0)
	FaultBadJSON       // a 200 whose body is cut short

	NumFaults = 5 // how many Fault values there are, NoFault included
)

var faultNames = [NumFaults]string{"none", "5xx", "timeout", "reset", "bad_json"}

func (f Fault) String() string {
	if int(f) < NumFaults {
		return faultNames[f]
	}
	return fmt.Sprintf("fault(%d)", uint8(f))
}

// Request is one call as the provider counts it.
type Request struct {
	Flow      string // for stats only
	Input     int64  // input tokens, as the provider counts them
	MaxTokens int64  // per choice; 0: the request set none, DefaultMaxTokens is reserved
	N         int64  // choices the response has (the request's n); 0 means 1
	Output    int64  // real output tokens of all the choices together (capped at N × the max)
	Model     string // names the model in error messages; "" means ModelConfig.Model
}

// Response is the provider's decision on one Request.
type Response struct {
	Status     int            // 200, 429, 413, 500, 503, 529; 0 when no response comes (timeout, reset)
	Fault      Fault          // how an admitted request failed, NoFault otherwise
	Limit      governor.Limit // the limit a rate-limit or too-large rejection names
	Rejected   bool           // a rate-limit or too-large rejection (not a fault)
	TooLarge   bool           // the request can never fit Limit, however long it waits
	RetryAfter time.Duration  // what the provider tells the client to wait, whole seconds (0 if nothing)
	Charged    governor.Cost  // charged at admission (zero when rejected)
	Output     int64          // real output tokens (when Status is 200 and Fault is NoFault)
	Latency    time.Duration  // time until the response ends (0 for rejections, which come at once)
	Header     http.Header    // rate-limit headers of the profile, and retry-after on 429 (ModelConfig.Wire only)
	Body       []byte         // the profile's error body; nil when OK (ModelConfig.Wire only)

	id       uint64 // request number, from 1
	admitted bool
	seqMin   uint64 // sequence numbers in the minute and day ledgers
	seqDay   uint64
	final    int64  // output the charge settles to
	model    string // the request's model, for messages
	flow     *FlowStats
}

// ID numbers the requests a Model has seen, from 1.
func (r *Response) ID() uint64 { return r.id }

// Model is a provider with exact limit semantics. Its methods take the
// current time, so it runs on a virtual clock in a replay and on the wall
// clock behind the HTTP server. Time passed to Submit must not go backwards;
// an earlier time is taken as the latest one seen.
//
// A Model is safe for simultaneous use by multiple goroutines.
type Model struct {
	cfg ModelConfig

	mu       sync.Mutex
	rng      *rand.Rand
	minute   ledger
	day      ledger
	useMin   bool
	useDay   bool
	last     int64
	requests uint64
	stats    stats
}

// NewModel returns a Model of the provider cfg describes.
func NewModel(cfg ModelConfig) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("simulated provider: %w", err)
	}
	fixed := cfg.FixedWindows
	m := &Model{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(uint64(cfg.Seed), 0x51ce_5eed_0000_0001)),
		minute: newLedger(time.Minute, fixed),
		day:    newLedger(24*time.Hour, fixed),
		last:   math.MinInt64,
		stats:  newStats(),
	}
	for l := range governor.NumLimits {
		if cfg.Limits[l] == 0 {
			continue
		}
		if l.Period() == time.Minute {
			m.useMin = true
		} else {
			m.useDay = true
		}
	}
	return m, nil
}

// Config returns the configuration with defaults filled in.
func (m *Model) Config() ModelConfig { return m.cfg }

// ledger returns the ledger that counts limit l.
func (m *Model) ledger(l governor.Limit) *ledger {
	if l.Period() == time.Minute {
		return &m.minute
	}
	return &m.day
}

// Submit decides on request r arriving at now.
//
// The charge is {1 request, Input, N × max}, max being MaxTokens or else
// DefaultMaxTokens: the output of every choice is reserved, as OpenAI
// reserves max_tokens for each of n choices. A charge larger than a limit's whole allowance is refused
// as TooLarge; otherwise a charge that would take any limit over its
// allowance in the current window is refused naming the first such limit in
// the order rpm, rpd, tpm, tpd, itpm, otpm, with the time until that limit has
// room for it. Admission is all-or-nothing: a refused request charges nothing.
// An admitted request is charged on every limit and may still fail with a
// fault drawn from the seeded generator.
func (m *Model) Submit(now time.Time, r Request) Response {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := now.UnixNano()
	if t < m.last {
		t = m.last
	}
	m.last = t
	if m.useMin {
		m.minute.expire(t)
	}
	if m.useDay {
		m.day.expire(t)
	}
	m.requests++
	fs := m.stats.flow(r.Flow)
	m.stats.requests++
	fs.Requests++

	max := r.MaxTokens
	if max <= 0 {
		max = m.cfg.DefaultMaxTokens
		if lo := m.cfg.DefaultMaxTokensMin; lo > 0 && lo < max {
			max = lo + m.rng.Int64N(max-lo+1)
		}
	}
	max = reserveOutput(max, r.N)
	c := governor.Cost{Requests: 1, Input: nonNeg(r.Input), Output: max}
	resp := Response{id: m.requests, flow: fs, model: r.Model}

	for l := range governor.NumLimits {
		if lim := m.cfg.Limits[l]; lim > 0 && c.On(l) > lim {
			m.reject(t, &resp, l, c, true)
			return resp
		}
	}
	for l := range governor.NumLimits {
		if lim := m.cfg.Limits[l]; lim > 0 && m.ledger(l).sum.On(l)+c.On(l) > lim {
			m.reject(t, &resp, l, c, false)
			return resp
		}
	}

	resp.admitted = true
	resp.Charged = c
	if m.useMin {
		resp.seqMin = m.minute.add(t, c)
	}
	if m.useDay {
		resp.seqDay = m.day.add(t, c)
	}
	m.raisePeaks()
	out := min(nonNeg(r.Output), max)
	resp.Status, resp.final = http.StatusOK, out
	if f := m.cfg.Faults; f.Sum() > 0 {
		u := m.rng.Float64()
		switch {
		case u < f.Error5xx:
			resp.Fault, resp.Status, resp.final = Fault5xx, http.StatusInternalServerError, 0
			if u >= f.Error5xx/2 { // the upper half of the band is the provider's overload
				resp.Status = http.StatusServiceUnavailable
				if m.cfg.Profile == "anthropic" {
					resp.Status = 529
				}
			}
		case u < f.Error5xx+f.Timeout:
			resp.Fault, resp.Status = FaultTimeout, 0
		case u < f.Error5xx+f.Timeout+f.Reset:
			resp.Fault, resp.Status = FaultReset, 0
		case u < f.Sum():
			resp.Fault = FaultBadJSON
		}
	}
	if resp.Fault == NoFault {
		resp.Output = out
	}
	if m.cfg.Latency > 0 {
		resp.Latency = m.cfg.Latency/2 + time.Duration(m.rng.Float64()*float64(m.cfg.Latency))
	}
	m.stats.admit(&resp)
	if m.cfg.Wire {
		m.wire(t, &resp, c, 0)
	}
	return resp
}

// reject fills resp as a refusal naming limit l.
func (m *Model) reject(t int64, resp *Response, l governor.Limit, c governor.Cost, tooLarge bool) {
	resp.Rejected, resp.TooLarge, resp.Limit = true, tooLarge, l
	resp.Status = http.StatusTooManyRequests
	var exact time.Duration // the precise wait the message shows
	switch {
	case tooLarge && m.cfg.Profile == "groq" && l == governor.OTPM:
		// Groq answers an output request larger than OTPM with a 429 and a
		// 15-minute retry-after, although waiting never helps (seed 000).
		exact = 900 * time.Second
	case tooLarge && m.cfg.Profile != "openai":
		resp.Status = http.StatusRequestEntityTooLarge
	case !tooLarge:
		lg := m.ledger(l)
		exact = time.Duration(lg.freeAt(t, l, c.On(l), m.cfg.Limits[l]) - t)
	}
	resp.RetryAfter = ceilTo(exact, time.Second)
	m.stats.reject(resp)
	if m.cfg.Wire {
		m.wire(t, resp, c, exact)
	}
}

// Finish ends the response r at now and returns the final charge of its
// request. Under settle accounting the output part of the charge (what counts
// on tpm, tpd and otpm) is corrected from the reserved max to the output the
// provider really produced: the real output for a 200 (whole or, with
// FaultBadJSON, cut short), a timeout or a reset, none for a 5xx. The charge
// keeps its admission time, so it still ages out one period after admission.
// Under reserve accounting the admission charge stands. A rejected response
// charged nothing and Finish returns zero. Call Finish once per response.
func (m *Model) Finish(now time.Time, r Response) governor.Cost {
	if !r.admitted {
		return governor.Cost{}
	}
	if !m.cfg.SettleOutput {
		return r.Charged
	}
	final := r.Charged
	final.Output = r.final
	m.mu.Lock()
	defer m.mu.Unlock()
	again := false
	if m.useMin && m.minute.settle(r.seqMin, final) {
		again = true
	}
	if m.useDay && m.day.settle(r.seqDay, final) {
		again = true
	}
	if !again {
		d := sub(final, r.Charged)
		m.stats.charged = add(m.stats.charged, d)
		if r.flow != nil {
			r.flow.Charged = add(r.flow.Charged, d)
		}
	}
	return final
}

// reserveOutput is the output reserved for n choices of at most max tokens
// each (n < 1 counts as 1), saturating rather than overflowing.
func reserveOutput(max, n int64) int64 {
	if n <= 1 {
		return max
	}
	if max > math.MaxInt64/n {
		return math.MaxInt64
	}
	return max * n
}

func nonNeg(x int64) int64 {
	if x < 0 {
		return 0
	}
	return x
}

// ceilTo rounds d up to a whole multiple of unit.
func ceilTo(d, unit time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + unit - 1) / unit * unit
}
