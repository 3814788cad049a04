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

	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/llm"
)

// ServerConfig configures the HTTP simulator.
type ServerConfig struct {
	// Addr is where Start listens. Default "127.0.0.1:0" (a free port; see Addr).
	Addr string
	// Models are the model names GET /v1/models lists for a server of one
	// model (NewServer). Requests must name a model, and may name any: the
	// limits belong to the key, not the model. Default: the Model's
	// Config.Model. A server of several models (NewMultiServer) lists the
	// names it serves, and Models must be empty.
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
	// Speed is how many times as fast as the wall clock ServerConfig.Now
	// runs (for simulations in compressed time, with internal/clock); the
	// latency the server holds a request for and the hang of a timeout fault
	// are divided by it. Headers and bodies stay in Now's time. Default 1
	// (values below 1 are taken as 1).
	Speed float64
	// HangTimeout bounds how long a timeout fault holds a request open when
	// the client does not give up first, in Now's time. Default 10 minutes.
	HangTimeout time.Duration
	// OnFinish, when set, is called as each admitted request ends: a log of
	// the calls the provider charged, to check against what a client
	// recorded of them. It runs on the request's goroutine before the
	// connection is released, so it must return quickly. Default: none.
	OnFinish func(Call)
}

// Call is an admitted request as it ended, for ServerConfig.OnFinish.
type Call struct {
	ID       uint64         // the request's number, as forecast.Response.ID
	Flow     string         // the flow it counted for
	Messages []string       // the text of each message of the request, in order
	Fault    forecast.Fault // how it failed, forecast.NoFault for an answer
	Answered bool           // the whole response was written (false: the client or the server gave up first, or a timeout or reset fault)
	Start    time.Time      // when it was admitted
	End      time.Time      // when it ended
}

// MaxRequestBytes bounds a request body; a larger one gets a 413. It holds
// a prompt of about half a million tokens, and keeps counting a prompt's
// tokens under a second.
const MaxRequestBytes = 2 << 20

// MaxModelName bounds the model name a request may give: the answer repeats
// it in every chunk of a stream.
const MaxModelName = 256

// OutputTokensHeader fixes the real output length of each choice of one
// request (capped at its max_tokens); without it the server draws each
// choice's length uniformly between half the max and the max.
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

// Server serves a forecast.Model (NewServer), or several, each under its
// own name (NewMultiServer), as an OpenAI-compatible HTTP API on
// ServerConfig.Now (the wall clock, or a faster one with ServerConfig.Speed):
// POST /v1/chat/completions (plain and streaming), GET /v1/models,
// GET /sim/stats and POST /sim/outage. It is an http.Handler; Start and Stop
// run it on a listener.
type Server struct {
	one     *served            // the model of a server of one model, which takes any model name; nil for several
	byName  map[string]*served // the model each served name selects (for one model, each of ServerConfig.Models)
	names   []string           // what GET /v1/models lists, in order
	profile llm.Profile        // the wire format, every model's
	cfg     ServerConfig
	mux     *http.ServeMux

	rngMu sync.Mutex
	rng   *rand.Rand

	outMu sync.Mutex // guards every served model's outages and their counts

	mu       sync.Mutex
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
	stopOnce sync.Once
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a Server for m: every request counts on m, whatever
// model it names.
func NewServer(m *forecast.Model, cfg ServerConfig) *Server {
	mc := m.Config()
	if len(cfg.Models) == 0 {
		cfg.Models = []string{mc.Model}
	}
	sv := &served{m: m, mc: mc}
	s := newServer(cfg, mc)
	s.one, s.names = sv, cfg.Models
	for _, name := range cfg.Models {
		s.byName[name] = sv
	}
	return s
}

// newServer returns a Server of cfg, with the defaults taken from mc (the
// profile, the seed), and no model yet.
func newServer(cfg ServerConfig, mc forecast.ModelConfig) *Server {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Seed == 0 {
		cfg.Seed = mc.Seed
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HangTimeout <= 0 {
		cfg.HangTimeout = 10 * time.Minute
	}
	if !(cfg.Speed > 1) { // NaN too
		cfg.Speed = 1
	}
	s := &Server{byName: map[string]*served{}, profile: mc.Profile, cfg: cfg, mux: http.NewServeMux(), done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x0071_7e27))}
	s.mux.HandleFunc("POST /v1/chat/completions", s.auth(s.chat))
	s.mux.HandleFunc("GET /v1/models", s.auth(s.models))
	s.mux.HandleFunc("GET /sim/stats", s.stats)
	s.mux.HandleFunc("POST /sim/outage", s.auth(s.outage))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url",
			fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
	})
	return s
}

