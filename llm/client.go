package llm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/jsonwalk"
	"github.com/sluice-dev/sluice/internal/redact"
	"golang.org/x/sync/semaphore"
)

// Config configures a Client. The zero value is usable: it talks to
// OpenAI with no key, which suits a local OpenAI-compatible server only
// after BaseURL is set.
type Config struct {
	// BaseURL is the API root; requests go to BaseURL+"/chat/completions"
	// and BaseURL+"/models". Default: the profile's public endpoint
	// ("https://api.openai.com/v1", "https://api.groq.com/openai/v1",
	// "https://api.anthropic.com/v1").
	BaseURL string

	// APIKey is sent as "Authorization: Bearer APIKEY". It never appears
	// in Config's String, nor in any error the client returns. Default: none
	// (no Authorization header).
	APIKey string

	// Profile says how to read the provider's rate-limit headers and error
	// bodies. Default: OpenAI.
	Profile Profile

	// HTTPClient sends the requests. Timeouts bound every call whatever the
	// client, on top of any timeout the client has of its own. Default: a
	// client with no timeouts of its own (Timeouts is the one place they
	// are set) that keeps up to IdleConns idle connections per host.
	//
	// Redirects are never followed, whatever the client: the Client uses a
	// copy of it whose CheckRedirect returns http.ErrUseLastResponse, so
	// the key goes to BaseURL and nowhere else (net/http would send it on
	// to another port or scheme of the same host), and a 3xx answer is an
	// error (a *StatusError that is not retryable) naming the Location.
	// The copy shares the client's Transport, Jar and Timeout.
	HTTPClient *http.Client

	// IdleConns is how many idle connections to the provider the default
	// HTTPClient keeps, for calls made at once. Default 16.
	IdleConns int

	// Timeouts bounds the phases of every call: Connect (default 10 s),
	// FirstByte (2 min) and Total (10 min). A zero field means its default,
	// a negative one no deadline; WithTimeouts overrides them for the calls
	// made with a context.
	Timeouts Timeouts

	// DefaultMaxTokens is the max_tokens given to a request that sets none
	// and whose model has no entry in ModelMaxTokens. Default: 0, no
	// default: such a request fails with ErrNoMaxTokens before it is sent.
	DefaultMaxTokens int

	// ModelMaxTokens gives max_tokens per model name for requests that set
	// none; it wins over DefaultMaxTokens. Default: empty.
	ModelMaxTokens map[string]int

	// Header holds extra headers sent with every request. It may not set
	// Authorization when APIKey is set. Default: none.
	Header http.Header

	// Now is the clock used to turn absolute reset times (Anthropic's
	// headers, HTTP-date retry-after) into waits. Default: time.Now.
	Now func() time.Time

	// MaxReadBytes bounds the bytes of the provider's answers the client
	// holds while it reads them, over all its calls at once: each plain
	// answer's body (at most 64 MiB; twice its size for a moment when its
	// length was not announced) and each stream's event being read (at
	// most 8 MiB of data). An answer that would take the total past it
	// fails at once, never waits, with a *TransportError (kind Other) that
	// names the bound; others go on. Whatever the provider sends, the
	// answers being read then take at most this much memory. What a caller
	// keeps of an answer once it is read is the caller's. Default 256 MiB
	// (DefaultMaxReadBytes); at least 64 KiB.
	MaxReadBytes int64

	// Logger receives a line for each kind of oddity in a provider's answer
	// that the client reads past rather than fail the call — a usage with
	// a count that is not a whole number from 0 to 2^63−1 is read as not
	// reported — with the field, what was wrong and the value (scrubbed
	// and bounded), at most once per kind every governor.NoticeEvery.
	// Default: slog.Default().
	Logger *slog.Logger
}

// String describes the configuration with the key redacted, so a Config
// can be logged.
func (c Config) String() string {
	key, base := "none", NewScrubber(c.APIKey).String(c.BaseURL)
	if c.APIKey != "" {
		key = redact.KeyMark
	}
	return fmt.Sprintf("llm.Config{BaseURL: %q, Profile: %q, APIKey: %s, DefaultMaxTokens: %d, ModelMaxTokens: %v}",
		base, c.Profile, key, c.DefaultMaxTokens, c.ModelMaxTokens)
}

// GoString redacts the key from %#v as well.
func (c Config) GoString() string { return c.String() }

