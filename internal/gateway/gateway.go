package gateway

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/llm"
)

// Gateway is an OpenAI-compatible HTTP proxy that governs one provider key.
// It serves POST /v1/chat/completions (plain and streamed), GET /v1/models,
// GET /v1/flows and GET /metrics. It is an http.Handler: Start it, serve it
// with an http.Server, and Stop it once the server has shut down. A Gateway
// is safe for simultaneous use by multiple goroutines.
type Gateway struct {
	cfg     Config
	client  *llm.Client        // the single upstream's; nil on a gateway of routes only
	gov     *governor.Governor // the single upstream's; nil on a gateway of routes only
	ledger  *quota.Ledger      // gov, when its charges are kept in cfg.Store
	est     *llm.Estimator
	flows   map[string]Flow
	keys    []ClientKey
	m       *gatewayMetrics
	fm      map[string]*flowMetrics // by flow name; read-only after New
	mux     *http.ServeMux
	seq     atomic.Uint64
	scrub   scrubber // every provider key's; empty without one
	line    *line
	places  *places
	retries *retries // what callers did after the gateway's own 429s

	main       *target            // the single upstream, nil on a gateway of routes only
	targets    []*target          // the routed targets, each once (routes.go)
	routes     map[string]*routed // by model name
	modelNames []string           // the routed names, as configured
	// purse keeps the flows' budgets across targets when routes are
	// configured (routes.go); purseFlows are the flows with one.
	purse       *governor.Governor
	purseLedger *quota.Ledger
	purseFlows  map[string]bool

	// stopCtx ends once Config.Stopping closes (see stopping); quit,
	// closed by Stop, ends its watch, which closes watchDone.
	stopWatch sync.Once
	stopCtx   context.Context
	watchDone chan struct{}
	quit      chan struct{}
	quitOnce  sync.Once
}

var _ http.Handler = (*Gateway)(nil)

// UpstreamIdleConns is how many idle connections to the provider the
// gateway keeps when Config.HTTPClient is nil: every waiting caller may be
// sent at once.
const UpstreamIdleConns = 64

