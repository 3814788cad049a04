package sim

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tiktoken-go/tokenizer"

	"github.com/sluice-dev/sluice/internal/guard"
)

// ServerConfig configures the HTTP simulator.
type ServerConfig struct {
	// Addr is where Start listens. Default "127.0.0.1:0" (a free port; see Addr).
	Addr string
	// Models are the model names GET /v1/models lists. Requests may name any
	// model: the limits belong to the key, not the model. Default: the
	// Model's Config.Model.
	Models []string
	// APIKey, when set, must come as "Authorization: Bearer KEY" (or, for the
	// anthropic profile, "x-api-key: KEY"); anything else gets the profile's
	// 401. Empty: no authentication.
	APIKey string
	// Seed seeds the real output lengths the server draws. Default: the
	// Model's seed.
	Seed int64
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// HangTimeout bounds how long a timeout fault holds a request open when
	// the client does not give up first. Default 10 minutes.
	HangTimeout time.Duration
	// OnFinish, when set, is called as each admitted request ends: a log of
	// the calls the provider charged, to check against what a client
	// recorded of them. It runs on the request's goroutine before the
	// connection is released, so it must return quickly. Default: none.
	OnFinish func(Call)
}

// Call is an admitted request as it ended, for ServerConfig.OnFinish.
type Call struct {
	ID       uint64    // the request's number, as Response.ID
	Flow     string    // the flow it counted for
	Messages []string  // the text of each message of the request, in order
	Fault    Fault     // how it failed, NoFault for an answer
	Answered bool      // the whole response was written (false: the client or the server gave up first, or a timeout or reset fault)
	Start    time.Time // when it was admitted
	End      time.Time // when it ended
}

// MaxRequestBytes bounds a request body; a larger one gets a 413. It holds
// a prompt of about half a million tokens, and keeps counting a prompt's
// tokens under a second.
const MaxRequestBytes = 2 << 20

// MaxModelName bounds the model name a request may give: the answer repeats
// it in every chunk of a stream.
const MaxModelName = 256

// OutputTokensHeader fixes the real output length of one request (capped at
// its max_tokens); without it the server draws the length uniformly between
// half the max and the max.
const OutputTokensHeader = "X-Sim-Output-Tokens"

// FlowHeader names the flow a request counts for in /sim/stats; without it
// the request body's "user" field is used.
const FlowHeader = "X-Sim-Flow"

// Token counting: message content tokens (cl100k_base) plus this overhead
// per message, plus replyPriming once, after OpenAI's published recipe for
// chat models.
const (
	perMessageTokens = 3
	replyPriming     = 3
)

var cl100k = sync.OnceValue(func() tokenizer.Codec {
	c, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		panic(fmt.Sprintf("cl100k_base tokenizer: %v", err)) // compiled in: cannot fail
	}
	return c
})

// Server serves a Model as an OpenAI-compatible HTTP API on the real clock:
// POST /v1/chat/completions (plain and streaming), GET /v1/models and
// GET /sim/stats. It is an http.Handler; Start and Stop run it on a listener.
type Server struct {
	m   *Model
	cfg ServerConfig
	mux *http.ServeMux

	rngMu sync.Mutex
	rng   *rand.Rand

	mu       sync.Mutex
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
	stopOnce sync.Once
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a Server for m.
func NewServer(m *Model, cfg ServerConfig) *Server {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if len(cfg.Models) == 0 {
		cfg.Models = []string{m.cfg.Model}
	}
	if cfg.Seed == 0 {
		cfg.Seed = m.cfg.Seed
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HangTimeout <= 0 {
		cfg.HangTimeout = 10 * time.Minute
	}
	s := &Server{m: m, cfg: cfg, mux: http.NewServeMux(), done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x0071_7e27))}
	s.mux.HandleFunc("POST /v1/chat/completions", s.auth(s.chat))
	s.mux.HandleFunc("GET /v1/models", s.auth(s.models))
	s.mux.HandleFunc("GET /sim/stats", s.stats)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url",
			fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
	})
	return s
}

// Model returns the model the server serves.
func (s *Server) Model() *Model { return s.m }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Start listens on ServerConfig.Addr and serves in the background until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("simulator already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("simulator listen: %w", err)
	}
	s.ln = ln
	// The guard's deadlines and request checks; its refusals in the profile's shape.
	s.srv = guard.NewServer(s, guard.Config{Addr: ln.Addr().String(), Error: func(w http.ResponseWriter, status int, msg string) {
		s.writeError(w, status, "invalid_request_error", "", msg)
	}})
	go func() { _ = s.srv.Serve(ln) }()
	return nil
}

