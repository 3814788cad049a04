package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/llm"
)

// Routes: one model name, several targets.
//
// A routed request is priced for each target of its model (each target's
// estimator, profile and limits), and the model's route.Router picks one
// target before admission. The request then waits in that target's line
// only, goes to that target's upstream with its model name and key, is
// settled on its governor, and its outcome is told to the router. A call
// is never sent to two targets: when the picked target fails, the caller
// gets the error, and its next request is routed again.
//
// A flow's own budget (a client key's) holds across every target of the
// gateway, and the single upstream's key too: with routes configured the
// flows' budgets are kept by one governor of money only, the purse, on
// which a call of a flow with a budget reserves its worst-case price on
// the target picked before it waits on that target; the charge is settled
// with what the call cost there, or given back when it was not made. So
// the flow's calls on all targets together never cost more than its
// budget, in any 24 hours or 30 days, and the purse's charges are kept in
// Config.Store like a key's, under PurseKey.

// TargetHeader names, on every answer to a routed request, the target it
// was made on (or would have been).
const TargetHeader = "X-Sluice-Target"

// PurseSuffix ends the name under which the flows' budgets across targets
// are kept in Config.Store: Config.Key + PurseSuffix.
const PurseSuffix = ".flow-budgets"

var targetName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// target is one provider key and model the gateway calls: the single
// upstream, or a routed model's target.
type target struct {
	name    string
	model   string // the upstream's model name a routed request is rewritten to
	profile llm.Profile
	cfg     Target // as configured; its APIKey is never shown
	client  *llm.Client
	gov     *governor.Governor
	ledger  *quota.Ledger
	est     *llm.Estimator
	fm      map[string]*flowMetrics // by flow name; read-only after New
	sent    atomic.Int64            // calls made on it
}

// routed is a model name's route: its router and its targets, in the
// router's order.
type routed struct {
	name    string
	router  *route.Router
	targets []*target
}

// String describes the target with its key redacted.
func (t Target) String() string {
	return fmt.Sprintf("gateway.Target{Name: %q, Upstream: %q, Profile: %q, Model: %q, Limits: %q, APIKey: [redacted]}",
		t.Name, t.Upstream, t.Profile, t.Model, t.Limits.String())
}

// GoString redacts %#v as well.
func (t Target) GoString() string { return t.String() }

// checkUpstream checks an upstream's URL.
func checkUpstream(s string) error {
	u, err := url.Parse(s)
	if s == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("upstream %q is not an http(s) URL", s)
	}
	return nil
}

// checkTargetUpstream checks a target's upstream: an http(s) URL without
// credentials in it, which would reach what the gateway shows of it.
func checkTargetUpstream(s string) error {
	if err := checkUpstream(s); err != nil {
		return err
	}
	if u, _ := url.Parse(s); u.User != nil {
		return fmt.Errorf("upstream %q has credentials in it: give the key as the target's key", u.Redacted())
	}
	return nil
}

