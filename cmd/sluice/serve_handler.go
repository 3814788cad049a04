package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/llm"
)

// serveParts are what one sluice serve process answers for on its one
// address.
type serveParts struct {
	app *sluice.App
	api sluice.HandlerConfig
	// metricsToken guards /metrics; empty: the API's token, and none
	// when the API has none (loopback).
	metricsToken string
	gateway      *gateway.Gateway // nil: none configured
	dashboard    http.Handler     // nil: none
}

// serveHandler routes the parts: the event and run API under /v1, /healthz
// and /readyz; /metrics; with the gateway, every other /v1 path (its
// /v1/chat/completions and /v1/models, and the profile's JSON 404 or 405
// for the rest), with its flows added to GET /v1/flows; the dashboard for
// the rest.
func serveHandler(p serveParts) http.Handler {
	mux := http.NewServeMux()
	api := p.app.Handler(p.api)
	mux.Handle("/healthz", api)
	mux.Handle("/readyz", api)
	mux.Handle("GET /metrics", bearer(cmpToken(p.metricsToken, p.api.Token), p.app.MetricsHandler()))
	if p.dashboard != nil {
		mux.Handle("/", p.dashboard)
	} else {
		mux.Handle("/", api)
	}
	mux.Handle("/v1/", api)
	if p.gateway == nil {
		return mux
	}
	mux.Handle("GET /v1/flows", withGatewayFlows(api, p.gateway))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gatewayPath(r.URL.Path) {
			// As it came: the mux would answer a path to clean with a
			// redirect, an HTML page.
			p.gateway.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// gatewayPath reports whether path is the gateway's under serve --gateway:
// under /v1 and not sluice's own API's (httpapi.OwnsPath).
func gatewayPath(path string) bool {
	return strings.HasPrefix(path, "/v1/") && !httpapi.OwnsPath(path)
}

// serveFront is what serve's server answers with: start-up's answers
// (httpapi.Starting), then those of the handler given to Ready. With the
// gateway, what is refused on the gateway's paths before the gateway sees
// it (the guard's Host, Origin and Content-Type checks, and start-up's 503)
// is written in the profile's error format, as the gateway writes its own:
// an OpenAI client then shows the refusal's message.
type serveFront struct {
	*httpapi.Starting
	profile llm.Profile
	gateway bool
	ready   atomic.Bool
}

// newServeFront returns a front starting in phase; profile is the
// gateway's, when withGateway.
func newServeFront(phase string, withGateway bool, profile string) (*serveFront, error) {
	f := &serveFront{Starting: httpapi.NewStarting(phase), gateway: withGateway}
	if withGateway {
		var err error
		if f.profile, err = llm.ParseProfile(profile); err != nil {
			return nil, fmt.Errorf("--profile: %w", err)
		}
	}
	return f, nil
}

// Ready hands every request from now on to h.
func (f *serveFront) Ready(h http.Handler) {
	f.Starting.Ready(h)
	f.ready.Store(true)
}

// server returns serve's server: f behind the guard configured by gc.
func (f *serveFront) server(gc guard.Config) *http.Server {
	if !f.gateway {
		return guard.NewServer(f.Starting, gc)
	}
	// The guard's refusals name no request: a request to a gateway path
	// reaches the guard with its writer marked as one.
	gc.Error = func(w http.ResponseWriter, status int, message string) {
		if _, ok := w.(*gatewayWriter); ok {
			gateway.WriteRefusal(w, f.profile, status, message)
			return
		}
		httpjson.Error(w, status, message)
	}
	srv := guard.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.ready.Load() && gatewayPath(r.URL.Path) {
			w.Header().Set("Retry-After", "1")
			gateway.WriteRefusal(w, f.profile, http.StatusServiceUnavailable, "sluice is starting; retry shortly")
			return
		}
		f.Starting.ServeHTTP(w, r)
	}), gc)
	guarded := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gatewayPath(r.URL.Path) {
			w = &gatewayWriter{w}
		}
		guarded.ServeHTTP(w, r)
	})
	return srv
}

