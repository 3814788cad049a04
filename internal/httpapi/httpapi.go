// Package httpapi serves sluice's event and run API over HTTP:
//
//	POST /v1/events              {"name", "id", "data"}: start the functions it triggers
//	GET  /v1/runs                ?function=&status=&event_key=&reason=&since=&until=&limit= (see ParseRunFilter)
//	GET  /v1/runs/{id}           a run with its steps (attempts, durations, outputs, errors)
//	GET  /v1/runs/{id}/history   every attempt of every step, the waits between them and why
//	POST /v1/runs/{id}/cancel    stop a queued or running run
//	POST /v1/runs/{id}/rerun     a new run from the first step that did not complete, or ?from_step=N|NAME
//	POST /v1/runs/{id}/replay    send the run's event again under a new ID: a new run
//	GET  /v1/dropped             ?function=: events a rate limit dropped
//	GET  /v1/flows               every job's health (see Health)
//	GET  /v1/versions            this process's version, and the unfinished runs of others
//	POST /v1/versions/{v}/resume resume here the unfinished runs of version v
//	POST /v1/versions/{v}/cancel cancel the unfinished runs of version v
//	GET  /healthz                the process answers
//	GET  /readyz                 the app has started (see Starting) and no job is stalled
//
// Times are the app's (Config.Now), runs' too, which DBOS records by the
// wall clock (the engine converts them); every answer that carries times
// says that clock's now and speed beside them (httpjson.Clock).
//
// Errors are JSON {"error": "..."} (httpjson.Error) with the status from
// the one table the dashboard shares (httperr.Status). Input is checked before the database sees it, so SQLite and
// PostgreSQL answer it alike; a 500 never carries the database's text: it
// gives a reference to the server's log line. When a token is set, every
// /v1 request must carry it as a bearer token, and an address that sent
// too many wrong tokens, here or at another door of the server that
// shares Config.Throttle, gets 429 with Retry-After, its token not
// compared.
package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/jsonwalk"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/run"
)

// Engine is what the API needs of the engine.
type Engine interface {
	Send(ctx context.Context, ev engine.Event) ([]run.Sent, error)
	Runs(ctx context.Context, f engine.RunFilter) ([]run.Summary, error)
	RunDetail(ctx context.Context, id string, outputLimit int) (*engine.RunDetail, error)
	Cancel(ctx context.Context, id string) error
	Rerun(ctx context.Context, id string) (string, error)
	RerunFrom(ctx context.Context, id, from string) (string, error)
	RunHistory(ctx context.Context, id string) (*engine.RunHistory, error)
	Replay(ctx context.Context, id string) (engine.Replayed, error)
	Dropped(ctx context.Context, function string, limit int) ([]engine.DroppedEvent, error)
	AppVersion() string
	OtherVersions(ctx context.Context) ([]run.VersionRuns, error)
	ResumeVersion(ctx context.Context, from string) (run.VersionReport, error)
	CancelVersion(ctx context.Context, from string) (run.VersionReport, error)
}

var _ Engine = (*engine.Engine)(nil)

// Health is what the API answers of the jobs' health.
type Health interface {
	// Flows returns every job's health, for GET /v1/flows.
	Flows() []health.Flow
	// Ready returns why the app is not ready (a stalled job, a store that
	// cannot be read), or nil. A *health.NotReadyError names the jobs.
	Ready() error
}

var _ Health = (*health.Monitor)(nil)

// Throttle refuses the client addresses that sent too many wrong tokens,
// and counts the wrong ones.
type Throttle interface {
	// CheckBearer decides r's "Authorization: Bearer TOKEN": wait > 0
	// when r's address is throttled, right not called; else ok reports
	// right(TOKEN), and a wrong token is counted. A request without a
	// bearer token gets (0, false).
	CheckBearer(r *http.Request, right func(token string) bool) (wait time.Duration, ok bool)
}

var _ Throttle = (*authlimit.Throttle)(nil)