// New checks cfg, fills its defaults and returns a Gateway. With a
// Config.Store it restores the key's charges of the last day from it,
// within ctx and at most 30 s. It starts nothing: see Start.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var client *llm.Client
	if cfg.Upstream != "" {
		// A proxy's call lasts as long as its caller wants: a long stream is
		// not cut at the client library's 10-minute default, and a long
		// non-streamed completion gets the HTTP client's 10 minutes for its
		// headers. A caller that leaves ends the call.
		var err error
		client, err = llm.NewClient(llm.Config{BaseURL: cfg.Upstream, APIKey: cfg.APIKey, Profile: cfg.Profile,
			HTTPClient: cfg.HTTPClient, IdleConns: UpstreamIdleConns,
			Now: cfg.Now, Logger: cfg.Logger, Timeouts: llm.Timeouts{FirstByte: 10 * time.Minute, Total: -1}})
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	flows := make([]governor.FlowConfig, 0, len(cfg.Flows)+1)
	byName := make(map[string]Flow, len(cfg.Flows)+1)
	for _, f := range cfg.Flows {
		flows = append(flows, governor.FlowConfig{Name: f.Name, Weight: f.Weight, Priority: f.Priority, Budget: f.Budget})
		byName[f.Name] = f
	}
	if _, ok := byName[DefaultFlow]; !ok {
		flows = append(flows, governor.FlowConfig{Name: DefaultFlow})
		byName[DefaultFlow] = Flow{Name: DefaultFlow}
	}
	for _, k := range cfg.ClientKeys {
		if _, ok := byName[k.Flow]; k.Flow != "" && !ok {
			return nil, fmt.Errorf("gateway: a client key names flow %q, which is not configured", k.Flow)
		}
	}
	var (
		gov    *governor.Governor
		ledger *quota.Ledger
		err    error
	)
	if client != nil {
		if gov, ledger, err = governorOf(ctx, cfg, govFlows(cfg, flows)); err != nil {
			return nil, err
		}
		if cfg.Governor != nil {
			cfg.Key = gov.Stats(cfg.Now()).Key
		}
	}
	est, err := llm.NewEstimator(llm.EstimatorConfig{Profile: cfg.Profile})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	keys := []string{cfg.APIKey}
	for _, m := range cfg.Models {
		for _, t := range m.Targets {
			keys = append(keys, t.APIKey)
		}
	}
	g := &Gateway{cfg: cfg, client: client, gov: gov, ledger: ledger, est: est, flows: byName, keys: cfg.ClientKeys,
		mux: http.NewServeMux(), scrub: newScrubber(keys...), line: newLine(cfg),
		places: newPlaces(cfg.MaxWaiting, cfg.MaxFlowParked), retries: newRetries(cfg.RetryWindow, cfg.MaxFollowedRefusals),
		quit: make(chan struct{})}
	if client != nil {
		g.main = &target{name: cfg.Key, profile: cfg.Profile, client: client, gov: gov, ledger: ledger, est: est}
	}
	if g.purse, g.purseLedger, err = newPurse(ctx, cfg, flows); err != nil {
		return nil, err
	}
	g.purseFlows = map[string]bool{}
	for _, f := range cfg.Flows {
		g.purseFlows[f.Name] = g.purse != nil && !f.Budget.IsZero()
	}
	if err := g.buildRoutes(ctx, flows); err != nil {
		return nil, err
	}
	if cfg.Limits == (governor.Limits{}) && cfg.Governor == nil && client != nil {
		cfg.Logger.Warn("no limits configured: the governor probes the key and learns its limits from the provider's headers and refusals", "key", cfg.Key)
	}
	if g.m, err = newMetrics(g); err != nil {
		return nil, err
	}
	if err := g.m.set.AddClientRetries(cfg.Key, func() []metrics.ClientRetries { return g.retries.snapshot(g.cfg.Now()) }); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.fm = make(map[string]*flowMetrics, len(byName))
	for name := range byName {
		g.fm[name] = g.m.flow(name)
	}
	if g.main != nil {
		g.main.fm = g.fm
	}
	for _, t := range g.targets {
		t.fm = make(map[string]*flowMetrics, len(byName))
		for name := range byName {
			t.fm[name] = g.m.flowOf(t.name, name)
		}
	}
	for _, rt := range []struct {
		method, path string
		h            http.Handler
	}{
		{http.MethodPost, "/v1/chat/completions", g.auth(g.chat)},
		{http.MethodGet, "/v1/models", g.auth(g.models)},
		{http.MethodGet, "/v1/flows", g.auth(g.flowsJSON)},
		{http.MethodGet, "/metrics", g.m.set.Handler(cfg.Logger)},
	} {
		g.mux.Handle(rt.method+" "+rt.path, rt.h)
		g.mux.Handle(rt.path, g.wrongMethod(rt.method))
	}
	g.mux.HandleFunc("/", g.unknownURL)
	return g, nil
}

// governorOf returns the governor the gateway admits against: Config.Governor,
// checked against the flows, or a new one — restored from Config.Store, when
// set, with the ledger that keeps its charges there.
func governorOf(ctx context.Context, cfg Config, flows []governor.FlowConfig) (*governor.Governor, *quota.Ledger, error) {
	if gov := cfg.Governor; gov != nil {
		if cfg.Limits != (governor.Limits{}) || cfg.FixedWindows || cfg.DayBurst != 0 || cfg.Store != nil {
			return nil, nil, errors.New("gateway: with a governor given, its owner sets the limits, the window, the day pacing and the store: leave them zero")
		}
		st := gov.Stats(cfg.Now())
		for _, want := range flows {
			i := slices.IndexFunc(st.Flows, func(f governor.FlowStats) bool { return f.Name == want.Name })
			if i < 0 {
				return nil, nil, fmt.Errorf("gateway: flow %q is not one of the governor's: configure it there", want.Name)
			}
			if got := st.Flows[i]; got.Weight != cmp.Or(want.Weight, 1) || got.Priority != want.Priority {
				return nil, nil, fmt.Errorf("gateway: flow %q has weight %g and priority %d in the governor, %g and %d here", want.Name, got.Weight, got.Priority, cmp.Or(want.Weight, 1), want.Priority)
			}
		}
		return gov, nil, nil
	}
	gcfg := governor.Config{Key: cfg.Key, Limits: cfg.Budget.Limits(cfg.Limits), Price: cfg.Price, FixedWindows: cfg.FixedWindows,
		SettleOutput: cfg.SettleOutput, Flows: flows, Now: cfg.Now, Speed: cfg.Speed, Journal: cfg.journal, Lag: max(cfg.Lag, 0), DayBurst: cfg.DayBurst, Logger: cfg.Logger}
	if cfg.Store == nil {
		gov, err := governor.New(gcfg)
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: %w", err)
		}
		return gov, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ledger, err := quota.Open(ctx, cfg.Store, gcfg, quota.Config{Now: cfg.Now})
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
	}
	return ledger.Governor, ledger, nil
}