// gatewayWriter marks the writer of a request to a gateway path.
type gatewayWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the connection.
func (w *gatewayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// dashboardForm reports whether r goes to the dashboard, whose forms carry
// a CSRF token it checks: everything but the API, /metrics and the probes.
func dashboardForm(r *http.Request) bool {
	p := r.URL.Path
	return !strings.HasPrefix(p, "/v1/") && p != "/metrics" && p != "/healthz" && p != "/readyz"
}

func cmpToken(own, shared string) string {
	if own != "" {
		return own
	}
	return shared
}

// bearer requires token as "Authorization: Bearer TOKEN" when it is set.
func bearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			httpjson.Error(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// withGatewayFlows answers GET /v1/flows with the app's flows (its
// backfills), as the API answers them, followed by the gateway's, in the
// one schema both use; the gateway's key and limits are added as the
// gateway alone gives them. Anything but a 200 from the API (a missing
// token, a store not ready) is passed on as it is.
func withGatewayFlows(api http.Handler, gw *gateway.Gateway) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &buffered{header: http.Header{}, code: http.StatusOK}
		api.ServeHTTP(rec, r)
		var got struct {
			Flows []json.RawMessage `json:"flows"`
		}
		if rec.code != http.StatusOK || json.Unmarshal(rec.body.Bytes(), &got) != nil {
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.code)
			_, _ = w.Write(rec.body.Bytes())
			return
		}
		v := gw.Flows()
		flows := got.Flows
		for _, f := range v.Flows {
			raw, err := json.Marshal(f)
			if err != nil {
				httpjson.Error(w, http.StatusInternalServerError, "encode the gateway's flows")
				return
			}
			flows = append(flows, bytes.TrimSpace(raw))
		}
		if flows == nil {
			flows = []json.RawMessage{}
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"key": v.Key, "limits": v.Limits, "flows": flows})
	})
}

// buffered keeps a response in memory: the API's flows, before the
// gateway's are added.
type buffered struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *buffered) Header() http.Header         { return b.header }
func (b *buffered) WriteHeader(code int)        { b.code = code }
func (b *buffered) Write(p []byte) (int, error) { return b.body.Write(p) }

// gatewayPlan is the gateway serve was asked for (--gateway), checked
// before anything listens.
type gatewayPlan struct {
	flows         []gateway.Flow
	keys          []gateway.ClientKey
	maxFlowParked int // --max-flow-parked
}

// planServeGateway reads the gateway's flows (--flow, or flows: in the
// file) and client keys: those in clientEnv, and the API's token.
func planServeGateway(env *cmdEnv, file serveFile, refuse func(string, error) error, flows flowFlags, clientEnv, token string) (*gatewayPlan, error) {
	p := &gatewayPlan{flows: flows}
	if len(flows) == 0 {
		for i, f := range file.Flows {
			fl, err := newFlow(f.Name, f.Weight, f.Priority, f.DefaultMaxTokens)
			if err != nil {
				return nil, refuse(fmt.Sprintf("flows[%d]", i), err)
			}
			p.flows = append(p.flows, fl)
		}
	}
	p.keys = parseClientKeys(env.getenv(clientEnv))
	if token != "" {
		p.keys = append(p.keys, gateway.ClientKey{Key: token})
	}
	return p, nil
}

// governorFlows are the flows the key's governor must know for the
// gateway to share it: the gateway's and its default.
func (p *gatewayPlan) governorFlows() []governor.FlowConfig {
	if p == nil {
		return nil
	}
	var out []governor.FlowConfig
	for _, f := range p.flows {
		out = append(out, governor.FlowConfig{Name: f.Name, Weight: f.Weight, Priority: f.Priority})
	}
	if !slices.ContainsFunc(p.flows, func(f gateway.Flow) bool { return f.Name == gateway.DefaultFlow }) {
		out = append(out, governor.FlowConfig{Name: gateway.DefaultFlow})
	}
	return out
}

// build returns the gateway, nil when none was asked for: in front of the
// pipeline's provider, admitting against the app's governor of its key and
// recording into the app's metrics.
func (p *gatewayPlan) build(ctx context.Context, app *sluice.App, providerURL, profile, keyEnv string, env *cmdEnv, logger *slog.Logger) (*gateway.Gateway, error) {
	if p == nil {
		return nil, nil
	}
	gov, err := app.Governor("")
	if err != nil {
		return nil, err
	}
	set, err := metrics.On(app.MetricsRegistry())
	if err != nil {
		return nil, err
	}
	prof, err := llm.ParseProfile(profile)
	if err != nil {
		return nil, err
	}
	key := ""
	if keyEnv != "" {
		key = env.getenv(keyEnv)
	}
	return gateway.New(ctx, gateway.Config{Upstream: providerURL, Profile: prof, APIKey: key, Governor: gov,
		Flows: p.flows, ClientKeys: p.keys, MaxFlowParked: p.maxFlowParked, Metrics: set, Logger: cmp.Or(logger, slog.Default()), Stopping: ctx.Done()})
}