// Config configures the API.
type Config struct {
	Engine Engine
	// Health, when set, is the health of the app's jobs: GET /v1/flows
	// answers its Flows, and GET /readyz answers 503 with the reason while
	// its Ready is not nil. Default nil: no jobs; /v1/flows answers an empty
	// list and /readyz 200.
	Health Health
	// Functions lists the app's functions for GET /v1/functions. Default
	// nil: an empty list.
	Functions Functions
	// Token, when set, is required as "Authorization: Bearer TOKEN" on every
	// /v1 request. It never appears in responses or logs.
	Token string
	// Throttle decides each bearer token when Token is set. Give the one
	// every door of the server that checks a token shares (the dashboard's
	// sign-in, /metrics), so that an address throttled at one is
	// throttled at all. Default: one of the API's own, on the wall clock
	// (not Now, which may be simulated), logging to Logger.
	Throttle Throttle
	// MaxEventBytes bounds an event's body (default 1 MiB); a larger one is
	// refused with 413.
	MaxEventBytes int64
	// OutputLimit bounds each step output shown by GET /v1/runs/{id}
	// (default 4096 bytes); a longer one is cut and the cut says so.
	OutputLimit int
	// Now is the app's clock (default time.Now): the clock of the times
	// the answers carry, which each answer that carries times names in its
	// "now", and of the runs' search ("since=1h" is an hour back on it).
	Now func() time.Time
	// Speed is how many times as fast as the wall clock Now runs (default
	// 1), which the answers that carry times say in their "speed".
	Speed float64
	// Logger receives the errors behind 500 answers (default slog.Default()).
	Logger *slog.Logger
}

type api struct {
	cfg Config
}

// clock is the app's clock now.
func (a *api) clock() httpjson.Clock { return httpjson.ClockOf(a.cfg.Now(), a.cfg.Speed) }

// New returns the API's handler.
func New(cfg Config) http.Handler {
	cfg.MaxEventBytes = cmp.Or(cfg.MaxEventBytes, 1<<20)
	cfg.OutputLimit = cmp.Or(cfg.OutputLimit, 4096)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Throttle == nil {
		cfg.Throttle = authlimit.New(authlimit.Config{Logger: cfg.Logger})
	}
	a := &api{cfg: cfg}
	mux := http.NewServeMux()
	for _, r := range a.routes() {
		mux.Handle(r.pattern, r.h)
	}
	return mux
}

// route is one pattern of the API and its handler.
type route struct {
	pattern string
	h       http.Handler
}

// routes are the API's patterns. Every one under /v1 is in one of
// v1Resources, so that OwnsPath can tell them from a gateway's.
func (a *api) routes() []route {
	return []route{
		{"GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
		})},
		{"GET /readyz", http.HandlerFunc(a.readyz)},
		{"GET /v1/flows", a.auth(a.flows)},
		{"GET /v1/functions", a.auth(a.functions)},
		{"POST /v1/events", a.auth(a.postEvent)},
		{"GET /v1/runs", a.auth(a.listRuns)},
		{"GET /v1/runs/{id}", a.auth(a.getRun)},
		{"POST /v1/runs/{id}/cancel", a.auth(a.cancel)},
		{"GET /v1/runs/{id}/history", a.auth(a.history)},
		{"POST /v1/runs/{id}/rerun", a.auth(a.rerun)},
		{"POST /v1/runs/{id}/replay", a.auth(a.replay)},
		{"GET /v1/dropped", a.auth(a.dropped)},
		{"GET /v1/versions", a.auth(a.versions)},
		{"POST /v1/versions/{version}/resume", a.auth(a.moveVersion(Engine.ResumeVersion))},
		{"POST /v1/versions/{version}/cancel", a.auth(a.moveVersion(Engine.CancelVersion))},
	}
}

// v1Resources are the first segments of the API's paths under /v1.
var v1Resources = []string{"flows", "events", "runs", "dropped", "versions", "functions"}

