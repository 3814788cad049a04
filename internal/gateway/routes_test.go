package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// Each target's provider key in the routes' tests; no answer, header, log
// line, /v1/flows or metric may ever contain one.
var targetKeys = map[string]string{
	"free": "sk-target-free-8c1d2e3f4a5b6c7d",
	"paid": "sk-target-paid-1a2b3c4d5e6f7a8b",
}

// upstream is a simulator in front of which a test can make every chat
// call fail with a 500, counting the chat calls it was sent.
type upstream struct {
	model *forecast.Model
	srv   *httptest.Server
	fail  atomic.Bool
	// exhausted makes every chat call answer 429 insufficient_quota.
	exhausted atomic.Bool
	calls     atomic.Int64
	// models are the model names its chat calls named.
	models chan string
}

func newUpstream(t *testing.T, profile llm.Profile, lim governor.Limits, key string, now func() time.Time) *upstream {
	t.Helper()
	m, err := forecast.NewModel(forecast.ModelConfig{Profile: profile, Limits: lim, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{model: m, models: make(chan string, 1000)}
	simh := sim.NewServer(m, sim.ServerConfig{APIKey: key, Now: now})
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			u.calls.Add(1)
			var body struct {
				Model string `json:"model"`
			}
			raw, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(raw, &body)
			u.models <- body.Model
			if u.exhausted.Load() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprint(w, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`)
				return
			}
			if u.fail.Load() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				// A provider that echoes the key it was sent: it must never reach a client.
				fmt.Fprintf(w, `{"error":{"message":"the server had an error (%s)","type":"server_error"}}`, r.Header.Get("Authorization"))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(raw))
		}
		simh.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// routeBundle is a gateway of routes only in front of two upstreams, free
// and paid, which serve the model name "fast".
type routeBundle struct {
	*bundle
	free, paid *upstream
	clock      *manualClock
}

// routeSetup starts the two upstreams and a gateway routing "fast" over
// them as m says (its targets' Upstream and APIKey are filled in, by name).
func routeSetup(t *testing.T, cfg Config, m Model, freeLim, paidLim governor.Limits) *routeBundle {
	t.Helper()
	c := newManualClock()
	if cfg.Now == nil {
		cfg.Now = c.Now
	}
	rb := &routeBundle{clock: c,
		free: newUpstream(t, llm.Groq, freeLim, targetKeys["free"], cfg.Now),
		paid: newUpstream(t, llm.OpenAI, paidLim, targetKeys["paid"], cfg.Now)}
	for i := range m.Targets {
		tg := &m.Targets[i]
		up := map[string]*upstream{"free": rb.free, "paid": rb.paid}[tg.Name]
		tg.Upstream, tg.APIKey = up.srv.URL+"/v1", targetKeys[tg.Name]
	}
	m.Name = "fast"
	cfg.Models = append(cfg.Models, m)
	b := &bundle{log: &testenv.Buffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	if b.gw, err = New(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	start(t, b.gw)
	b.srv = httptest.NewServer(b.gw)
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() {
		_, flows := b.do(t, "GET", "/v1/flows", "", nil)
		_, metrics := b.do(t, "GET", "/metrics", "", nil)
		for name, key := range targetKeys {
			for what, text := range map[string]string{"log": b.log.String(), "answers": b.seen.String(), "/v1/flows": string(flows), "/metrics": string(metrics),
				"configuration": fmt.Sprintf("%v %+v %#v", cfg, cfg.Models, cfg.Models)} {
				if strings.Contains(text, key) || strings.Contains(text, key[3:]) {
					t.Errorf("target %s's key appears in the %s", name, what)
				}
			}
		}
	})
	rb.bundle = b
	return rb
}

// advance moves the clock on by d.
func (rb *routeBundle) advance(d time.Duration) {
	rb.clock.mu.Lock()
	rb.clock.now = rb.clock.now.Add(d)
	rb.clock.mu.Unlock()
}

func fastBody(content string, maxTokens int) string {
	return strings.Replace(chatBody(content, maxTokens, ""), `"model":"sim-model"`, `"model":"fast"`, 1)
}

func (rb *routeBundle) target(t *testing.T, name string) TargetView {
	t.Helper()
	for _, tv := range rb.gw.Flows().Targets {
		if tv.Name == name {
			return tv
		}
	}
	t.Fatalf("no target %q in /v1/flows", name)
	return TargetView{}
}

func twoTargets(rule route.Rule) Model {
	return Model{Rule: rule, MaxWait: time.Second, Targets: []Target{
		{Name: "free", Profile: llm.Groq, Model: "llama-3.1-8b-instant", Limits: limits("rpm=1")},
		{Name: "paid", Profile: llm.OpenAI, Model: "gpt-4o-mini", Limits: limits("rpm=100"), Price: governor.Price{Input: 0.15, Output: 0.60}},
	}}
}

// The cheapest target first; when it cannot admit within the route's max
// wait, the next; once it has room again, the cheapest again. Each call is
// sent to one upstream, under that target's model name, and the answer
// names the target.
func TestRouteCheapestThenFallback(t *testing.T) {
	t.Parallel()
	rb := routeSetup(t, Config{}, twoTargets(route.Cheapest), limits("rpm=1"), limits("rpm=100"))
	want := []string{"free", "paid", "paid"}
	for i, w := range want {
		resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("hello "+strconv.Itoa(i), 20), nil)
		if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != w {
			t.Fatalf("request %d: %d from %q, want 200 from %s: %s", i, resp.StatusCode, resp.Header.Get(TargetHeader), w, body)
		}
		if !strings.Contains(string(body), `"content"`) {
			t.Errorf("request %d: no completion in %s", i, body)
		}
	}
	if f, p := rb.free.calls.Load(), rb.paid.calls.Load(); f != 1 || p != 2 {
		t.Fatalf("upstreams saw %d and %d calls, want 1 and 2", f, p)
	}
	if m := <-rb.free.models; m != "llama-3.1-8b-instant" {
		t.Errorf("free was sent model %q", m)
	}
	if m := <-rb.paid.models; m != "gpt-4o-mini" {
		t.Errorf("paid was sent model %q", m)
	}
	// A minute later the free target has room again.
	rb.advance(time.Minute + 2*time.Second)
	if resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("later", 20), nil); resp.Header.Get(TargetHeader) != "free" {
		t.Fatalf("a minute later: %d from %q: %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	if tv := rb.target(t, "free"); tv.Picked != 2 || tv.Sent != 2 || tv.Out || tv.Model != "llama-3.1-8b-instant" || tv.Limits["rpm"].Max != 1 {
		t.Errorf("free in /v1/flows: %+v", tv)
	}
	if tv := rb.target(t, "paid"); tv.Picked != 2 || tv.Spend == nil || tv.Spend.SpentDay <= 0 {
		t.Errorf("paid in /v1/flows: %+v", tv)
	}
}

// With the ordered rule and a route max wait longer than the first
// target's wait, a request waits in the first target's line only, and
// gets its 429 (with its place kept there) when its own max wait ends
// first; sent again, it takes its place back on that target.
func TestRouteWaitsInOneLine(t *testing.T) {
	t.Parallel()
	m := twoTargets(route.Ordered)
	m.MaxWait = 5 * time.Minute
	rb := routeSetup(t, Config{}, m, limits("rpm=1"), limits("rpm=100"))
	if resp, _ := rb.do(t, "POST", "/v1/chat/completions", fastBody("one", 20), nil); resp.Header.Get(TargetHeader) != "free" {
		t.Fatalf("first request went to %q", resp.Header.Get(TargetHeader))
	}
	h := map[string]string{MaxWaitHeader: "20ms"}
	resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("two", 20), h)
	if resp.StatusCode != 429 || resp.Header.Get(TargetHeader) != "free" || resp.Header.Get(WaitingOnHeader) != "rpm" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second request: %d on %q waiting on %q: %s", resp.StatusCode, resp.Header.Get(TargetHeader), resp.Header.Get(WaitingOnHeader), body)
	}
	if parked := flowView(t, rb.bundle, DefaultFlow).Parked; parked != 1 {
		t.Fatalf("%d places kept, want the second request's", parked)
	}
	rb.advance(time.Minute + 2*time.Second)
	resp, body = rb.do(t, "POST", "/v1/chat/completions", fastBody("two", 20), h)
	if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "free" {
		t.Fatalf("sent again: %d on %q: %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	if _, m := rb.do(t, "GET", "/metrics", "", nil); !strings.Contains(string(m), `sluice_gateway_places_taken_back_total`) {
		t.Errorf("metrics lack the place taken back")
	}
	if f, p := rb.free.calls.Load(), rb.paid.calls.Load(); f != 2 || p != 0 {
		t.Fatalf("upstreams saw %d and %d calls, want 2 and 0", f, p)
	}
}

// A target whose calls fail (5xx) is out after Failures of them: its
// callers get the error in the gateway's profile, naming the target, and
// later requests go to the other target; after its cooldown it gets a call
// again, and answering it brings it back. No request is sent to two
// targets.
func TestRouteFailingTargetCoolsDown(t *testing.T) {
	t.Parallel()
	m := twoTargets(route.Cheapest)
	m.Targets[0].Limits = limits("rpm=100")
	m.Failures, m.Cooldown = 2, 30*time.Second
	rb := routeSetup(t, Config{}, m, limits("rpm=100"), limits("rpm=100"))
	rb.free.fail.Store(true)
	for i := range 2 {
		resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("fail "+strconv.Itoa(i), 20), nil)
		if resp.StatusCode != 500 || resp.Header.Get(TargetHeader) != "free" {
			t.Fatalf("request %d to a failing target: %d from %q: %s", i, resp.StatusCode, resp.Header.Get(TargetHeader), body)
		}
		var e struct {
			Error struct{ Message, Type string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "the server had an error") {
			t.Errorf("request %d: the error is not in the profile's shape: %s", i, body)
		}
	}
	if tv := rb.target(t, "free"); !tv.Out || tv.Failed != 2 || tv.Outs != 1 || tv.OutUntil == nil {
		t.Fatalf("free after two failures: %+v, want out", tv)
	}
	for i := range 3 {
		resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("after "+strconv.Itoa(i), 20), nil)
		if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "paid" {
			t.Fatalf("request %d while free is out: %d from %q: %s", i, resp.StatusCode, resp.Header.Get(TargetHeader), body)
		}
	}
	if f, p := rb.free.calls.Load(), rb.paid.calls.Load(); f != 2 || p != 3 {
		t.Fatalf("upstreams saw %d and %d calls, want 2 and 3: a call sent to two targets, or retried", f, p)
	}
	// After its cooldown, one call shows it is back.
	rb.free.fail.Store(false)
	rb.advance(31 * time.Second)
	resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("probe", 20), nil)
	if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "free" {
		t.Fatalf("after the cooldown: %d from %q: %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	if tv := rb.target(t, "free"); tv.Out || tv.OutUntil != nil || tv.Picked != 3 || tv.Failed != 2 {
		t.Errorf("free back: %+v", tv)
	}
	if resp, _ := rb.do(t, "POST", "/v1/chat/completions", fastBody("again", 20), nil); resp.Header.Get(TargetHeader) != "free" {
		t.Errorf("the next request went to %q, want free", resp.Header.Get(TargetHeader))
	}
}

// Every target out: 503 with a Retry-After until the first is back; the
// request is sent nowhere.
func TestRouteAllTargetsOut(t *testing.T) {
	t.Parallel()
	m := twoTargets(route.Cheapest)
	m.Targets[0].Limits = limits("rpm=100")
	m.Failures, m.Cooldown = 1, 40*time.Second
	rb := routeSetup(t, Config{}, m, limits("rpm=100"), limits("rpm=100"))
	rb.free.fail.Store(true)
	rb.paid.fail.Store(true)
	for i, want := range []string{"free", "paid"} {
		if resp, _ := rb.do(t, "POST", "/v1/chat/completions", fastBody("x"+strconv.Itoa(i), 20), nil); resp.StatusCode != 500 || resp.Header.Get(TargetHeader) != want {
			t.Fatalf("request %d: %d from %q", i, resp.StatusCode, resp.Header.Get(TargetHeader))
		}
	}
	resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("none", 20), nil)
	if resp.StatusCode != 503 || resp.Header.Get(TargetHeader) != "" || !strings.Contains(string(body), `every target of model \"fast\" is failing`) {
		t.Fatalf("every target out: %d %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 39 || ra > 40 {
		t.Errorf("retry-after %q, want the 40 s until the first is back", resp.Header.Get("Retry-After"))
	}
	if n := rb.free.calls.Load() + rb.paid.calls.Load(); n != 2 {
		t.Errorf("upstreams saw %d calls, want 2", n)
	}
}

// A client key's budget holds across targets: what its flow spent on one
// target counts on the other, so a request that the other target has
// room for is answered 429 naming the flow's budget and when it frees,
// and reaches no upstream; another client goes on. /v1/flows shows the
// flow's spend on each target and its budget across them.
func TestRouteBudgetAcrossTargets(t *testing.T) {
	t.Parallel()
	price := governor.Price{Input: 1, Output: 10}
	m := Model{Rule: route.Ordered, MaxWait: time.Second, Targets: []Target{
		{Name: "free", Profile: llm.Groq, Model: "m-a", Limits: limits("rpm=1"), Price: price},
		{Name: "paid", Profile: llm.OpenAI, Model: "m-b", Limits: limits("rpm=100"), Price: price},
	}}
	rb := routeSetup(t, Config{
		Flows:      []Flow{{Name: "intern", Budget: governor.Budget{Day: 0.01}}, {Name: "team"}},
		ClientKeys: []ClientKey{{Key: "gw-intern-key-0123456", Flow: "intern"}, {Key: "gw-team-key-01234567", Flow: "team"}},
	}, m, limits("rpm=1"), limits("rpm=100"))
	intern := map[string]string{"Authorization": "Bearer gw-intern-key-0123456", MaxWaitHeader: "50ms"}
	team := map[string]string{"Authorization": "Bearer gw-team-key-01234567", MaxWaitHeader: "50ms"}
	// Up to $0.008 on the first target.
	if resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize.", 800), intern); resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "free" {
		t.Fatalf("intern's first request: %d on %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	f := flowView(t, rb.bundle, "intern")
	if f.Budget == nil || f.Spend == nil || f.SpendByTarget["free"] <= 0 || math.Abs(f.Budget.SpentDay-f.SpendByTarget["free"]) > 1e-8 {
		t.Fatalf("intern after one call: budget %+v, spend %v by target %v", f.Budget, f.Spend, f.SpendByTarget)
	}
	spent := f.Budget.SpentDay
	// The first target is full (rpm 1): the second would take this one,
	// but the flow's budget has not this much left.
	over := int(math.Round((0.01-spent)*1e5)) + 50 // $10 per million output tokens
	resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize.", over), intern)
	if resp.StatusCode != 429 || resp.Header.Get(WaitingOnHeader) != "the flow's mpd" || resp.Header.Get(TargetHeader) != "paid" ||
		!strings.Contains(string(body), "It waits on the flow's mpd until ") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("intern past its budget across targets: %d on %q waiting on %q: %s", resp.StatusCode, resp.Header.Get(TargetHeader), resp.Header.Get(WaitingOnHeader), body)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 3600 {
		t.Errorf("retry-after %ds: the budget frees when the day's first call ages out", ra)
	}
	if p := rb.paid.calls.Load(); p != 0 {
		t.Fatalf("the second target saw %d calls, want none: the flow's budget was spent", p)
	}
	// Within what is left it goes on, on the second target.
	small := int(math.Floor((0.01-spent)*1e5)) - 50
	if resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize.", small), intern); resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "paid" {
		t.Fatalf("intern within what is left: %d on %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	if resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize.", 990), team); resp.StatusCode != 200 {
		t.Fatalf("another client's request: %d %s", resp.StatusCode, body)
	}
	// Over the whole budget: 413 naming the flow, on the target picked.
	resp, body = rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize.", 2000), intern)
	if resp.StatusCode != 413 || !strings.Contains(string(body), `the budget of money per day of flow \"intern\": it costs up to 0.020`) ||
		!strings.Contains(string(body), "max_tokens ≤ 99") {
		t.Fatalf("intern over its whole budget: %d %s", resp.StatusCode, body)
	}
	f = flowView(t, rb.bundle, "intern")
	total := f.SpendByTarget["free"] + f.SpendByTarget["paid"]
	if f.SpendByTarget["paid"] <= 0 || f.Budget.SpentDay > 0.01 || math.Abs(f.Budget.SpentDay-total) > 1e-8 || math.Abs(*f.Spend-total) > 1e-12 {
		t.Errorf("intern in /v1/flows: spend %v by target %v, budget %+v", *f.Spend, f.SpendByTarget, f.Budget)
	}
	var view FlowsView
	if _, raw := rb.do(t, "GET", "/v1/flows", "", team); json.Unmarshal(raw, &view) != nil || len(view.Targets) != 2 || len(view.Models) != 1 ||
		view.Models[0].Name != "fast" || view.Models[0].Rule != "ordered" {
		t.Fatalf("/v1/flows: %+v", view)
	}
	for _, tv := range view.Targets {
		var flowSpend float64
		for _, tf := range tv.Flows {
			if tf.Spend != nil {
				flowSpend += *tf.Spend
			}
		}
		if tv.Spend == nil || math.Abs(tv.Spend.SpentDay-flowSpend) > 1e-9 {
			t.Errorf("target %s spent %+v today, its flows %v", tv.Name, tv.Spend, flowSpend)
		}
	}
}

// A target's own budget holds on that target: the route goes to the next.
func TestRouteTargetBudget(t *testing.T) {
	t.Parallel()
	m := twoTargets(route.Ordered)
	m.Targets[0].Limits = limits("rpm=100")
	m.Targets[0].Price = governor.Price{Input: 1, Output: 10}
	m.Targets[0].Budget = governor.Budget{Day: 0.01}
	rb := routeSetup(t, Config{}, m, limits("rpm=100"), limits("rpm=100"))
	for i, want := range []string{"free", "paid"} {
		resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize.", 900), nil)
		if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != want {
			t.Fatalf("request %d: %d from %q, want %s: %s", i, resp.StatusCode, resp.Header.Get(TargetHeader), want, body)
		}
	}
	if tv := rb.target(t, "free"); tv.Spend == nil || tv.Spend.Day != 0.01 || tv.Spend.SpentDay <= 0 || tv.Spend.SpentDay > 0.01 {
		t.Errorf("free's budget in /v1/flows: %+v", tv.Spend)
	}
}

// A gateway of routes only answers a model it does not route 404
// model_not_found in its profile's shape, naming what it serves; GET
// /v1/models lists the routed names.
func TestRouteModelNotFound(t *testing.T) {
	t.Parallel()
	rb := routeSetup(t, Config{}, twoTargets(route.Cheapest), limits("rpm=1"), limits("rpm=100"))
	resp, body := rb.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, ""), nil)
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if resp.StatusCode != 404 || json.Unmarshal(body, &e) != nil || e.Error.Code != "model_not_found" ||
		!strings.Contains(e.Error.Message, `"sim-model"`) || !strings.Contains(e.Error.Message, "serves: fast.") {
		t.Fatalf("an unknown model: %d %s", resp.StatusCode, body)
	}
	if _, ok := llm.OpenAI.Classify(resp.StatusCode, resp.Header, body).(*llm.StatusError); !ok {
		t.Errorf("a client does not read the 404 as an API error")
	}
	resp, body = rb.do(t, "GET", "/v1/models", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"id":"fast"`) {
		t.Fatalf("models: %d %s", resp.StatusCode, body)
	}
	if n := rb.free.calls.Load() + rb.paid.calls.Load(); n != 0 {
		t.Errorf("upstreams saw %d calls", n)
	}
}

// A request no target can ever take is answered 413 at once, in the first
// target's words with every target named, and sent nowhere.
func TestRouteTooLargeForEveryTarget(t *testing.T) {
	t.Parallel()
	m := twoTargets(route.Cheapest)
	m.Targets[0].Limits, m.Targets[1].Limits = limits("rpm=100,tpm=1000"), limits("rpm=100,tpm=2000")
	rb := routeSetup(t, Config{}, m, limits("rpm=100"), limits("rpm=100"))
	resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("hi", 5000), nil)
	if resp.StatusCode != 413 || resp.Header.Get(TargetHeader) != "" || !strings.Contains(string(body), "no target can ever take it: free, paid") ||
		!strings.Contains(string(body), "max_tokens ≤ 9") {
		t.Fatalf("a request no target can take: %d %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	// One only the larger target can take goes there.
	if resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("hi", 1500), nil); resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "paid" {
		t.Fatalf("a request only paid can take: %d %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	if n := rb.free.calls.Load(); n != 0 {
		t.Errorf("free saw %d calls", n)
	}
	_, metrics := rb.do(t, "GET", "/metrics", "", nil)
	for _, want := range []string{`sluice_limit_capacity{key="free",limit="tpm"} 1000`, `sluice_flow_admissions_total{flow="default",key="paid"} 1`,
		`sluice_gateway_requests_total{code="413",flow="default",key="openai"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A routed model beside the single upstream: its name is routed, every
// other model goes upstream as before, and /v1/models lists both.
func TestRouteBesideTheUpstream(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=100")}, Config{Limits: limits("rpm=100")}, func(*Gateway) {})
	paid := newUpstream(t, llm.OpenAI, limits("rpm=100"), targetKeys["paid"], nil)
	gw, err := New(context.Background(), Config{Upstream: b.sim.URL + "/v1", APIKey: upstreamKey, Limits: limits("rpm=100"),
		Models: []Model{{Name: "fast", Targets: []Target{{Name: "paid", Upstream: paid.srv.URL + "/v1", APIKey: targetKeys["paid"], Model: "gpt-4o-mini"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	b2 := &bundle{gw: gw, srv: srv}
	resp, body := b2.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, ""), nil)
	if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "" || b.model.Stats().Requests != 1 {
		t.Fatalf("a model not routed: %d on %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	resp, body = b2.do(t, "POST", "/v1/chat/completions", fastBody("hi", 10), nil)
	if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "paid" || paid.calls.Load() != 1 {
		t.Fatalf("the routed model: %d on %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	_, body = b2.do(t, "GET", "/v1/models", "", nil)
	if !strings.Contains(string(body), `"id":"fast"`) || !strings.Contains(string(body), `"id":"sim-model"`) {
		t.Errorf("models: %s", body)
	}
	assertNoKey(t, "answers", b2.seen.String())
	if strings.Contains(b2.seen.String(), targetKeys["paid"]) {
		t.Errorf("the target's key appears in the answers")
	}
}

// A streamed request is routed, re-encoded for its target, and passed
// through.
func TestRouteStream(t *testing.T) {
	t.Parallel()
	rb := routeSetup(t, Config{}, twoTargets(route.Cheapest), limits("rpm=1"), limits("rpm=100"))
	resp, body := rb.do(t, "POST", "/v1/chat/completions", strings.TrimSuffix(fastBody("stream", 20), "}")+`,"stream":true}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "free" || !strings.Contains(string(body), "data: [DONE]") {
		t.Fatalf("stream: %d on %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	if m := <-rb.free.models; m != "llama-3.1-8b-instant" {
		t.Errorf("free was sent model %q", m)
	}
}

// The targets' charges and the flows' budgets across them are kept in the
// store under the targets' names, and a restarted gateway starts from them.
func TestRouteRestartRemembers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gw.db")
	open := func() store.Store {
		st, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	price := governor.Price{Input: 1, Output: 10}
	m := twoTargets(route.Ordered)
	m.Targets[0].Limits, m.Targets[0].Price = limits("rpm=100"), price
	cfg := Config{Flows: []Flow{{Name: "intern", Budget: governor.Budget{Day: 0.05}}}, Now: time.Now}
	st := open()
	cfg.Store = st
	rb := routeSetup(t, cfg, m, limits("rpm=100"), limits("rpm=100"))
	if resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize.", 500), map[string]string{FlowHeader: "intern"}); resp.StatusCode != 200 {
		t.Fatalf("request: %d %s", resp.StatusCode, body)
	}
	before := flowView(t, rb.bundle, "intern").Budget
	tvBefore := rb.target(t, "free").Spend
	if err := rb.gw.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st2 := open()
	defer st2.Close()
	cfg.Store, cfg.Models = st2, rb.gw.cfg.Models
	gw2, err := New(context.Background(), Config{Flows: cfg.Flows, Models: cfg.Models, Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	start(t, gw2)
	v := gw2.Flows()
	var after *BudgetView
	for _, f := range v.Flows {
		if f.Name == "intern" {
			after = f.Budget
		}
	}
	if before == nil || after == nil || after.SpentDay != before.SpentDay || before.SpentDay <= 0 {
		t.Errorf("the flow's budget across targets after a restart: %+v, before %+v", after, before)
	}
	for _, tv := range v.Targets {
		if tv.Name == "free" && (tv.Spend == nil || tv.Spend.SpentDay != tvBefore.SpentDay) {
			t.Errorf("free's spend after a restart: %+v, before %+v", tv.Spend, tvBefore)
		}
	}
}

// Bad routes are refused at New, naming the model and the target.
func TestRouteConfigErrors(t *testing.T) {
	t.Parallel()
	ok := Target{Name: "a", Upstream: "http://127.0.0.1:1/v1", Model: "m"}
	with := func(f func(*Target)) Target { t := ok; f(&t); return t }
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Models: []Model{{Name: "", Targets: []Target{ok}}}}, "a name of 1 to 256"},
		{Config{Models: []Model{{Name: "fast"}}}, `model "fast": 0 targets`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{ok}}, {Name: "fast", Targets: []Target{ok}}}}, `model "fast" is listed twice`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{ok, ok}}}}, `target "a" is listed twice`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.Name = "a b" })}}}}, `target name "a b"`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.Upstream = "ftp://x" })}}}}, `target "a": upstream "ftp://x" is not an http(s) URL`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.Upstream = "http://u:p@x/v1" })}}}}, `has credentials in it`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.Model = "" })}}}}, `model name (model) is needed`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.Profile = "nope" })}}}}, `target "a"`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.Budget = governor.Budget{Day: 1} })}}}}, `target "a": a budget needs the key's price`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{ok}}, {Name: "slow", Targets: []Target{with(func(t *Target) { t.Model = "other" })}}}}, `configured otherwise`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{ok}}}, Flows: []Flow{{Name: "f", Budget: governor.Budget{Day: 1}}}}, `flow "f": a budget needs a price`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.APIKey = "sk-the-same-key-0123456789" })}}},
			ClientKeys: []ClientKey{{Key: "sk-the-same-key-0123456789"}}}, `client key 1 is the key of target "a"`},
		{Config{Models: []Model{{Name: "fast", Targets: []Target{with(func(t *Target) { t.Name = "openai" })}}}}, `the name is the gateway's key's`},
	} {
		_, err := New(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one with %q", tc.cfg.Models, err, tc.want)
		}
	}
	// A target listed under two models the same way has one governor.
	gw, err := New(context.Background(), Config{Models: []Model{{Name: "fast", Targets: []Target{ok}}, {Name: "slow", Targets: []Target{ok}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(gw.targets) != 1 || gw.routes["fast"].targets[0] != gw.routes["slow"].targets[0] {
		t.Errorf("a target listed twice has %d governors", len(gw.targets))
	}
}

// Many requests of a flow at once, after it spent on another target: the
// flow's calls together never cost more than its budget, and each request
// answered 200 was sent to one upstream once.
func TestRouteBudgetHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	price := governor.Price{Input: 1, Output: 10}
	m := Model{Rule: route.Cheapest, MaxWait: time.Millisecond, Targets: []Target{
		{Name: "free", Profile: llm.Groq, Model: "m-a", Limits: limits("rpm=2"), Price: price},
		{Name: "paid", Profile: llm.OpenAI, Model: "m-b", Limits: limits("rpm=100"), Price: price},
	}}
	rb := routeSetup(t, Config{Flows: []Flow{{Name: "intern", Budget: governor.Budget{Day: 0.01}}}}, m, limits("rpm=2"), limits("rpm=100"))
	h := map[string]string{FlowHeader: "intern", MaxWaitHeader: "30ms"}
	// Up to $0.002 each: two on the first target, which is then full.
	for i := range 2 {
		if resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize item "+strconv.Itoa(i)+".", 200), h); resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "free" {
			t.Fatalf("request %d: %d on %q %s", i, resp.StatusCode, resp.Header.Get(TargetHeader), body)
		}
	}
	const n = 24
	codes := make(chan int, n)
	for i := range n {
		go func() {
			resp, _ := rb.do(t, "POST", "/v1/chat/completions", fastBody("Summarize item "+strconv.Itoa(100+i)+".", 200), h)
			if resp == nil {
				codes <- 0
				return
			}
			codes <- resp.StatusCode
		}()
	}
	ok := 2
	for range n {
		switch c := <-codes; c {
		case 200:
			ok++
		case 429:
		default:
			t.Errorf("a request answered %d", c)
		}
	}
	f := flowView(t, rb.bundle, "intern")
	total := f.SpendByTarget["free"] + f.SpendByTarget["paid"]
	if total > 0.01 || f.Budget == nil || f.Budget.SpentDay > 0.01 || math.Abs(f.Budget.SpentDay-total) > 1e-7 {
		t.Fatalf("the flow spent %v (%v by target), its budget says %+v: over 0.01", total, f.SpendByTarget, f.Budget)
	}
	// Whatever the first two cost, more than two calls' worst case was
	// left for the burst.
	if ok < 4 || f.SpendByTarget["paid"] <= 0 {
		t.Errorf("%d answered, by target %v: want the budget's worth done on both targets", ok, f.SpendByTarget)
	}
	if sent := rb.free.calls.Load() + rb.paid.calls.Load(); sent != int64(ok) {
		t.Errorf("the upstreams saw %d calls for %d answers", sent, ok)
	}
}

// A target whose quota is gone (429 insufficient_quota) is out at once,
// for the route's longest cooldown: the caller gets the provider's error,
// and the next request goes to the other target.
func TestRouteExhaustedTargetIsOut(t *testing.T) {
	t.Parallel()
	m := twoTargets(route.Cheapest)
	m.Targets[0].Limits = limits("rpm=100")
	m.MaxCooldown = 10 * time.Minute
	rb := routeSetup(t, Config{}, m, limits("rpm=100"), limits("rpm=100"))
	rb.free.exhausted.Store(true)
	resp, body := rb.do(t, "POST", "/v1/chat/completions", fastBody("one", 20), nil)
	if resp.StatusCode != 429 || resp.Header.Get(TargetHeader) != "free" || !strings.Contains(string(body), "insufficient_quota") {
		t.Fatalf("an exhausted target: %d on %q %s", resp.StatusCode, resp.Header.Get(TargetHeader), body)
	}
	tv := rb.target(t, "free")
	if !tv.Out || tv.OutUntil == nil || tv.OutUntil.Sub(rb.clock.Now()) != 10*time.Minute {
		t.Fatalf("free after insufficient_quota: %+v, want out for 10m", tv)
	}
	if resp, _ := rb.do(t, "POST", "/v1/chat/completions", fastBody("two", 20), nil); resp.StatusCode != 200 || resp.Header.Get(TargetHeader) != "paid" {
		t.Fatalf("the next request: %d on %q", resp.StatusCode, resp.Header.Get(TargetHeader))
	}
	if f, p := rb.free.calls.Load(), rb.paid.calls.Load(); f != 1 || p != 1 {
		t.Errorf("upstreams saw %d and %d calls, want 1 and 1", f, p)
	}
}
