package serveapp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/httpjson"
)

// Parts are what one sluice serve process answers for on its one address.
type Parts struct {
	App *sluice.App
	API sluice.HandlerConfig
	// MetricsToken guards /metrics; empty: the API's token, and none
	// when the API has none (loopback). Either way its wrong tokens count
	// toward the app's one throttle (App.CheckBearer), the API's and the
	// dashboard's: a guesser gains no rate by spreading its guesses over
	// the doors, whichever token each takes.
	MetricsToken string
	Gateway      *gateway.Gateway // nil: none configured
	Dashboard    http.Handler     // nil: none
}

var _ httpapi.Throttle = (*sluice.App)(nil)

// Handler routes the parts: the event and run API under /v1, /healthz
// and /readyz; /metrics; with the gateway, every other /v1 path (its
// /v1/chat/completions and /v1/models, and the profile's JSON 404 or 405
// for the rest), with its flows added to GET /v1/flows; the dashboard for
// the rest.
func Handler(p Parts) http.Handler {
	mux := http.NewServeMux()
	api := p.App.Handler(p.API)
	mux.Handle("/healthz", api)
	mux.Handle("/readyz", api)
	mux.Handle("GET /metrics", httpapi.RequireBearer(cmpToken(p.MetricsToken, p.API.Token), p.App, p.App.MetricsHandler()))
	if p.Dashboard != nil {
		mux.Handle("/", p.Dashboard)
	} else {
		mux.Handle("/", api)
	}
	mux.Handle("/v1/", api)
	if p.Gateway == nil {
		return mux
	}
	mux.Handle("GET /v1/flows", withGatewayFlows(api, p.Gateway))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if GatewayPath(r.URL.Path) {
			// As it came: the mux would answer a path to clean with a
			// redirect, an HTML page.
			p.Gateway.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// GatewayPath reports whether path is the gateway's under serve --gateway:
// under /v1 and not sluice's own API's (httpapi.OwnsPath).
func GatewayPath(path string) bool {
	return strings.HasPrefix(path, "/v1/") && !httpapi.OwnsPath(path)
}

// DashboardForm reports whether r goes to the dashboard, whose forms carry
// a CSRF token it checks: everything but the API, /metrics and the probes.
func DashboardForm(r *http.Request) bool {
	p := r.URL.Path
	return !strings.HasPrefix(p, "/v1/") && p != "/metrics" && p != "/healthz" && p != "/readyz"
}

func cmpToken(own, shared string) string {
	if own != "" {
		return own
	}
	return shared
}

// withGatewayFlows answers GET /v1/flows with the app's flows (its
// backfills), as the API answers them, followed by the gateway's, in the
// one schema both use; the gateway's key and limits are added as the
// gateway alone gives them, and the app's clock as the API gives it. Anything but a 200 from the API (a missing
// token, a store not ready) is passed on as it is.
func withGatewayFlows(api http.Handler, gw *gateway.Gateway) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &buffered{header: http.Header{}, code: http.StatusOK}
		api.ServeHTTP(rec, r)
		var got struct {
			Flows []json.RawMessage `json:"flows"`
			httpjson.Clock
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
		httpjson.Write(w, http.StatusOK, struct {
			Key    string                       `json:"key"`
			Limits map[string]gateway.LimitView `json:"limits"`
			Flows  []json.RawMessage            `json:"flows"`
			httpjson.Clock
		}{v.Key, v.Limits, flows, got.Clock})
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