var defaultBaseURLs = map[Profile]string{
	OpenAI:    "https://api.openai.com/v1",
	Groq:      "https://api.groq.com/openai/v1",
	Anthropic: "https://api.anthropic.com/v1",
}

func (c Config) withDefaults() Config {
	if p, err := ParseProfile(string(c.Profile)); err == nil {
		c.Profile = p
	}
	c.BaseURL = strings.TrimRight(cmp.Or(c.BaseURL, defaultBaseURLs[c.Profile]), "/")
	if c.HTTPClient == nil {
		c.HTTPClient = defaultHTTPClient(cmp.Or(c.IdleConns, 16))
	} else {
		hc := *c.HTTPClient // the caller's own is left as it is
		c.HTTPClient = &hc
	}
	c.HTTPClient.CheckRedirect = noRedirects
	c.Timeouts = c.Timeouts.or(defaultTimeouts)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxReadBytes == 0 {
		c.MaxReadBytes = DefaultMaxReadBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if _, err := ParseProfile(string(c.Profile)); err != nil {
		return err
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("llm: BaseURL %q is not an http(s) URL", c.BaseURL)
	}
	if u.User != nil {
		return errors.New("llm: BaseURL must not carry credentials; use APIKey")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("llm: BaseURL %q must not have a query or fragment", c.BaseURL)
	}
	if err := c.Timeouts.validate(); err != nil {
		return err
	}
	if c.MaxReadBytes < minReadBytes {
		return fmt.Errorf("llm: MaxReadBytes %d is below the least of %d", c.MaxReadBytes, minReadBytes)
	}
	if c.DefaultMaxTokens < 0 {
		return fmt.Errorf("llm: DefaultMaxTokens %d is negative", c.DefaultMaxTokens)
	}
	for m, n := range c.ModelMaxTokens {
		if n <= 0 {
			return fmt.Errorf("llm: ModelMaxTokens[%q] = %d: want a positive number", m, n)
		}
	}
	if c.APIKey != "" && c.Header.Get("Authorization") != "" {
		return errors.New("llm: Header sets Authorization and APIKey is set: use one")
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return errors.New("llm: APIKey contains a line break")
	}
	return nil
}

// noRedirects makes an http.Client return a redirect as the answer
// (see Config.HTTPClient).
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func defaultHTTPClient(idle int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Config.Timeouts bounds connecting and waiting for the answer; a
	// deadline of the transport's own would cut a longer one set there.
	t.DialContext = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 0
	t.MaxIdleConnsPerHost = idle
	return &http.Client{Transport: t}
}

// Client calls an OpenAI-compatible chat completions API. It never retries:
// every failure is returned classified (see Retryable, RetryAfter, LimitOf)
// so the caller makes the one retry decision. What the provider sends is
// scrubbed of the key before the client returns it, and the text of its
// errors cleaned and bounded (see Scrubber). A Client is safe for
// simultaneous use by multiple goroutines.
type Client struct {
	cfg   Config
	scrub *Scrubber           // of cfg.APIKey; nil without one
	auth  string              // the Authorization header's value; empty without a key
	notes notices             // the oddities of answers logged, and when
	reads *semaphore.Weighted // of cfg.MaxReadBytes: the bytes of answers being read
}

// NewClient checks cfg, fills its defaults and returns a Client.
func NewClient(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.ModelMaxTokens != nil {
		m := make(map[string]int, len(cfg.ModelMaxTokens))
		for k, v := range cfg.ModelMaxTokens {
			m[k] = v
		}
		cfg.ModelMaxTokens = m
	}
	cfg.Header = cfg.Header.Clone()
	c := &Client{cfg: cfg, scrub: NewScrubber(cfg.APIKey), reads: semaphore.NewWeighted(cfg.MaxReadBytes)}
	if cfg.APIKey != "" {
		c.auth = "Bearer " + cfg.APIKey
	}
	return c, nil
}

// String describes the client without its key.
func (c *Client) String() string { return "llm.Client{" + c.cfg.String() + "}" }

// Profile returns the provider profile the client reads answers with.
func (c *Client) Profile() Profile { return c.cfg.Profile }

// ApplyDefaults returns req with max_tokens filled from the configured
// defaults, or ErrNoMaxTokens. The maximum is named as the profile takes it
// for the model (ChatRequest.SetDefaultMaxTokens): max_completion_tokens
// on OpenAI and Groq. req itself is not changed. Use it before
// estimating a request's cost, so the output reservation is the max_tokens
// that will really be sent.
func (c *Client) ApplyDefaults(req *ChatRequest) (*ChatRequest, error) {
	if req == nil {
		return nil, errors.New("llm: nil request")
	}
	if req.MaxTokens > 0 {
		return req, nil
	}
	n := c.cfg.ModelMaxTokens[req.Model]
	if n == 0 {
		n = c.cfg.DefaultMaxTokens
	}
	if n <= 0 {
		return nil, ErrNoMaxTokens
	}
	r := req.clone()
	r.SetDefaultMaxTokens(c.cfg.Profile, n)
	return r, nil
}

// Chat sends a request and returns the completion, or a classified error.
func (c *Client) Chat(ctx context.Context, req *ChatRequest) (*ChatResponse, error) {
	r, err := c.ApplyDefaults(req)
	if err != nil {
		return nil, err
	}
	if r.Stream {
		r = r.clone()
		r.Stream = false
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("llm: encode request: %w", err)
	}
	resp, data, err := c.plain(ctx, body)
	if err != nil {
		return nil, err
	}
	// The usage is read apart (readUsage): an odd count in it must not
	// fail an answer the provider gave.
	var raw struct {
		ChatResponse
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, &TransportError{Kind: Malformed, Err: fmt.Errorf("chat completion body: %w", err)}
	}
	out := raw.ChatResponse
	if out.Choices == nil {
		return nil, c.noChoices(resp.Header, data)
	}
	if u := c.usage(raw.Usage); u != nil {
		out.Usage = *u
	}
	out.ID, out.Model = c.scrub.Text(out.ID, MaxFieldBytes), c.scrub.Text(out.Model, MaxFieldBytes)
	out.Header = resp.Header
	out.Snapshot = c.cfg.Profile.Snapshot(resp.Header, c.cfg.Now())
	out.Body = data
	return &out, nil
}

// RawResponse is a non-streamed completion as the provider sent it, but
// for the key, should the provider echo it, which is scrubbed from the
// header and the body (see Scrubber).
type RawResponse struct {
	Header   http.Header
	Snapshot governor.Snapshot // the limits the headers report
	Body     []byte            // unchanged but for the key
	Usage    *Usage            // nil if the provider reported none, or one not read (see Config.Logger)
}

// ChatRaw sends body, a chat completions request the caller encoded, as it
// is, and returns the provider's answer with its body unchanged (but for
// the key): for proxies that pass requests and answers on byte for byte.
// Only the answer's usage is decoded. ChatRaw does not read the request, so
// it cannot see whether it sets max_tokens: the caller must have checked
// (DecodeChatRequest). Failures are classified as Chat's are, and it never
// retries.
func (c *Client) ChatRaw(ctx context.Context, body []byte) (*RawResponse, error) {
	resp, data, err := c.plain(ctx, body)
	if err != nil {
		return nil, err
	}
	choices, usage, err := readAnswer(data)
	if err != nil {
		return nil, &TransportError{Kind: Malformed, Err: fmt.Errorf("chat completion body: %w", err)}
	}
	if len(choices) == 0 || string(choices) == "null" {
		return nil, c.noChoices(resp.Header, data)
	}
	return &RawResponse{Header: resp.Header, Snapshot: c.cfg.Profile.Snapshot(resp.Header, c.cfg.Now()), Body: data, Usage: c.usage(usage)}, nil
}

// readAnswer reads a completion's choices and usage, raw (parts of data),
// as encoding/json reads them into json.RawMessage fields, by walking the
// object: each field matched regardless of case, the last of a field
// named twice winning. An answer that does not walk is left to
// encoding/json, which words the error. The usage is then read by
// readUsage, as every answer's is.
func readAnswer(data []byte) (choices, usage json.RawMessage, err error) {
	if jsonwalk.Object(data, func(k, v []byte) {
		switch {
		case strings.EqualFold(string(k), "choices"):
			choices = v
		case strings.EqualFold(string(k), "usage"):
			usage = v
		}
	}) {
		return choices, usage, nil
	}
	var out struct {
		Choices json.RawMessage `json:"choices"`
		Usage   json.RawMessage `json:"usage"`
	}
	err = json.Unmarshal(data, &out)
	return out.Choices, out.Usage, err
}

// plain posts a non-streamed request body and returns the response with its
// body read, or a classified error.
func (c *Client) plain(ctx context.Context, body []byte) (*http.Response, []byte, error) {
	resp, err := c.postBody(ctx, body, false)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := c.readBody(resp)
	if err != nil {
		return nil, nil, c.transportError(ctx, err)
	}
	data = c.scrub.Bytes(data)
	if err := c.classify(resp.StatusCode, resp.Header, data); err != nil {
		return nil, nil, err
	}
	return resp, data, nil
}

// noChoices is the error of a 2xx completion without choices: the error
// object it carries (some proxies answer errors so), or a malformed answer.
func (c *Client) noChoices(h http.Header, body []byte) error {
	if eb := parseErrorBody(body); eb.Message != "" {
		return c.scrub.Error(c.cfg.Profile.classifyBody(0, h, eb, c.cfg.Now()))
	}
	return &TransportError{Kind: Malformed, Err: errors.New("chat completion body has no choices")}
}

// Models lists the models the key may use (GET /models).
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.BaseURL+"/models", nil)
	if err != nil {
		return nil, fmt.Errorf("llm: models: %w", err)
	}
	c.setHeaders(hreq, "", "")
	resp, err := c.do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	c.scrub.Header(resp.Header)
	body, err := c.readBody(resp)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	body = c.scrub.Bytes(body)
	if err := c.classify(resp.StatusCode, resp.Header, body); err != nil {
		return nil, err
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &TransportError{Kind: Malformed, Err: fmt.Errorf("models body: %w", err)}
	}
	models := make([]Model, 0, len(list.Data))
	for _, raw := range list.Data {
		var m Model
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, &TransportError{Kind: Malformed, Err: fmt.Errorf("models entry: %w", err)}
		}
		m.Raw = raw
		models = append(models, m)
	}
	return models, nil
}