// validateModels checks Config.Models.
func (c Config) validateModels() error {
	if len(c.Models) == 0 {
		return nil
	}
	if len(c.Models) > MaxModels {
		return fmt.Errorf("gateway: %d models, at most %d", len(c.Models), MaxModels)
	}
	if c.Governor != nil {
		return errors.New("gateway: routes need governors of the gateway's own: Models cannot be set with a Governor given")
	}
	models := map[string]bool{}
	targets := map[string]Target{}
	priced := !c.Price.IsZero()
	for i, m := range c.Models {
		where := fmt.Sprintf("gateway: model %q", m.Name)
		if strings.TrimSpace(m.Name) == "" || len(m.Name) > 256 {
			return fmt.Errorf("gateway: model %d: a name of 1 to 256 characters is needed", i+1)
		}
		if models[m.Name] {
			return fmt.Errorf("%s is listed twice", where)
		}
		models[m.Name] = true
		if len(m.Targets) == 0 || len(m.Targets) > route.MaxTargets {
			return fmt.Errorf("%s: %d targets: want 1 to %d", where, len(m.Targets), route.MaxTargets)
		}
		seen := map[string]bool{}
		for _, t := range m.Targets {
			if !targetName.MatchString(t.Name) {
				return fmt.Errorf("%s: target name %q: want 1 to 64 letters, digits, '.', '_' or '-'", where, t.Name)
			}
			if seen[t.Name] {
				return fmt.Errorf("%s: target %q is listed twice", where, t.Name)
			}
			seen[t.Name] = true
			tw := fmt.Sprintf("%s: target %q", where, t.Name)
			if t.Name == c.Key || t.Name == c.Key+PurseSuffix {
				return fmt.Errorf("%s: the name is the gateway's key's (key_name): give the target another", tw)
			}
			if err := checkTargetUpstream(t.Upstream); err != nil {
				return fmt.Errorf("%s: %w", tw, err)
			}
			if t.Profile != "" {
				if _, err := llm.ParseProfile(string(t.Profile)); err != nil {
					return fmt.Errorf("%s: %w", tw, err)
				}
			}
			if strings.TrimSpace(t.Model) == "" || len(t.Model) > 256 {
				return fmt.Errorf("%s: the upstream's model name (model) is needed, at most 256 characters", tw)
			}
			for l := range governor.NumLimits {
				if t.Limits[l] < 0 {
					return fmt.Errorf("%s: limit %s is negative", tw, l)
				}
			}
			if err := t.Budget.Validate(t.Price); err != nil {
				return fmt.Errorf("%s: %w", tw, err)
			}
			if t.APIKey != "" && t.APIKey == t.Name {
				return fmt.Errorf("%s: the name is the key itself", tw)
			}
			if was, ok := targets[t.Name]; ok && was != t {
				return fmt.Errorf("%s: another model lists a target of that name configured otherwise: a target is one key and model, listed the same way wherever it is", tw)
			}
			targets[t.Name] = t
			priced = priced || !t.Price.IsZero()
		}
		for _, d := range []time.Duration{m.MaxWait, m.Cooldown, m.MaxCooldown} {
			if d > route.MaxDuration {
				return fmt.Errorf("%s: a wait or cooldown over %v", where, route.MaxDuration)
			}
		}
	}
	for _, f := range c.Flows {
		if f.Budget.IsZero() {
			continue
		}
		if err := f.Budget.Validate(governor.Price{Input: 1}); err != nil {
			return fmt.Errorf("gateway: flow %q: %w", f.Name, err)
		}
		if !priced {
			return fmt.Errorf("gateway: flow %q: a budget needs a price: of the key or of a target, to know what a call costs", f.Name)
		}
	}
	return nil
}

// purseBudgets reports whether the flows' budgets are kept by the purse
// (routes are configured) rather than by the single upstream's governor.
func (c Config) purseBudgets() bool { return len(c.Models) > 0 }

// govFlows are the flows as a governor of the gateway's targets takes
// them: without budgets when the purse keeps them.
func govFlows(cfg Config, flows []governor.FlowConfig) []governor.FlowConfig {
	if !cfg.purseBudgets() {
		return flows
	}
	out := make([]governor.FlowConfig, len(flows))
	for i, f := range flows {
		f.Budget = governor.Budget{}
		out[i] = f
	}
	return out
}

// The purse prices a call's money as tokens: one input token is one
// billionth of the unit of money (a price of 0.001 per million tokens), so
// a flow's budget in it is the same amount of money as in the targets'.
var pursePrice = governor.Price{Input: 0.001}

// purseCost is the purse's charge for money billionths.
func purseCost(money int64) governor.Cost { return governor.Cost{Input: money} }

// newPurse returns the governor that keeps the flows' budgets across
// targets, nil when no flow has one or no route is configured.
func newPurse(ctx context.Context, cfg Config, flows []governor.FlowConfig) (*governor.Governor, *quota.Ledger, error) {
	if !cfg.purseBudgets() {
		return nil, nil, nil
	}
	var with []governor.FlowConfig
	monthly := false
	for _, f := range flows {
		if !f.Budget.IsZero() {
			with = append(with, governor.FlowConfig{Name: f.Name, Budget: f.Budget})
			monthly = monthly || f.Budget.Month > 0
		}
	}
	if len(with) == 0 {
		return nil, nil, nil
	}
	// No limit of its own binds: it has one, far above any budget, so that
	// it does not probe, and a month's, so that it keeps 30 days of charges
	// when a flow has a budget per month.
	var ls governor.Limits
	ls[governor.MPD] = governor.MaxBudget * governor.Nano
	if monthly {
		ls[governor.MPM] = governor.MaxBudget * governor.Nano
	}
	gcfg := governor.Config{Key: cfg.Key + PurseSuffix, Limits: ls, Price: pursePrice, Flows: with, Now: cfg.Now, Speed: cfg.Speed,
		DayBurst: -1, Logger: cfg.Logger}
	if cfg.Store == nil {
		g, err := governor.New(gcfg)
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: flows' budgets: %w", err)
		}
		return g, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := quota.Open(ctx, cfg.Store, gcfg, quota.Config{Now: cfg.Now})
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: flows' budgets: %w", err)
	}
	return l.Governor, l, nil
}