// Start writes the key's charges to Config.Store every second, in the
// background, until ctx ends or Stop. Without a Store there is nothing to
// write and it does nothing. Starting again, or after Stop, does nothing.
func (g *Gateway) Start(ctx context.Context) {
	for _, l := range g.ledgers() {
		l.Start(ctx)
	}
}

// ledgers are the ledgers that keep the gateway's charges in Config.Store:
// the single upstream's, each target's and the flows' budgets'.
func (g *Gateway) ledgers() []*quota.Ledger {
	var ls []*quota.Ledger
	if g.ledger != nil {
		ls = append(ls, g.ledger)
	}
	for _, t := range g.targets {
		if t.ledger != nil {
			ls = append(ls, t.ledger)
		}
	}
	if g.purseLedger != nil {
		ls = append(ls, g.purseLedger)
	}
	return ls
}

// Stop ends what Start began, and the watch on Config.Stopping the first
// wait for admission began, and writes the charges not yet kept in
// Config.Store: once it returns nil, nothing the gateway started runs and
// every charge is in the store. It is safe to call twice. Serve no more
// requests after it.
func (g *Gateway) Stop(ctx context.Context) error {
	g.quitOnce.Do(func() { close(g.quit) })
	g.stopWatch.Do(func() {}) // none starts after this; wait for one started
	if g.watchDone != nil {
		<-g.watchDone
	}
	var errs []error
	for _, l := range g.ledgers() {
		errs = append(errs, l.Stop(ctx))
	}
	return errors.Join(errs...)
}

// Governor returns the governor that owns the key, for callers that embed
// the gateway and want its stats.
func (g *Gateway) Governor() *governor.Governor { return g.gov }

// ServeHTTP serves the gateway's routes. Everything it answers passes the
// scrubber, so the provider key never reaches a client, whatever part of
// an answer the provider echoed it in.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(g.scrub) > 0 {
		w = &scrubWriter{ResponseWriter: w, s: g.scrub}
	}
	if r.Method != http.MethodConnect && !cleanPath(r.URL.Path) {
		// Not the mux's redirect, an HTML page a client would follow to a
		// GET: the profile's 404, as for any other URL the gateway lacks.
		g.unknownURL(w, r)
		return
	}
	g.mux.ServeHTTP(w, r)
}

// cleanPath reports whether p is a path as http.ServeMux routes it without
// a redirect: rooted, with no empty, "." or ".." segment.
func cleanPath(p string) bool {
	// Most paths have nothing to clean: no empty, "." or ".." segment.
	if strings.HasPrefix(p, "/") && !strings.Contains(p, "//") && !strings.Contains(p, "/./") && !strings.Contains(p, "/../") &&
		!strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..") {
		return true
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// unknownURL answers a request for a URL the gateway does not serve: 404
// in the profile's error format, with OpenAI's code unknown_url.
func (g *Gateway) unknownURL(w http.ResponseWriter, r *http.Request) {
	(&apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "unknown_url",
		message: fmt.Sprintf("sluice gateway: unknown request URL: %s %s", r.Method, r.URL.Path)}).write(w, g.cfg.Profile)
}