// Model returns the model the server serves; of a server of several
// models, the first by name.
func (s *Server) Model() *forecast.Model {
	if s.one != nil {
		return s.one.m
	}
	return s.byName[s.names[0]].m
}

// ModelNamed returns the model a request naming name counts on: for a
// server of one model, that model whatever the name; for a server of
// several, the one served under name, or nil when none is.
func (s *Server) ModelNamed(name string) *forecast.Model {
	if sv := s.route(name); sv != nil {
		return sv.m
	}
	return nil
}

// route returns the model a request naming name counts on, nil when the
// server serves none of that name.
func (s *Server) route(name string) *served {
	if s.one != nil {
		return s.one
	}
	return s.byName[name]
}

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
		if !ok && s.profile == "anthropic" {
			got, ok = r.Header.Get("X-Api-Key"), true
		}
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1 {
			next(w, r)
			return
		}
		// The key sent is never echoed: it may be a real one sent by mistake.
		switch s.profile {
		case "anthropic":
			s.writeError(w, http.StatusUnauthorized, "authentication_error", "", "invalid x-api-key")
		case "groq":
			s.writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Invalid API Key")
		default:
			s.writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		}
	}
}

// writeError writes an error in the profile's shape. It answers no request
// of the model: the body names none.
func (s *Server) writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(s.profile.ErrorBody(typ, code, msg, ""))
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
	for _, name := range s.names {
		list.Data = append(list.Data, model{ID: name, Object: "model", Created: 1767225600, OwnedBy: "sluice-sim"})
	}
	httpjson.Write(w, http.StatusOK, list)
}

// inputTokens counts the prompt as the simulated provider does.
func (req *chatRequest) inputTokens() int64 {
	n := int64(replyPriming)
	for _, msg := range req.Messages {
		c, _ := cl100k().Count(msg.Text)
		n += perMessageTokens + int64(c)
		if msg.Named {
			n++
		}
	}
	return n
}

// texts returns the text of each message.
func (req *chatRequest) texts() []string {
	out := make([]string, len(req.Messages))
	for i, msg := range req.Messages {
		out[i] = msg.Text
	}
	return out
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	req, sv, maxTok, limit, n, ok := s.readChat(w, r)
	if !ok {
		return
	}
	if now := s.cfg.Now(); s.inOutage(w, sv, req.Model, now) {
		return // the provider did no work: nothing is charged
	}
	input := req.inputTokens()
	outs, err := s.outputTokens(r.Header.Get(OutputTokensHeader), limit, n)
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	var output int64
	for _, o := range outs {
		output += o
	}
	flow := r.Header.Get(FlowHeader)
	if flow == "" {
		flow = req.User
	}

	resp := sv.m.Submit(s.cfg.Now(), forecast.Request{Flow: flow, Input: input, MaxTokens: maxTok, N: n, Output: output, Model: req.Model})
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	id := fmt.Sprintf("req_sim_%06d", resp.ID())
	if s.profile == "anthropic" {
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
		sv.m.Finish(end, resp)
		if s.cfg.OnFinish != nil {
			s.cfg.OnFinish(Call{ID: resp.ID(), Flow: flow, Messages: req.texts(), Fault: resp.Fault, Answered: answered, Start: start, End: end})
		}
	}()
	answered = s.answer(w, r, &req, &resp, input, outs, limit)
}