// buildRoutes builds a target, with its governor, for every target of
// Config.Models, and a router for every model.
func (g *Gateway) buildRoutes(ctx context.Context, flows []governor.FlowConfig) error {
	cfg := g.cfg
	if len(cfg.Models) == 0 {
		return nil
	}
	g.routes = make(map[string]*routed, len(cfg.Models))
	byName := map[string]*target{}
	for _, m := range cfg.Models {
		rt := &routed{name: m.Name}
		var rts []route.Target
		for _, tc := range m.Targets {
			t := byName[tc.Name]
			if t == nil {
				var err error
				if t, err = g.newTarget(ctx, tc, flows); err != nil {
					return err
				}
				byName[tc.Name] = t
				g.targets = append(g.targets, t)
			}
			rt.targets = append(rt.targets, t)
			rts = append(rts, route.Target{Name: t.name, Governor: t.gov})
		}
		r, err := route.New(route.Config{Name: m.Name, Targets: rts, Rule: m.Rule, MaxWait: m.MaxWait,
			Failures: m.Failures, Cooldown: m.Cooldown, MaxCooldown: m.MaxCooldown})
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		rt.router = r
		g.routes[m.Name] = rt
		g.modelNames = append(g.modelNames, m.Name)
	}
	return nil
}

// newTarget builds a routed target: its client, its governor (restored
// from Config.Store under its name) and its estimator.
func (g *Gateway) newTarget(ctx context.Context, tc Target, flows []governor.FlowConfig) (*target, error) {
	cfg := g.cfg
	p, err := llm.ParseProfile(string(tc.Profile))
	if err != nil {
		return nil, fmt.Errorf("gateway: target %q: %w", tc.Name, err)
	}
	if p == llm.Anthropic {
		tc.SettleOutput = true
	}
	client, err := llm.NewClient(llm.Config{BaseURL: tc.Upstream, APIKey: tc.APIKey, Profile: p,
		HTTPClient: cfg.HTTPClient, IdleConns: UpstreamIdleConns,
		Now: cfg.Now, Logger: cfg.Logger, Timeouts: llm.Timeouts{FirstByte: 10 * time.Minute, Total: -1}})
	if err != nil {
		return nil, fmt.Errorf("gateway: target %q: %w", tc.Name, err)
	}
	tcfg := cfg
	tcfg.Key, tcfg.Limits, tcfg.Price, tcfg.Budget = tc.Name, tc.Limits, tc.Price, tc.Budget
	tcfg.FixedWindows, tcfg.SettleOutput, tcfg.Governor, tcfg.journal = tc.FixedWindows, tc.SettleOutput, nil, nil
	gov, ledger, err := governorOf(ctx, tcfg, govFlows(cfg, flows))
	if err != nil {
		return nil, fmt.Errorf("gateway: target %q: %w", tc.Name, errors.Unwrap(err))
	}
	est, err := llm.NewEstimator(llm.EstimatorConfig{Profile: p})
	if err != nil {
		return nil, fmt.Errorf("gateway: target %q: %w", tc.Name, err)
	}
	if tc.Limits == (governor.Limits{}) {
		cfg.Logger.Warn("no limits configured for a target: its governor probes the key and learns its limits from the provider's headers and refusals", "target", tc.Name)
	}
	return &target{name: tc.Name, model: tc.Model, profile: p, cfg: tc, client: client, gov: gov, ledger: ledger, est: est}, nil
}