// OwnsPath reports whether path, under /v1, is the API's: one of its
// resources or below one. Under sluice serve --gateway every other /v1
// path is the gateway's.
func OwnsPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return false
	}
	first, _, _ := strings.Cut(rest, "/")
	return slices.Contains(v1Resources, first)
}

// RequireBearer returns h behind "Authorization: Bearer TOKEN" when token
// is set, decided by th, with the API's answers: 401 without the token,
// 429 with Retry-After from a throttled address. For a door beside the
// API that takes its token or one of its own (/metrics).
func RequireBearer(token string, th Throttle, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bearerRefused(w, r, token, th) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerRefused answers r and returns true unless it carries token as a
// bearer token from an address th does not throttle.
func bearerRefused(w http.ResponseWriter, r *http.Request, token string, th Throttle) bool {
	wait, ok := th.CheckBearer(r, func(got string) bool {
		return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
	})
	switch {
	case wait > 0:
		secs := authlimit.RetryAfter(wait)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		httpjson.Error(w, http.StatusTooManyRequests, "too many wrong tokens from your address: try again in "+progress.Span(time.Duration(secs)*time.Second))
	case !ok:
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		httpjson.Error(w, http.StatusUnauthorized, "missing or wrong bearer token")
	}
	return !ok
}

func (a *api) auth(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.cfg.Token != "" && bearerRefused(w, r, a.cfg.Token, a.cfg.Throttle) {
			return
		}
		if err := h(w, r); err != nil {
			status := httperr.Status(err)
			if s := httperr.RetryAfter(err); s > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(s))
			}
			if status == http.StatusInternalServerError {
				err = a.internal(r, err)
			}
			httpjson.Error(w, status, err.Error())
		}
	})
}

// internal logs an unexpected error with a reference and returns what the
// client sees: the reference, never the error's text, which may quote SQL
// or the database's own words.
func (a *api) internal(r *http.Request, err error) error {
	var b [6]byte
	_, _ = rand.Read(b[:])
	ref := hex.EncodeToString(b[:])
	a.cfg.Logger.Error("sluice: API request failed", "ref", ref, "method", r.Method, "path", r.URL.Path, "err", err)
	return fmt.Errorf("internal error (reference %s in the server's log)", ref)
}

type eventBody struct {
	Name string          `json:"name"`
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data"`
	TS   time.Time       `json:"ts,omitzero"`
}

// jobView names a job that keeps the app from being ready.
type jobView struct {
	Name   string       `json:"name"`
	State  health.State `json:"state"`
	Reason string       `json:"reason"`
}