// Addr returns the address Start listens on ("127.0.0.1:41234"), or "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop ends requests held open by faults and latency, then shuts the server
// down gracefully within ctx. It is safe to call more than once.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.done) })
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("simulator shutdown: %w", err)
	}
	return nil
}

func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	if s.cfg.APIKey == "" {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok && s.m.cfg.Profile == "anthropic" {
			got, ok = r.Header.Get("X-Api-Key"), true
		}
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1 {
			next(w, r)
			return
		}
		// The key sent is never echoed: it may be a real one sent by mistake.
		switch s.m.cfg.Profile {
		case "anthropic":
			s.writeError(w, http.StatusUnauthorized, "authentication_error", "", "invalid x-api-key")
		case "groq":
			s.writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Invalid API Key")
		default:
			s.writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		}
	}
}

// writeError writes an error in the profile's shape.
func (s *Server) writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(ErrorBody(s.m.cfg.Profile, typ, code, msg, 0))
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, name := range s.cfg.Models {
		list.Data = append(list.Data, model{ID: name, Object: "model", Created: 1767225600, OwnedBy: "sluice-sim"})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.m.Stats())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// chatRequest is the part of a chat completion request the simulator reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		Name    string          `json:"name"`
	} `json:"messages"`
	// Numbers are read raw, so that a fraction, a string or a number beyond
	// int64 gets the provider's 400 rather than a decoder's message.
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	N                   json.RawMessage `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	User string `json:"user"`
}

// inputTokens counts the prompt as the simulated provider does.
func (req *chatRequest) inputTokens() (int64, error) {
	n := int64(replyPriming)
	for i, msg := range req.Messages {
		text, err := contentText(msg.Content)
		if err != nil {
			return 0, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		c, _ := cl100k().Count(text)
		n += perMessageTokens + int64(c)
		if msg.Name != "" {
			n++
		}
	}
	return n, nil
}

// texts returns the text of each message; inputTokens has checked them.
func (req *chatRequest) texts() []string {
	out := make([]string, len(req.Messages))
	for i, msg := range req.Messages {
		out[i], _ = contentText(msg.Content)
	}
	return out
}

// contentText returns a message's text: a string, or the text parts of an
// array of content parts.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	err := dec.Decode(&req)
	if err == nil {
		switch extra := dec.Decode(&struct{}{}); {
		case extra == io.EOF:
		case errors.As(extra, new(*http.MaxBytesError)):
			err = extra
		default:
			err = errors.New("data after the JSON object")
		}
	}
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			typ := "invalid_request_error"
			if s.m.cfg.Profile == "anthropic" {
				typ = "request_too_large"
			}
			s.writeError(w, http.StatusRequestEntityTooLarge, typ, "",
				fmt.Sprintf("Request body too large: the simulator reads at most %d bytes.", int64(MaxRequestBytes)))
			return
		}
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", "The request body is not valid JSON: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", "'messages' must contain at least one message.")
		return
	}
	maxTokens, msg := s.maxTokens(&req)
	if msg == "" {
		msg = choices(req.N)
	}
	if msg == "" && len(req.Model) > MaxModelName {
		msg = fmt.Sprintf("Invalid 'model': a model name is at most %d bytes, got %d.", MaxModelName, len(req.Model))
	}
	if msg != "" {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
		return
	}
	input, err := req.inputTokens()
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	limit := maxTokens
	if limit == 0 {
		limit = s.m.cfg.DefaultMaxTokens
	}
	output, err := s.outputTokens(r.Header.Get(OutputTokensHeader), limit)
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	flow := r.Header.Get(FlowHeader)
	if flow == "" {
		flow = req.User
	}
	model := req.Model
	if model == "" {
		model = s.cfg.Models[0]
	}

	resp := s.m.Submit(s.cfg.Now(), Request{Flow: flow, Input: input, MaxTokens: maxTokens, Output: output, Model: req.Model})
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	id := fmt.Sprintf("req_sim_%06d", resp.ID())
	if s.m.cfg.Profile == "anthropic" {
		h.Set("Request-Id", id)
	} else {
		h.Set("X-Request-Id", id)
	}
	if resp.Rejected {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
		return
	}
	start, answered := s.cfg.Now(), false
	defer func() {
		end := s.cfg.Now()
		s.m.Finish(end, resp)
		if s.cfg.OnFinish != nil {
			s.cfg.OnFinish(Call{ID: resp.ID(), Flow: flow, Messages: req.texts(), Fault: resp.Fault, Answered: answered, Start: start, End: end})
		}
	}()

	switch resp.Fault {
	case FaultTimeout:
		s.hang(r.Context())
		abort(w, false)
		return
	case FaultReset:
		abort(w, true)
		return
	}
	if !s.wait(r.Context(), resp.Latency) {
		abort(w, false) // the client gave up or the server stops: no half answer
		return
	}
	answered = true
	if resp.Fault == Fault5xx {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
		return
	}
	out := min(output, limit) // resp.Output is zero for a cut-short body, whose text still exists
	c := completion{id: fmt.Sprintf("chatcmpl-sim-%06d", resp.ID()), created: s.cfg.Now().Unix(), model: model,
		text: Words(out, resp.ID()), input: input, finish: "stop", broken: resp.Fault == FaultBadJSON}
	if out == limit {
		c.finish = "length"
	}
	if req.Stream {
		c.stream(w, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	c.write(w)
}

// maxTokens returns the request's max_completion_tokens, else its
// max_tokens, or 0 when it sets neither; msg is the 400's message for a value
// that is not an integer from 1 to the model's max output tokens.
func (s *Server) maxTokens(req *chatRequest) (n int64, msg string) {
	for _, p := range []struct {
		name string
		raw  json.RawMessage
	}{{"max_completion_tokens", req.MaxCompletionTokens}, {"max_tokens", req.MaxTokens}} {
		v, set, msg := intParam(p.name, p.raw)
		switch {
		case msg != "":
			return 0, msg
		case !set:
			continue
		case v < 1:
			return 0, fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1, but got %s instead.", p.name, clip(string(p.raw)))
		case v > s.m.cfg.MaxOutputTokens:
			return 0, fmt.Sprintf("%s is too large: %s. This model supports at most %d completion tokens, whereas you provided %s.",
				p.name, clip(string(p.raw)), s.m.cfg.MaxOutputTokens, clip(string(p.raw)))
		}
		if n == 0 {
			n = v
		}
	}
	return n, ""
}

// choices checks the request's n. The simulator answers one choice, as Groq
// and Anthropic's OpenAI-compatible API do; OpenAI accepts up to 128.
func choices(raw json.RawMessage) (msg string) {
	v, set, msg := intParam("n", raw)
	switch {
	case msg != "":
		return msg
	case set && v != 1:
		return fmt.Sprintf("Invalid 'n': the simulator answers one choice per request, so n must be 1; got %s.", clip(string(raw)))
	}
	return ""
}

// intParam reads an integer parameter: absent or null is unset; a number
// beyond int64 reads as the nearest int64, which every bound refuses.
func intParam(name string, raw json.RawMessage) (v int64, set bool, msg string) {
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		return 0, false, ""
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false, fmt.Sprintf("Invalid type for '%s': expected an integer, but got %s instead.", name, clip(text))
	}
	return v, true, ""
}

// clip shortens what a client sent before it is echoed in an error.
func clip(s string) string {
	const n = 40
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// outputTokens returns the real output length: the header's value, or a
// draw uniform in [max/2, max].
func (s *Server) outputTokens(header string, max int64) (int64, error) {
	if header != "" {
		n, err := strconv.ParseInt(header, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s: %q is not a whole number of tokens", OutputTokensHeader, header)
		}
		return min(n, max), nil
	}
	lo := (max + 1) / 2
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return lo + s.rng.Int64N(max-lo+1), nil
}

// wait sleeps d unless the request or the server ends first; it reports
// whether the full time passed.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

// hang holds a request that will get no response until the client gives up.
func (s *Server) hang(ctx context.Context) {
	t := time.NewTimer(s.cfg.HangTimeout)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-s.done:
	}
}

// abort closes the connection without a response; with reset, the peer sees
// a TCP reset rather than an orderly close.
func abort(w http.ResponseWriter, reset bool) {
	// The controller reaches the connection through wrappers such as the guard's.
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		if tc, ok := conn.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler) // closes the stream without a response
}