// pickTarget picks the target of a routed request: the one whose place in
// line an earlier attempt of the same request kept, when it is healthy,
// else the router's choice. It sets the call's target, request, cost and
// body; an error is the answer.
func (c *chatCall) pickTarget(rt *routed, body []byte) *apiError {
	g := c.g
	// The request is re-encoded for its target (its model), so it is read whole.
	req, err := llm.DecodeChatRequest(body)
	if err != nil {
		return badRequest("sluice gateway: " + strings.TrimPrefix(err.Error(), "llm: "))
	}
	c.rt = rt
	// A request names its kept place by the body its caller sent: the
	// same whichever target it went to.
	c.key, c.keyed = keyOf(c.r, c.who.flow, body), true
	now := g.cfg.Now()
	reqs := make([]*llm.ChatRequest, len(rt.targets))
	costs := make([]governor.Cost, len(rt.targets))
	priced := make([]bool, len(rt.targets))
	costOf := func(i int) governor.Cost {
		if !priced[i] {
			// Priced under the target's model name, as its estimator learns it.
			on := *req
			on.Model = rt.targets[i].model
			reqs[i], costs[i] = g.withMaxTokensOn(rt.targets[i], &on, c.who.flow)
			priced[i] = true
		}
		return costs[i]
	}
	idx := -1
	if !g.places.empty() {
		if kept, kt := g.places.takeOn(c.key, now); kept != nil {
			i := slices.Index(rt.targets, kt)
			if i >= 0 && rt.router.Stats(now)[i].Until.IsZero() {
				idx, c.kept = i, kept
			} else {
				kept.Cancel(now) // its target is failing, or not this route's
			}
		}
	}
	if idx < 0 {
		ch, err := rt.router.Pick(now, c.who.flow, costOf)
		if err != nil {
			// Priced as for the first target that refused it, for the hint.
			c.req, c.cost = req, governor.Cost{}
			if tl, ok := errors.AsType[*route.TooLargeError](err); ok {
				if i := slices.IndexFunc(rt.targets, func(t *target) bool { return t.name == tl.Targets[0] }); i >= 0 && priced[i] {
					c.req, c.cost = reqs[i], costs[i]
				}
			}
			return c.routeError(rt, err)
		}
		idx, c.picked = ch.Index, true
	}
	c.t, c.tIndex = rt.targets[idx], idx
	cost := costOf(idx)
	out := *reqs[idx] // a copy: reqs[idx] may be the one priced
	c.req, c.cost = &out, cost
	if !out.Stream {
		if c.body, err = json.Marshal(c.req); err != nil {
			return badRequest("sluice gateway: " + strings.TrimPrefix(err.Error(), "llm: "))
		}
		*c.req = llm.ChatRequest{Model: c.req.Model, MaxTokens: c.req.MaxTokens, CompletionTokensName: c.req.CompletionTokensName}
	}
	return nil
}

// routeError is the answer to a request no target can take.
func (c *chatCall) routeError(rt *routed, err error) *apiError {
	if out, ok := errors.AsType[*route.OutError](err); ok {
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "targets_failing",
			message: fmt.Sprintf("sluice gateway: every target of model %q is failing; the first gets a call again in %s. The request was not sent.",
				rt.name, max(out.Wait, time.Millisecond).Round(time.Millisecond)),
			retryAfter: max(out.Wait, time.Millisecond)}
	}
	if tl, ok := errors.AsType[*route.TooLargeError](err); ok {
		// Each target's refusal: the first's, in its words, with the others named.
		e := c.refuse(tl.Errs[0])
		if len(tl.Targets) > 1 {
			e.message += fmt.Sprintf(" (model %q: no target can ever take it: %s)", rt.name, strings.Join(tl.Targets, ", "))
		}
		return e
	}
	return c.refuse(err)
}

// done tells the router how the call on its target went.
func (c *chatCall) done() {
	if c.rt == nil || c.t == nil {
		return
	}
	c.rt.router.Done(c.g.cfg.Now(), c.tIndex, c.outcome)
}

// withMaxTokensOn is withMaxTokens for target t: its profile names the
// maximum, its estimator prices the request, its limits bound the default.
func (g *Gateway) withMaxTokensOn(t *target, req *llm.ChatRequest, flow string) (*llm.ChatRequest, governor.Cost) {
	return withMaxTokens(t, req, g.flows[flow].DefaultMaxTokens, g.cfg.DefaultMaxTokens)
}

// reservePurse charges the call's worst-case price on target t to its
// flow's budget across targets, waiting within the request's max wait for
// it to fit. It returns nil when the flow has no such budget or the call
// costs nothing there.
func (c *chatCall) reservePurse(t0 time.Time) (*governor.Reservation, error) {
	g := c.g
	if g.purse == nil || !g.purseFlows[c.who.flow] {
		return nil, nil
	}
	money := c.t.gov.Price().Of(c.cost)
	if money == 0 {
		return nil, nil
	}
	res, err := g.purse.Reserve(t0, c.who.flow, purseCost(money))
	if err != nil {
		if tl, ok := errors.AsType[*governor.TooLargeError](err); ok {
			// In the target's terms: its price says what max_tokens fits.
			out := *tl
			out.Key, out.Need, out.MaxOutput = c.t.name, money, maxOutputUnder(c.t.gov.Price(), c.cost.Input, tl.Max)
			return nil, &out
		}
		return nil, err
	}
	g.purse.Advance(g.cfg.Now())
	if !res.Admitted() {
		if err := g.purse.Await(c.waitCtx(), res, 0); err != nil {
			res.Cancel(g.cfg.Now())
			return nil, err
		}
	}
	return res, nil
}