// wrongMethod answers a request to one of the gateway's URLs with a method
// it does not serve there: 405 with Allow, as OpenAI answers GET
// /v1/chat/completions, in the profile's error format. A GET route serves
// HEAD too.
func (g *Gateway) wrongMethod(method string) http.HandlerFunc {
	allow := method
	if method == http.MethodGet {
		allow += ", " + http.MethodHead
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		WriteRefusal(w, g.cfg.Profile, http.StatusMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed for %s: use %s", r.Method, r.URL.Path, method))
	}
}

// WriteError writes a refusal in the profile's error format, for checks a
// server puts in front of the gateway (its Host and Content-Type checks).
func (g *Gateway) WriteError(w http.ResponseWriter, status int, message string) {
	WriteRefusal(w, g.cfg.Profile, status, message)
}

// auth checks the caller's client key when keys are configured, and names
// the caller: its key, and the request's flow — the key's, else
// X-Sluice-Flow, else default.
func (g *Gateway) auth(next func(http.ResponseWriter, *http.Request, caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who := caller{flow: g.flowOf(r.Header.Get(FlowHeader))}
		if len(g.keys) > 0 {
			match := -1
			right := func(got string) bool {
				for i := range g.keys {
					// Compare with every key so timing says nothing of which matched.
					if subtle.ConstantTimeCompare([]byte(got), []byte(g.keys[i].Key)) == 1 {
						match = i
					}
				}
				return match >= 0
			}
			var wait time.Duration
			if g.cfg.Throttle != nil {
				wait, _ = g.cfg.Throttle.CheckBearer(r, right)
			} else {
				got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				right(got)
			}
			if wait > 0 {
				(&apiError{status: http.StatusTooManyRequests, typ: "invalid_request_error", code: "invalid_api_key", retryAfter: wait,
					message: "sluice gateway: too many wrong client keys from your address: try again in " + progress.Span(time.Duration(authlimit.RetryAfter(wait))*time.Second)}).write(w, g.cfg.Profile)
				g.m.requests.WithLabelValues(who.flow, "429").Inc()
				return
			}
			if match < 0 {
				// The key sent is never echoed: it may be a real one sent by mistake.
				(&apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
					message: "sluice gateway: missing or unknown client key (send Authorization: Bearer KEY)"}).write(w, g.cfg.Profile)
				g.m.requests.WithLabelValues(who.flow, "401").Inc()
				return
			}
			who.client = match + 1
			if f := g.keys[match].Flow; f != "" {
				who.flow = f
			}
		}
		next(w, r, who)
	}
}

// flowOf maps a requested flow name to a configured one.
func (g *Gateway) flowOf(name string) string {
	if _, ok := g.flows[name]; ok {
		return name
	}
	return DefaultFlow
}

// models lists the upstream's models.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request, _ caller) {
	var list []llm.Model
	if g.client != nil {
		var err error
		if list, err = g.client.Models(r.Context()); err != nil {
			g.cfg.Logger.Warn("list models", "key", g.cfg.Key, "err", g.scrub.String(err.Error()))
			upstreamError(g.cfg.Profile, err).write(w, g.cfg.Profile)
			return
		}
	}
	data := g.routedModels()
	for _, m := range list {
		if _, routed := g.routes[m.ID]; !routed {
			data = append(data, m.Raw)
		}
	}
	httpjson.Write(w, http.StatusOK, struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{"list", data})
}

// FlowsView is the body of GET /v1/flows.
type FlowsView struct {
	Key    string               `json:"key"`
	Limits map[string]LimitView `json:"limits"`
	// Budget is the key's budget and what it spent in each period, in
	// money; absent without one.
	Budget *BudgetView `json:"budget,omitempty"`
	Flows  []FlowView  `json:"flows"`
	// Models are the routed model names and Targets their targets, each
	// once (routes.go); absent without routes.
	Models  []ModelView  `json:"models,omitempty"`
	Targets []TargetView `json:"targets,omitempty"`
	// Clock is the gateway's clock (Config.Now and Config.Speed), which
	// the flows' times are on: "now" and "speed".
	httpjson.Clock
}

// BudgetView is a budget in money (the unit of the key's prices) and what
// was spent in its period: day, any 24 hours; month, any 30 days. A period
// without a budget is 0.
type BudgetView struct {
	Day        float64 `json:"day"`
	Month      float64 `json:"month"`
	SpentDay   float64 `json:"spent_day"`
	SpentMonth float64 `json:"spent_month"`
}

// budgetView is the budget of allowances budget and spend spent
// (billionths, MPD and MPM), nil when neither is set.
func budgetView(budget, spent governor.Limits) *BudgetView {
	if budget[governor.MPD] == 0 && budget[governor.MPM] == 0 {
		return nil
	}
	return &BudgetView{Day: money(budget[governor.MPD]), Month: money(budget[governor.MPM]),
		SpentDay: money(spent[governor.MPD]), SpentMonth: money(spent[governor.MPM])}
}

func money(nano int64) float64 { return float64(nano) / governor.Nano }

// LimitView is one limit's state.
type LimitView struct {
	Max       int64 `json:"max"`
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
}