// readyz answers 200 while the jobs are healthy, else 503 with the
// reason; a store's own words stay in the server's log (the monitor logs
// the polls that fail), since /readyz needs no token.
func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	if a.cfg.Health == nil {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	err := a.cfg.Health.Ready()
	if err == nil {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	body := struct {
		Status string    `json:"status"`
		Reason string    `json:"reason"`
		Jobs   []jobView `json:"jobs,omitempty"`
	}{Status: "unready", Reason: err.Error()}
	if nr, ok := errors.AsType[*health.NotReadyError](err); ok {
		if nr.Err != nil {
			body.Reason = "the jobs' records cannot be read (the server's log says why)"
		}
		for _, v := range nr.Stalled {
			body.Jobs = append(body.Jobs, jobView{Name: v.Name, State: v.State, Reason: v.Reason})
		}
	}
	httpjson.Write(w, http.StatusServiceUnavailable, body)
}

func (a *api) flows(w http.ResponseWriter, _ *http.Request) error {
	var fs []health.Flow
	if a.cfg.Health != nil {
		fs = a.cfg.Health.Flows()
	}
	httpjson.Write(w, http.StatusOK, struct {
		Flows []health.Flow `json:"flows"`
		httpjson.Clock
	}{nonNil(fs), a.clock()})
	return nil
}

func (a *api) postEvent(w http.ResponseWriter, r *http.Request) error {
	raw, err := readBody(w, r, a.cfg.MaxEventBytes, "event", "max event size")
	if err != nil {
		return err
	}
	// encoding/json would read invalid bytes as U+FFFD and store a name or
	// ID the client never sent.
	if !utf8.Valid(raw) {
		return httperr.BadRequest(fmt.Errorf("event is not valid UTF-8 (at byte %d)", invalidAt(raw)))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var ev eventBody
	if err := dec.Decode(&ev); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return httperr.BadRequest(fmt.Errorf("event %q must be %s, not a JSON %s", ute.Field, jsonType(ute.Type.String()), ute.Value))
		}
		return httperr.BadRequest(fmt.Errorf("event is not valid JSON: %w", err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return httperr.BadRequest(errors.New("event: trailing data after the JSON object: send one event per request"))
	}
	// encoding/json matches the fields' names in any case, the last
	// winning: {"name":"a","Name":"b"} would send b.
	if err := exactFields(raw); err != nil {
		return err
	}
	// The same as invalid bytes, in an escape: a name or ID the client
	// never sent, which two different events would share.
	if at, ok := engine.LoneSurrogate(raw); ok {
		return httperr.BadRequest(errors.New("event " + engine.LoneSurrogateProblem(raw, at)))
	}
	// The engine checks the fields each function reads before it stores
	// anything; what every event a client sends needs is checked here.
	e := engine.Event{Name: ev.Name, ID: ev.ID, Data: ev.Data, TS: ev.TS}
	if err := engine.CheckClientEvent(e); err != nil {
		return err
	}
	sent, err := a.cfg.Engine.Send(r.Context(), e)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusAccepted, map[string]any{"runs": sent})
	return nil
}

func (a *api) listRuns(w http.ResponseWriter, r *http.Request) error {
	f, err := ParseRunFilter(r.URL.Query(), a.cfg.Now())
	if err != nil {
		return err
	}
	runs, err := a.cfg.Engine.Runs(r.Context(), f)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, struct {
		Runs []run.Summary `json:"runs"`
		httpjson.Clock
	}{nonNil(runs), a.clock()})
	return nil
}

func (a *api) getRun(w http.ResponseWriter, r *http.Request) error {
	d, err := a.cfg.Engine.RunDetail(r.Context(), r.PathValue("id"), a.cfg.OutputLimit)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, struct {
		*engine.RunDetail
		httpjson.Clock
	}{d, a.clock()})
	return nil
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := a.cfg.Engine.Cancel(r.Context(), id); err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"id": id, "status": run.Cancelled})
	return nil
}

func (a *api) history(w http.ResponseWriter, r *http.Request) error {
	h, err := a.cfg.Engine.RunHistory(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, struct {
		*engine.RunHistory
		httpjson.Clock
	}{h, a.clock()})
	return nil
}

// rerun re-runs the path's run from the step from_step names, in the
// query or in a JSON body {"from_step": 2} or {"from_step": "save"}; none
// is the first step that did not complete.
func (a *api) rerun(w http.ResponseWriter, r *http.Request) error {
	from, err := fromStep(w, r)
	if err != nil {
		return err
	}
	id, err := a.cfg.Engine.RerunFrom(r.Context(), r.PathValue("id"), from)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusAccepted, map[string]string{"id": id, "rerun_of": r.PathValue("id")})
	return nil
}

// maxRerunBody bounds a re-run's JSON body.
const maxRerunBody = 4096