// maxOutputUnder is the largest output whose price at p, with input
// tokens, is within lim billionths.
func maxOutputUnder(p governor.Price, input, lim int64) int64 {
	in := p.Of(governor.Cost{Input: input})
	if in > lim {
		return 0
	}
	if per := p.Output * 1e3; per > 0 {
		return int64(float64(lim-in) / per)
	}
	return math.MaxInt64
}

// settlePurse settles the call's charge on its flow's budget across
// targets with what res, its reservation on the target, is charged now:
// given back when that is nothing (the call was not made, or the provider
// refused it).
func (c *chatCall) settlePurse(res *governor.Reservation) {
	if c.pres == nil {
		return
	}
	now := c.g.cfg.Now()
	if money := res.Cost().Money; money > 0 {
		c.pres.Settle(now, purseCost(money))
	} else {
		c.pres.Cancel(now)
	}
	c.pres = nil
}

// modelNotFound is the answer to a request naming a model the gateway
// neither routes nor forwards, in OpenAI's words.
func (g *Gateway) modelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found",
		message: fmt.Sprintf("The model %q does not exist or you do not have access to it. sluice gateway serves: %s.",
			clip(model, 256), strings.Join(g.modelNames, ", "))}
}

// clip bounds s to n bytes, cut at a rune's start.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// routedModels are the entries of GET /v1/models for the routed names.
func (g *Gateway) routedModels() []json.RawMessage {
	out := make([]json.RawMessage, 0, len(g.modelNames))
	for _, name := range g.modelNames {
		b, _ := json.Marshal(struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		}{name, "model", 0, "sluice"})
		out = append(out, b)
	}
	return out
}

// TargetView is one routed target in GET /v1/flows: its key's name (the
// target's), its model, its limits, what it spent today and this month
// against its budget, whether it is out and what its routes did with it.
type TargetView struct {
	Name    string               `json:"name"`
	Model   string               `json:"model"`
	Profile string               `json:"profile"`
	Limits  map[string]LimitView `json:"limits"`
	// Spend is what its calls cost in the last 24 hours (day) and, under a
	// budget per month, 30 days (month), in money, against its budget (0:
	// none); absent when it has no price.
	Spend *BudgetView `json:"spend,omitempty"`
	// Out says its calls failed and it gets none until OutUntil (then one
	// to show it is back); OutUntil is set while it is out or on probation.
	Out      bool       `json:"out"`
	OutUntil *time.Time `json:"out_until,omitempty"`
	// Picked counts the calls its routes picked it for, Failed those of
	// them that failed, Outs the times it was taken out; Sent the calls
	// made on it.
	Picked int64 `json:"picked"`
	Failed int64 `json:"failed"`
	Outs   int64 `json:"outs"`
	Sent   int64 `json:"sent"`
	// Flows is each flow's use of it since the gateway started.
	Flows []TargetFlowView `json:"flows"`
}

// TargetFlowView is one flow's use of one target.
type TargetFlowView struct {
	Name     string           `json:"name"`
	Waiting  int              `json:"waiting"`
	Admitted int64            `json:"admitted"`
	Tokens   map[string]int64 `json:"tokens"`
	Spend    *float64         `json:"spend,omitempty"`
}

// ModelView is one routed model name in GET /v1/flows.
type ModelView struct {
	Name    string   `json:"name"`
	Rule    string   `json:"rule"`
	Targets []string `json:"targets"`
}

