package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/llm"
)

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
		if serveapp.GatewayPath(r.URL.Path) {
			switch {
			case f.IsStopping():
				w.Header().Set("Retry-After", "1")
				gateway.WriteRefusal(w, f.profile, http.StatusServiceUnavailable, "sluice gateway: "+httpapi.StoppingMessage)
				return
			case !f.ready.Load():
				w.Header().Set("Retry-After", "1")
				gateway.WriteRefusal(w, f.profile, http.StatusServiceUnavailable, "sluice is starting; retry shortly")
				return
			}
		}
		f.Starting.ServeHTTP(w, r)
	}), gc)
	guarded := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if serveapp.GatewayPath(r.URL.Path) {
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

// gatewayPlan is the gateway serve was asked for (--gateway), checked
// before anything listens.
type gatewayPlan struct {
	flows         []gateway.Flow
	keys          []gateway.ClientKey
	maxFlowParked int // --max-flow-parked
}

// planServeGateway reads the gateway's flows (--flow, or flows: in the
// file) and client keys: those in clientEnv, and the API's token.
func planServeGateway(env *cli.Env, file serveFile, refuse func(string, error) error, flows flowFlags, clientEnv, token string) (*gatewayPlan, error) {
	p := &gatewayPlan{flows: flows}
	if len(flows) == 0 {
		for i, f := range file.Flows {
			fl, err := newFlow(f.Name, f.Weight, f.Priority, f.DefaultMaxTokens)
			if err != nil {
				return nil, refuse(fmt.Sprintf("flows[%d]", i), err)
			}
			if err := fl.Budget.UnmarshalText([]byte(f.Budget)); err != nil {
				return nil, refuse(fmt.Sprintf("flows[%d].budget", i), err)
			}
			p.flows = append(p.flows, fl)
		}
	}
	p.keys = parseClientKeys(env.Getenv(clientEnv))
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
		out = append(out, governor.FlowConfig{Name: f.Name, Weight: f.Weight, Priority: f.Priority, Budget: f.Budget})
	}
	if !slices.ContainsFunc(p.flows, func(f gateway.Flow) bool { return f.Name == gateway.DefaultFlow }) {
		out = append(out, governor.FlowConfig{Name: gateway.DefaultFlow})
	}
	return out
}

// build returns the gateway, nil when none was asked for: in front of the
// pipeline's provider, admitting against the app's governor of its key,
// recording into the app's metrics, and counting wrong client keys toward
// the app's throttle of wrong tokens, since the API's token is one of them.
func (p *gatewayPlan) build(ctx context.Context, app *sluice.App, providerURL, profile, keyEnv string, env *cli.Env, logger *slog.Logger) (*gateway.Gateway, error) {
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
		key = env.Getenv(keyEnv)
	}
	return gateway.New(ctx, gateway.Config{Upstream: providerURL, Profile: prof, APIKey: key, Governor: gov,
		Flows: p.flows, ClientKeys: p.keys, Throttle: app, MaxFlowParked: p.maxFlowParked, Metrics: set, Logger: cmp.Or(logger, slog.Default()), Stopping: ctx.Done(),
		ClusterFlows: clusterFlows(app)})
}

// clusterFlows reads the flows of every process of app's cluster for the
// gateway's /v1/flows; nil when app is not one of a cluster.
func clusterFlows(app *sluice.App) func(context.Context) ([]gateway.NodeFlow, error) {
	return func(ctx context.Context) ([]gateway.NodeFlow, error) {
		rows, err := app.ClusterFlows(ctx, "")
		out := make([]gateway.NodeFlow, len(rows))
		for i, r := range rows {
			out[i] = gateway.NodeFlow{Node: r.Node, Flow: r.Flow, Waiting: int64(r.Waiting), Admitted: r.Admitted,
				Input: r.Tokens.Input, Output: r.Tokens.Output, At: r.At}
		}
		return out, err
	}
}