// post sends a chat request. A non-nil response has a 2xx or error status
// to classify; transport failures are already classified.
func (c *Client) post(ctx context.Context, r *ChatRequest) (*http.Response, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("llm: encode request: %w", err)
	}
	return c.postBody(ctx, body, r.Stream)
}

// postBody sends an encoded chat request. The response's header comes
// back without the key.
func (c *Client) postBody(ctx context.Context, body []byte, stream bool) (*http.Response, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("llm: chat: %w", err)
	}
	accept := "application/json"
	if stream {
		accept = "text/event-stream"
	}
	c.setHeaders(hreq, "application/json", accept)
	resp, err := c.do(hreq)
	if err != nil {
		return nil, err
	}
	c.scrub.Header(resp.Header)
	return resp, nil
}

// setHeaders sets Config.Header on a request, then the client's own:
// User-Agent unless Header names one, Authorization, and Content-Type and
// Accept when given. The client's values share one array, each header's a
// slice of it that ends with it: one allocation for them all.
func (c *Client) setHeaders(hreq *http.Request, contentType, accept string) {
	h := hreq.Header
	for k, vs := range c.cfg.Header {
		h[k] = append([]string(nil), vs...)
	}
	vals := make([]string, 0, 4)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if h.Get("User-Agent") == "" {
		set("User-Agent", "sluice-llm")
	}
	if c.auth != "" {
		set("Authorization", c.auth)
	}
	if contentType != "" {
		set("Content-Type", contentType)
	}
	if accept != "" {
		set("Accept", accept)
	}
}

// classify turns an HTTP answer into a typed error with the client's clock,
// the provider's text scrubbed: the key is removed from the body before it
// is read (so a cut of a long plain-text body cannot leave part of it) and
// from the error's fields after.
func (c *Client) classify(status int, h http.Header, body []byte) error {
	return c.scrub.Error(c.cfg.Profile.classify(status, h, c.scrub.Bytes(body), c.cfg.Now()))
}

// transportError classifies a failure below HTTP. A cancelled context is
// returned as itself: the caller gave up, there is nothing to retry.
func (c *Client) transportError(ctx context.Context, err error) error {
	if ctx.Err() == context.Canceled {
		return fmt.Errorf("llm: %w", context.Canceled)
	}
	return c.scrub.Error(&TransportError{Kind: transportKind(err), Err: err})
}

func transportKind(err error) TransportKind {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Timeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return Reset
	}
	return Other
}