// addRoutes adds the routed models and targets to v, each flow's spend per
// target, and, with the purse, each flow's budget across targets.
func (g *Gateway) addRoutes(v *FlowsView, now time.Time) {
	if len(g.routes) == 0 {
		return
	}
	for _, name := range g.modelNames {
		rt := g.routes[name]
		mv := ModelView{Name: name, Rule: g.ruleOf(name)}
		for _, t := range rt.targets {
			mv.Targets = append(mv.Targets, t.name)
		}
		v.Models = append(v.Models, mv)
	}
	// A target's route stats, summed over the routes that list it.
	type rstats struct {
		picked, failed, outs int64
		out                  bool
		until                time.Time
	}
	rs := map[*target]*rstats{}
	for _, name := range g.modelNames {
		rt := g.routes[name]
		for i, s := range rt.router.Stats(now) {
			t := rt.targets[i]
			r := rs[t]
			if r == nil {
				r = &rstats{}
				rs[t] = r
			}
			r.picked += s.Picked
			r.failed += s.Failed
			r.outs += s.Outs
			r.out = r.out || s.Out
			if !s.Until.IsZero() && s.Until.After(r.until) {
				r.until = s.Until
			}
		}
	}
	at := map[string]int{}
	for i, f := range v.Flows {
		at[f.Name] = i
	}
	for _, t := range g.targets {
		st := t.gov.Stats(now)
		tv := TargetView{Name: t.name, Model: t.model, Profile: string(t.profile), Limits: map[string]LimitView{}, Sent: t.sent.Load()}
		var budget, spent governor.Limits
		for _, ls := range st.Limits {
			switch {
			case ls.Limit.Budget():
				budget[ls.Limit] = ls.Max
				if ls.Limit == governor.MPD || ls.Max > 0 {
					spent[ls.Limit] = ls.Used
				}
			case ls.Max > 0:
				tv.Limits[ls.Limit.String()] = LimitView{Max: ls.Max, Used: ls.Used, Remaining: ls.Capacity}
			}
		}
		if st.Priced {
			tv.Spend = &BudgetView{Day: money(budget[governor.MPD]), Month: money(budget[governor.MPM]),
				SpentDay: money(spent[governor.MPD]), SpentMonth: money(spent[governor.MPM])}
		}
		if r := rs[t]; r != nil {
			tv.Picked, tv.Failed, tv.Outs, tv.Out = r.picked, r.failed, r.outs, r.out
			if !r.until.IsZero() {
				u := r.until.UTC()
				tv.OutUntil = &u
			}
		}
		for _, f := range st.Flows {
			fv := TargetFlowView{Name: f.Name, Waiting: f.Waiting, Admitted: f.Admitted, Tokens: tokenMap(f.Tokens.Input, f.Tokens.Output)}
			if st.Priced {
				s := money(f.Tokens.Money)
				fv.Spend = &s
			}
			tv.Flows = append(tv.Flows, fv)
			i, ok := at[f.Name]
			if !ok {
				continue
			}
			flow := &v.Flows[i]
			flow.Waiting += f.Waiting
			flow.Remaining += int64(f.Waiting)
			flow.Parked += f.Parked
			flow.Admitted += f.Admitted
			flow.Done += f.Admitted
			flow.Tokens["input"] += f.Tokens.Input
			flow.Tokens["output"] += f.Tokens.Output
			flow.Tokens["total"] += f.Tokens.Input + f.Tokens.Output
			for l := range governor.NumLimits {
				if n := f.Rejections[l]; n > 0 {
					flow.Rejections[l.String()] += n
				}
			}
			if flow.WaitingOn == "" && f.WaitingOn.Kind != "" {
				flow.WaitingOn, flow.WaitingUntil = f.WaitingOn.String(), f.WaitingOn.Until.UTC()
			}
			if st.Priced {
				if flow.SpendByTarget == nil {
					flow.SpendByTarget = map[string]float64{}
				}
				flow.SpendByTarget[t.name] = money(f.Tokens.Money)
				total := money(f.Tokens.Money)
				if flow.Spend != nil {
					total += *flow.Spend
				}
				flow.Spend = &total
			}
		}
		v.Targets = append(v.Targets, tv)
	}
	if g.purse != nil {
		for _, f := range g.purse.Stats(now).Flows {
			if i, ok := at[f.Name]; ok {
				v.Flows[i].Budget = budgetView(f.Budget, f.Spent)
			}
		}
	}
	for i := range v.Flows {
		f := &v.Flows[i]
		f.State = flowState(now, f.LastProgressAt, g.cfg.ProgressWindow, f.Waiting)
	}
}

// ruleOf is the rule of the model named name, as configured.
func (g *Gateway) ruleOf(name string) string {
	for _, m := range g.cfg.Models {
		if m.Name == name {
			return m.Rule.String()
		}
	}
	return ""
}