// FlowView is one flow's state and totals: the fields every flow's health
// has (health.Flow: its state, done, remaining, last progress, what it
// waits on), then the gateway's own.
//
// A gateway flow is progressing while it admitted a call within
// Config.ProgressWindow, waiting-for-quota while calls of it wait and none
// was admitted within that window, and idle otherwise. Done counts the
// calls admitted (as Admitted does), Remaining the calls waiting (as
// Waiting does), and LastProgressAt is when a call was last admitted since
// the gateway started. WaitingOn names what holds the flow's first waiting
// request back ("tpm", "tpd pacing", "a provider pause", "its turn"), and
// WaitingUntil when that ends as far as the governor knows; both are left
// out when nothing waits. A gateway measures no rate, so rate_per_hour
// and eta are left out.
type FlowView struct {
	health.Flow
	Weight   float64 `json:"weight"`
	Priority int     `json:"priority"`
	Waiting  int     `json:"waiting"`
	// Parked counts the flow's requests answered 429 whose places in line
	// are kept for them (see Config.KeepPlace).
	Parked   int   `json:"parked"`
	Admitted int64 `json:"admitted"`
	// Tokens are charged to the flow's admitted calls, as settled, by kind.
	Tokens map[string]int64 `json:"tokens"`
	// Rejections counts provider rejections of the flow's calls by limit.
	Rejections map[string]int64 `json:"rejections"`
	// Spend is what the flow's calls cost since the gateway started, in
	// money, on a key with a price; Budget is the flow's own budget (a
	// client key's bound to it) and its spend in each period.
	Spend  *float64    `json:"spend,omitempty"`
	Budget *BudgetView `json:"budget,omitempty"`
	// SpendByTarget is what the flow's calls cost on each routed target
	// since the gateway started, in money, on the targets with a price
	// (Spend adds them in). With routes, Budget is the flow's budget
	// across every target and its spend there.
	SpendByTarget map[string]float64 `json:"spend_by_target,omitempty"`
	// ClientRetries are, by client key, what became of the flow's
	// requests the gateway answered 429 itself: how many came back within
	// Config.RetryWindow and how many gave up (metrics.ClientRetries);
	// absent until one is refused.
	ClientRetries []metrics.ClientRetries `json:"client_retries,omitempty"`
	// Cluster, on a process of a cluster (Config.ClusterFlows), is the
	// flow on every process of it, this one too, and in total; the fields
	// above are this process's own.
	Cluster *ClusterFlowView `json:"cluster,omitempty"`
}

// ClusterFlowView is a flow across the processes of a cluster: what each
// last said of it and the sums.
type ClusterFlowView struct {
	Waiting  int64            `json:"waiting"`
	Admitted int64            `json:"admitted"`
	Tokens   map[string]int64 `json:"tokens"`
	Nodes    []NodeFlowView   `json:"nodes"`
}

// NodeFlowView is a flow on one process of a cluster, as it last said.
type NodeFlowView struct {
	Node     string           `json:"node"`
	Waiting  int64            `json:"waiting"`
	Admitted int64            `json:"admitted"`
	Tokens   map[string]int64 `json:"tokens"`
	// At is when the process said it.
	At time.Time `json:"at"`
}

// NodeFlow is what a process of a cluster said of one of its flows (see
// Config.ClusterFlows).
type NodeFlow struct {
	Node, Flow        string
	Waiting, Admitted int64
	Input, Output     int64
	At                time.Time
}