// fromStep reads a re-run's from_step: the query's, else the JSON body's
// (a number or a string); "" when neither gives one.
func fromStep(w http.ResponseWriter, r *http.Request) (string, error) {
	if v := r.URL.Query().Get("from_step"); v != "" {
		return v, nil
	}
	raw, err := readBody(w, r, maxRerunBody, "re-run body", "")
	if err != nil {
		return "", err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", nil
	}
	var body struct {
		FromStep json.RawMessage `json:"from_step"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return "", httperr.BadRequest(fmt.Errorf("re-run body is not {\"from_step\": N or \"NAME\"}: %w", err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", httperr.BadRequest(errors.New("re-run body: trailing data after the JSON object"))
	}
	if len(body.FromStep) == 0 || string(body.FromStep) == "null" {
		return "", nil
	}
	var name string
	if err := json.Unmarshal(body.FromStep, &name); err == nil {
		if name == "" {
			return "", httperr.BadRequest(errors.New("from_step is empty: give a step's number (from 1) or its name"))
		}
		return name, nil
	}
	var n int
	if err := json.Unmarshal(body.FromStep, &n); err != nil {
		return "", httperr.BadRequest(fmt.Errorf("from_step %s is neither a step's number nor its name", engine.Quote(string(body.FromStep))))
	}
	return strconv.Itoa(n), nil
}

func (a *api) replay(w http.ResponseWriter, r *http.Request) error {
	rep, err := a.cfg.Engine.Replay(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusAccepted, rep)
	return nil
}

func (a *api) dropped(w http.ResponseWriter, r *http.Request) error {
	d, err := a.cfg.Engine.Dropped(r.Context(), r.URL.Query().Get("function"), 100)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, struct {
		Dropped []engine.DroppedEvent `json:"dropped"`
		httpjson.Clock
	}{nonNil(d), a.clock()})
	return nil
}

// versionsView is GET /v1/versions's answer.
type versionsView struct {
	Current string            `json:"current"`
	Others  []run.VersionRuns `json:"others"`
}

func (a *api) versions(w http.ResponseWriter, r *http.Request) error {
	others, err := a.cfg.Engine.OtherVersions(r.Context())
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, versionsView{Current: a.cfg.Engine.AppVersion(), Others: nonNil(others)})
	return nil
}

// moveVersion answers a resume or a cancel of the runs of the path's
// version with what move did.
func (a *api) moveVersion(move func(Engine, context.Context, string) (run.VersionReport, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		rep, err := move(a.cfg.Engine, r.Context(), r.PathValue("version"))
		if err != nil {
			return err
		}
		httpjson.Write(w, http.StatusOK, rep)
		return nil
	}
}

// eventFields are the fields of an event's JSON object, as they must be
// written.
var eventFields = []string{"name", "id", "data", "ts"}

// exactFields refuses an event whose object (valid JSON) names one of
// eventFields in another case.
func exactFields(raw []byte) error {
	var err error
	jsonwalk.Object(raw, func(key, _ []byte) {
		for _, f := range eventFields {
			if err == nil && string(key) != f && strings.EqualFold(string(key), f) {
				err = httperr.BadRequest(fmt.Errorf("event field %s: write it %q, in lower case", engine.Quote(string(key)), f))
			}
		}
	})
	return err
}

// readBody reads r's body, named what in its errors: at most max bytes
// (413 past them, the bound named, and its setting if it has one), and
// within the server's body timeout (408 naming it, not the connection's
// addresses).
func readBody(w http.ResponseWriter, r *http.Request, max int64, what, setting string) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err == nil {
		return raw, nil
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		if setting != "" {
			setting = " (" + setting + ")"
		}
		return nil, httperr.TooLarge(fmt.Errorf("%s is larger than the limit of %d bytes%s", what, max, setting))
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return nil, httperr.Timeout(fmt.Errorf("%s did not arrive within the server's body timeout (--body-timeout)", what))
	}
	return nil, httperr.BadRequest(fmt.Errorf("read the %s: %w", what, err))
}

// invalidAt is the offset of the first byte of b that is not UTF-8.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonType names a Go type of eventBody as JSON does.
func jsonType(goType string) string {
	switch goType {
	case "string":
		return "a string"
	case "time.Time":
		return "an RFC 3339 time string"
	}
	return "JSON " + goType
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