// readChat reads and checks a chat request, answering the provider's error
// when it is not one the provider would take. It returns the request, the
// model it counts on, the max_tokens it sets (0: none), that of each choice
// (the default when it sets none) and the number of choices.
func (s *Server) readChat(w http.ResponseWriter, r *http.Request) (req chatRequest, sv *served, maxTok, limit, n int64, ok bool) {
	var raw json.RawMessage
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	err := dec.Decode(&raw)
	if err == nil {
		switch extra := dec.Decode(&struct{}{}); {
		case extra == io.EOF:
		case errors.As(extra, new(*http.MaxBytesError)):
			err = extra
		default:
			err = errors.New("data after the JSON value")
		}
	}
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			typ := "invalid_request_error"
			if s.profile == "anthropic" {
				typ = "request_too_large"
			}
			s.writeError(w, http.StatusRequestEntityTooLarge, typ, "",
				fmt.Sprintf("Request body too large: the simulator reads at most %d bytes.", int64(MaxRequestBytes)))
			return req, nil, 0, 0, 0, false
		}
		// The decoder's own words name Go types: the client gets the provider's.
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", invalidJSON)
		return req, nil, 0, 0, 0, false
	}
	req, msg := parseChat(raw)
	switch {
	case msg != "":
	case req.Model == "":
		msg = missingModel(s.profile)
	case req.Messages == nil:
		msg = "Missing required parameter: 'messages'."
	case len(req.Messages) == 0:
		msg = "'messages' must contain at least one message."
	}
	sv = s.one
	if msg == "" && sv == nil { // a server of several models: the name picks one
		if len(req.Model) > MaxModelName {
			msg = fmt.Sprintf("Invalid 'model': a model name is at most %d bytes, got %d.", MaxModelName, len(req.Model))
		} else if sv = s.byName[req.Model]; sv == nil {
			s.modelNotFound(w, req.Model)
			return req, nil, 0, 0, 0, false
		}
	}
	if msg == "" {
		maxTok, msg = maxTokens(&req, sv.mc.MaxOutputTokens)
	}
	if msg == "" {
		n, msg = choices(s.profile, req.N)
	}
	limit = maxTok // each choice's max
	if limit == 0 && sv != nil {
		limit = sv.mc.DefaultMaxTokens
	}
	if msg == "" && n*limit > MaxAnswerTokens {
		msg = fmt.Sprintf("Invalid 'n': the simulator answers at most %d output tokens in all the choices of a request, and %d choices of %d tokens would be %d.",
			MaxAnswerTokens, n, limit, n*limit)
	}
	if msg == "" && len(req.Model) > MaxModelName {
		msg = fmt.Sprintf("Invalid 'model': a model name is at most %d bytes, got %d.", MaxModelName, len(req.Model))
	}
	if msg != "" {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
		return req, nil, 0, 0, 0, false
	}
	return req, sv, maxTok, limit, n, true
}

// answer answers an admitted call after its latency, as its fault says:
// a hang, a reset, a 5xx, a body cut short or a whole answer. It reports
// whether the answer began.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, req *chatRequest, resp *forecast.Response, input int64, outs []int64, limit int64) bool {
	h := w.Header()
	switch resp.Fault {
	case forecast.FaultTimeout:
		s.hang(r.Context())
		abort(w, false)
		return false
	case forecast.FaultReset:
		abort(w, true)
		return false
	}
	if !s.wait(r.Context(), resp.Latency) {
		abort(w, false) // the client gave up or the server stops: no half answer
		return false
	}
	if resp.Fault == forecast.Fault5xx {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
		return true
	}
	// The texts are the drawn lengths: resp.Output is zero for a cut-short
	// body, whose text still exists.
	c := completion{id: fmt.Sprintf("chatcmpl-sim-%06d", resp.ID()), created: s.cfg.Now().Unix(), model: req.Model,
		input: input, broken: resp.Fault == forecast.FaultBadJSON, choices: make([]choiceText, len(outs))}
	for i, out := range outs {
		c.choices[i] = choiceText{text: Words(out, resp.ID()+uint64(i)), finish: "stop"}
		if out == limit {
			c.choices[i].finish = "length"
		}
	}
	if req.Stream {
		c.stream(w, req.IncludeUsage)
		return true
	}
	c.write(w)
	return true
}

// outputTokens returns the real output length of each of n choices: the
// header's value, or a draw uniform in [max/2, max] for each.
func (s *Server) outputTokens(header string, max, n int64) ([]int64, error) {
	outs := make([]int64, n)
	if header != "" {
		v, err := strconv.ParseInt(header, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s: %q is not a whole number of tokens", OutputTokensHeader, header)
		}
		for i := range outs {
			outs[i] = min(v, max)
		}
		return outs, nil
	}
	lo := (max + 1) / 2
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	for i := range outs {
		outs[i] = lo + s.rng.Int64N(max-lo+1)
	}
	return outs, nil
}

// wait sleeps d of the server's clock (d / Speed of wall time) unless the
// request or the server ends first; it reports whether the full time passed.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	d = clock.Real(s.cfg.Speed, d)
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

// hang holds a request that will get no response until the client gives up
// (or HangTimeout of the server's clock has passed).
func (s *Server) hang(ctx context.Context) {
	t := time.NewTimer(clock.Real(s.cfg.Speed, s.cfg.HangTimeout))
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