// Flows returns the state GET /v1/flows serves.
func (g *Gateway) Flows() FlowsView {
	now := g.cfg.Now()
	var st governor.Stats
	if g.gov != nil {
		st = g.gov.Stats(now)
	} else {
		// Routes only: the flows as configured, their use on the targets
		// added by addRoutes.
		st.Key = g.cfg.Key
		for name, f := range g.flows {
			st.Flows = append(st.Flows, governor.FlowStats{Name: name, Weight: cmp.Or(f.Weight, 1), Priority: f.Priority})
		}
		slices.SortFunc(st.Flows, func(a, b governor.FlowStats) int { return strings.Compare(a.Name, b.Name) })
	}
	v := FlowsView{Key: st.Key, Limits: map[string]LimitView{}, Flows: make([]FlowView, 0, len(st.Flows)), Clock: httpjson.ClockOf(now, g.cfg.Speed)}
	var budget, spent governor.Limits
	for _, ls := range st.Limits {
		switch {
		case ls.Max == 0:
		case ls.Limit.Budget():
			budget[ls.Limit], spent[ls.Limit] = ls.Max, ls.Used
		default:
			v.Limits[ls.Limit.String()] = LimitView{Max: ls.Max, Used: ls.Used, Remaining: ls.Capacity}
		}
	}
	v.Budget = budgetView(budget, spent)
	retried := g.retries.snapshot(now)
	for _, f := range st.Flows {
		fv := FlowView{Flow: health.Flow{Name: f.Name, Done: f.Admitted, Remaining: int64(f.Waiting)},
			Weight: f.Weight, Priority: f.Priority, Waiting: f.Waiting, Parked: f.Parked, Admitted: f.Admitted,
			Tokens:     tokenMap(f.Tokens.Input, f.Tokens.Output),
			Rejections: map[string]int64{}, Budget: budgetView(f.Budget, f.Spent)}
		if st.Priced {
			spend := money(f.Tokens.Money)
			fv.Spend = &spend
		}
		for l := range governor.NumLimits {
			if n := f.Rejections[l]; n > 0 {
				fv.Rejections[l.String()] = n
			}
		}
		if f.WaitingOn.Kind != "" {
			fv.WaitingOn, fv.WaitingUntil = f.WaitingOn.String(), f.WaitingOn.Until.UTC()
		}
		if fm := g.fm[f.Name]; fm != nil {
			if ns := fm.lastAdmit.Load(); ns != 0 {
				fv.LastProgressAt = time.Unix(0, ns).UTC()
			}
		}
		fv.State = flowState(now, fv.LastProgressAt, g.cfg.ProgressWindow, f.Waiting)
		for _, r := range retried {
			if r.Flow == f.Name {
				fv.ClientRetries = append(fv.ClientRetries, r)
			}
		}
		v.Flows = append(v.Flows, fv)
	}
	g.addRoutes(&v, now)
	g.addCluster(&v)
	return v
}

// addCluster adds to v what every process of the cluster said of its
// flows, when the gateway runs on one: a flow only other processes have is
// listed too, with nothing of this process's own.
func (g *Gateway) addCluster(v *FlowsView) {
	if g.cfg.ClusterFlows == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadTimeout)
	defer cancel()
	rows, err := g.cfg.ClusterFlows(ctx)
	if err != nil {
		g.cfg.Logger.Warn("sluice gateway: cannot read the cluster's flows; /v1/flows shows this process's", "err", err)
		return
	}
	at := map[string]int{}
	for i, f := range v.Flows {
		at[f.Name] = i
	}
	for _, r := range rows {
		i, ok := at[r.Flow]
		if !ok {
			i = len(v.Flows)
			at[r.Flow] = i
			v.Flows = append(v.Flows, FlowView{Flow: health.Flow{Name: r.Flow, State: health.Idle},
				Tokens: tokenMap(0, 0), Rejections: map[string]int64{}})
		}
		f := &v.Flows[i]
		if f.Cluster == nil {
			f.Cluster = &ClusterFlowView{Tokens: tokenMap(0, 0)}
		}
		c := f.Cluster
		c.Waiting += r.Waiting
		c.Admitted += r.Admitted
		c.Tokens["input"] += r.Input
		c.Tokens["output"] += r.Output
		c.Tokens["total"] += r.Input + r.Output
		c.Nodes = append(c.Nodes, NodeFlowView{Node: r.Node, Waiting: r.Waiting, Admitted: r.Admitted,
			Tokens: tokenMap(r.Input, r.Output), At: r.At.UTC()})
		if f.Waiting == 0 && f.Admitted == 0 && c.Waiting > 0 {
			f.State = health.WaitingForQuota // only other processes have it
		}
	}
}

// tokenMap is a flow's tokens by kind, as /v1/flows shows them.
func tokenMap(input, output int64) map[string]int64 {
	return map[string]int64{"input": input, "output": output, "total": input + output}
}

// clusterReadTimeout bounds the read of the cluster's flows for /v1/flows.
const clusterReadTimeout = 2 * time.Second

// flowState is a gateway flow's state: progressing while it admitted a
// call within window, waiting-for-quota while calls wait, idle otherwise.
func flowState(now, lastAdmit time.Time, window time.Duration, waiting int) health.State {
	switch {
	case !lastAdmit.IsZero() && now.Sub(lastAdmit) < window:
		return health.Progressing
	case waiting > 0:
		return health.WaitingForQuota
	}
	return health.Idle
}

func (g *Gateway) flowsJSON(w http.ResponseWriter, _ *http.Request, _ caller) {
	httpjson.Write(w, http.StatusOK, g.Flows())
}
