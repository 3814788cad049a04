package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/internal/store"
	_ "github.com/sluice-dev/sluice/internal/store/postgres"
	_ "github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/yamlfile"
	"github.com/sluice-dev/sluice/llm"
	"go.yaml.in/yaml/v3"
)

func init() {
	register(&cli.Command{
		Name:    "gateway",
		Summary: "serve an OpenAI-compatible gateway that governs one provider key for apps in any language",
		Run:     runGateway,
	})
}

// gatewayFile is the gateway's YAML config file. Each single-value key is
// the twin of the flag of the same name (max_wait, --max-wait): its text is
// handed to the flag (readConfigFile), so the file and the flags accept
// and refuse the same values; flags given explicitly win.
type gatewayFile struct {
	Upstream         string           `yaml:"upstream"`
	Profile          string           `yaml:"profile"`
	Limits           string           `yaml:"limits"`
	Price            string           `yaml:"price"`
	Budget           string           `yaml:"budget"`
	Addr             string           `yaml:"addr"`
	KeyEnv           string           `yaml:"key_env"`
	Key              string           `yaml:"key_name"`
	Window           string           `yaml:"window"`
	Accounting       string           `yaml:"accounting"`
	MaxWait          string           `yaml:"max_wait"`
	KeepPlace        string           `yaml:"keep_place"`
	MaxFlowParked    string           `yaml:"max_flow_parked"`
	DefaultMaxTokens string           `yaml:"default_max_tokens"`
	MaxBodyBytes     string           `yaml:"max_body_bytes"`
	MaxWaiting       string           `yaml:"max_waiting"`
	MaxFlowWaiting   string           `yaml:"max_flow_waiting"`
	MaxWaitingBytes  string           `yaml:"max_waiting_bytes"`
	HeaderTimeout    string           `yaml:"header_timeout"`
	BodyTimeout      string           `yaml:"body_timeout"`
	WriteTimeout     string           `yaml:"write_timeout"`
	IdleTimeout      string           `yaml:"idle_timeout"`
	AllowedHosts     []string         `yaml:"allowed_hosts"`
	Lag              string           `yaml:"lag"`
	DayBurst         string           `yaml:"day_burst"`
	RetryBase        string           `yaml:"retry_base"`
	DB               string           `yaml:"db"`
	LogLevel         string           `yaml:"log_level"`
	LogFormat        string           `yaml:"log_format"`
	Flows            []gatewayFlow    `yaml:"flows"`
	ClientKeys       []gatewayKeyFile `yaml:"client_keys"`
	Models           []gatewayModel   `yaml:"models"`
}

// gatewayModel is a routed model name in the file: a name clients send,
// made on one of its targets (docs/gateway.md, "Routes").
type gatewayModel struct {
	Name        string          `yaml:"name"`
	Rule        string          `yaml:"rule"`
	MaxWait     string          `yaml:"max_wait"`
	Failures    string          `yaml:"failures"`
	Cooldown    string          `yaml:"cooldown"`
	MaxCooldown string          `yaml:"max_cooldown"`
	Targets     []gatewayTarget `yaml:"targets"`
}

// gatewayTarget is one target of a routed model: a provider key (named by
// the environment variable holding it) and the upstream's model, its
// limits, price and budget written as the key's are.
type gatewayTarget struct {
	Name       string `yaml:"name"`
	Upstream   string `yaml:"upstream"`
	APIKeyEnv  string `yaml:"api_key_env"`
	Profile    string `yaml:"profile"`
	Model      string `yaml:"model"`
	Limits     string `yaml:"limits"`
	Price      string `yaml:"price"`
	Budget     string `yaml:"budget"`
	Window     string `yaml:"window"`
	Accounting string `yaml:"accounting"`
}

// gatewayFlow is a flow in the file, its parts read as --flow reads them; a
// part left out takes its default.
type gatewayFlow struct {
	Name             string `yaml:"name"`
	Weight           string `yaml:"weight"`
	Priority         string `yaml:"priority"`
	DefaultMaxTokens string `yaml:"default_max_tokens"`
	Budget           string `yaml:"budget"`
}

// gatewayKeyFile names a client key by the environment variable holding it,
// so no secret sits in the file.
type gatewayKeyFile struct {
	Env  string `yaml:"env"`
	Flow string `yaml:"flow"`
}

// flowFlags collects repeated --flow NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]].
type flowFlags []gateway.Flow

func (f *flowFlags) String() string { return "" }

func (f *flowFlags) Set(v string) error {
	fl, err := parseFlow(v)
	if err != nil {
		return err
	}
	*f = append(*f, fl)
	return nil
}

func parseFlow(v string) (gateway.Flow, error) {
	name, spec, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	parts := append(strings.Split(spec, ":"), "", "") // priority and max_tokens may be left out
	if !ok || name == "" || parts[0] == "" || len(parts) > 5 {
		return gateway.Flow{}, fmt.Errorf("flow %q: want NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]], e.g. analysis=1:1", v)
	}
	return newFlow(name, parts[0], parts[1], parts[2])
}

// newFlow reads a flow from --flow or from the file alike, so both accept
// and refuse the same values; a part given as "" takes its default.
func newFlow(name, weight, priority, maxTokens string) (gateway.Flow, error) {
	fl := gateway.Flow{Name: name, Weight: 1}
	if name == "" {
		return fl, errors.New("a flow has no name")
	}
	var err error
	if weight != "" {
		if fl.Weight, err = strconv.ParseFloat(weight, 64); err != nil || !(fl.Weight >= governor.MinWeight && fl.Weight <= governor.MaxWeight) {
			return fl, fmt.Errorf("flow %q: weight %s: want a positive number from %v to %v", name, weight, governor.MinWeight, governor.MaxWeight)
		}
	}
	if priority != "" {
		if fl.Priority, err = strconv.Atoi(priority); err != nil || fl.Priority < governor.MinPriority || fl.Priority > governor.MaxPriority {
			return fl, fmt.Errorf("flow %q: priority %s: want a whole number from %d to %d (each step multiplies the flow's share by 4; priority is never absolute)",
				name, priority, governor.MinPriority, governor.MaxPriority)
		}
	}
	if maxTokens != "" {
		if fl.DefaultMaxTokens, err = strconv.Atoi(maxTokens); err != nil || fl.DefaultMaxTokens < 1 || fl.DefaultMaxTokens > llm.MaxOutputTokens {
			return fl, fmt.Errorf("flow %q: default max_tokens %s: want a whole number from 1 to %d", name, maxTokens, llm.MaxOutputTokens)
		}
	}
	return fl, nil
}

// maxFlowParkedFlag adds --max-flow-parked, which sluice gateway and sluice
// serve --gateway share (gateway.Config.MaxFlowParked); the value is
// checked with checkMaxFlowParked.
func maxFlowParkedFlag(fs *flag.FlagSet) *int {
	return fs.Int("max-flow-parked", gateway.DefaultMaxFlowParked, "most places in line kept for one caller (client key) in one flow for requests answered 429; one more gets its 429 without a place, and no other caller's place is given up for it (at most --max-waiting)")
}

// checkMaxFlowParked bounds --max-flow-parked as every bound of the line is.
func checkMaxFlowParked(n int) error {
	if n < 1 || n > 1<<20 {
		return fmt.Errorf("%d is not between 1 and %d", n, 1<<20)
	}
	return nil
}

// parseClientKeys reads "KEY[=FLOW],KEY[=FLOW]".
func parseClientKeys(s string) []gateway.ClientKey {
	var keys []gateway.ClientKey
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, flow, _ := strings.Cut(part, "=")
		keys = append(keys, gateway.ClientKey{Key: strings.TrimSpace(k), Flow: strings.TrimSpace(flow)})
	}
	return keys
}

func runGateway(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "gateway", "[flags]",
		"Serves POST /v1/chat/completions (plain and streaming), GET /v1/models, GET /v1/flows and\n"+
			"GET /metrics in front of one provider key. Point any OpenAI-compatible client at\n"+
			"http://ADDR/v1; X-Sluice-Flow picks the flow. Requests wait for their turn instead of\n"+
			"being refused; the provider key is read from the environment and never leaves the gateway.\n\n"+
			"Example:\n  SLUICE_UPSTREAM_KEY=gsk_… sluice gateway --upstream https://api.groq.com/openai/v1 --profile groq \\\n"+
			"    --limits rpm=30,tpm=8000,tpd=200000,otpm=1000 --flow summary=1 --flow title=1 --flow analysis=1:1\n\n"+
			"Routes (--config only): one model name made on one of several targets, each a provider key\n"+
			"and model with limits, price and budget of its own; the target is picked before admission\n"+
			"(the cheapest that admits within max_wait, else the soonest; failing targets are out for a\n"+
			"cooldown) and named in the answer's X-Sluice-Target. Without --upstream, a model not routed\n"+
			"is answered 404 model_not_found. A flow's budget holds across every target. In the file:\n\n"+
			"  models:\n"+
			"    - name: fast                 # the model name clients send\n"+
			"      rule: cheapest             # or ordered (the order listed)\n"+
			"      max_wait: 30s              # how long a call may wait for a better-ranked target\n"+
			"      failures: 3                # failed calls in a row that take a target out,\n"+
			"      cooldown: 30s              # for this long (doubling while it fails, up to max_cooldown: 5m)\n"+
			"      targets:\n"+
			"        - name: groq-8b          # in X-Sluice-Target, /v1/flows, metrics and the store\n"+
			"          upstream: https://api.groq.com/openai/v1\n"+
			"          api_key_env: GROQ_API_KEY\n"+
			"          profile: groq\n"+
			"          model: llama-3.1-8b-instant   # the upstream's model name\n"+
			"          limits: rpm=30,tpm=6000\n"+
			"        - name: paid\n"+
			"          upstream: https://api.openai.com/v1\n"+
			"          api_key_env: OPENAI_API_KEY\n"+
			"          model: gpt-4o-mini\n"+
			"          limits: rpm=500,tpm=200000\n"+
			"          price: input=0.15,output=0.60\n"+
			"          budget: day=2.00       # also window: and accounting:, as for the key\n\n"+
			"docs/gateway.md, \"Routes: one model name, several targets\", has the rest.")
	f := addGatewayFlags(fs)
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	cfg, err := f.gatewayConfig(env, fs)
	if err != nil {
		return err
	}
	return f.serve(ctx, env, cfg)
}

// gatewayFlags are the gateway command's flags.
type gatewayFlags struct {
	configF, upstream, profile, limitsF, addr, keyEnv, keyName, clientEnv, window, accounting, dbURL *string
	price, budget                                                                                    *string
	maxWait, keepPlace, lag, retryBase, dayBurst                                                     *time.Duration
	maxParked, defMax, maxWaiting, maxFlowW                                                          *int
	maxBody, maxWBytes                                                                               *int64
	flows                                                                                            flowFlags
	sf                                                                                               *serverFlags
	lf                                                                                               *logFlags
}

func addGatewayFlags(fs *flag.FlagSet) *gatewayFlags {
	f := &gatewayFlags{
		configF:    fs.String("config", "", "YAML `FILE` with the same settings (flags given explicitly win); see docs/gateway.md"),
		upstream:   fs.String("upstream", "", "the provider's OpenAI-compatible API root, e.g. https://api.groq.com/openai/v1 (required)"),
		profile:    fs.String("profile", "openai", "how to read the provider's headers and errors: groq, openai or anthropic"),
		limitsF:    fs.String("limits", "", "the key's limits, e.g. rpm=30,tpm=8000,tpd=200000,otpm=1000 (names: rpm rpd tpm tpd itpm otpm)"),
		price:      fs.String("price", "", "what the key's model charges, in money per million tokens, e.g. input=0.59,output=0.79[,cached_input=0.30]: with it, /v1/flows and /metrics show spend, and --budget applies"),
		budget:     fs.String("budget", "", "money the key's calls may cost, e.g. day=5.00,month=100 (in any 24 hours, in any 30 days; needs --price): a request is admitted on its worst-case price, and one that can never fit is refused naming the budget"),
		addr:       fs.String("addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free port); off loopback, client keys are required"),
		keyEnv:     fs.String("key-env", "SLUICE_UPSTREAM_KEY", "`NAME` of the environment variable holding the provider key"),
		keyName:    fs.String("key-name", "", "name of the key in /v1/flows, metrics and logs (default: the profile)"),
		clientEnv:  fs.String("client-keys-env", "SLUICE_GATEWAY_KEYS", "`NAME` of an environment variable holding client keys as KEY[=FLOW],…; unset: no authentication"),
		window:     fs.String("window", "rolling", "how the provider counts a period: rolling or fixed"),
		accounting: fs.String("accounting", "", "what the provider keeps of a charge: reserve or settle (default: settle for anthropic, else reserve)"),
		maxWait:    fs.Duration("max-wait", 4*time.Minute, "longest a request waits for admission before 429 (a request may set X-Sluice-Max-Wait); under common client timeouts (aiohttp's 300s)"),
		keepPlace:  fs.Duration("keep-place", 2*time.Minute, "how long after its estimated admission a request answered 429 keeps its place in line for the same request sent again (0: keep none)"),
		maxParked:  maxFlowParkedFlag(fs),
		defMax:     fs.Int("default-max-tokens", 1024, "maximum output given to a request that sets none, when its flow has no default (sent as max_completion_tokens on openai and groq, max_tokens on anthropic)"),
		maxBody:    fs.Int64("max-body-bytes", 4<<20, "largest request body accepted; larger ones get 413"),
		lag:        fs.Duration("lag", time.Second, "how much later than its admission the provider may count a call; charges are held that much longer (negative: off)"),
		dayBurst:   fs.Duration("day-burst", time.Hour, "how far ahead of an even pace the day limits (rpd, tpd) may be spent: an idle key answers at once from it, and a backlog spends the day's budget evenly (at most 24h; negative: no pacing)"),
		retryBase:  fs.Duration("retry-base", 250*time.Millisecond, "first backoff after a 5xx, overload, timeout or reset; doubles per attempt, within the request's max wait"),
		maxWaiting: fs.Int("max-waiting", 1024, "most requests that may wait for admission on the key; one more gets 429 naming the bound"),
		maxFlowW:   fs.Int("max-flow-waiting", 512, "most requests of one flow that may wait for admission"),
		maxWBytes:  fs.Int64("max-waiting-bytes", 256<<20, "most bytes of request bodies that may wait for admission, added up"),
		dbURL:      fs.String("db", "", "database that keeps the key's day usage across restarts: an SQLite path (….db) or postgres://… URL (default $SLUICE_DB; neither: kept in memory only)"),
	}
	fs.Var(&f.flows, "flow", "a flow as `NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]]` (repeatable; priority from "+
		strconv.Itoa(governor.MinPriority)+" to "+strconv.Itoa(governor.MaxPriority)+"); unknown flows go to default")
	f.sf = addServerFlags(fs)
	f.lf = addLogFlags(fs)
	return f
}

// gatewayConfig reads the config file into the flags it does not override
// and turns the settings into the gateway's configuration, naming a bad
// one where it was given.
func (f *gatewayFlags) gatewayConfig(env *cli.Env, fs *flag.FlagSet) (gateway.Config, error) {
	var file gatewayFile
	if err := checkModelsPlain(*f.configF); err != nil {
		return gateway.Config{}, err
	}
	set, refuse, err := loadConfig(fs, *f.configF, &file)
	if err != nil {
		return gateway.Config{}, err
	}
	f.sf.refuse = refuse

	cfg := gateway.Config{Upstream: *f.upstream, Key: *f.keyName}
	if cfg.Upstream == "" && len(file.Models) == 0 {
		fmt.Fprintln(env.Stderr, "sluice gateway: --upstream is required (or upstream: in --config, or models: to route)")
		return cfg, cli.ErrUsage
	}
	for _, n := range []struct {
		name      string
		v, lo, hi int64
	}{
		{"default-max-tokens", int64(*f.defMax), 1, llm.MaxOutputTokens}, {"max-body-bytes", *f.maxBody, 1, 1 << 30},
		{"max-waiting", int64(*f.maxWaiting), 1, 1 << 20}, {"max-flow-waiting", int64(*f.maxFlowW), 1, 1 << 20},
		{"max-waiting-bytes", *f.maxWBytes, 1, 1 << 40},
	} {
		if n.v < n.lo || n.v > n.hi {
			return cfg, refuse(n.name, fmt.Errorf("%d is not between %d and %d", n.v, n.lo, n.hi))
		}
	}
	cfg.DefaultMaxTokens, cfg.MaxBodyBytes, cfg.MaxWaiting, cfg.MaxFlowWaiting, cfg.MaxWaitingBytes = *f.defMax, *f.maxBody, *f.maxWaiting, *f.maxFlowW, *f.maxWBytes
	if err := checkMaxFlowParked(*f.maxParked); err != nil {
		return cfg, refuse("max-flow-parked", err)
	}
	cfg.MaxFlowParked = *f.maxParked
	if !set["allowed-hosts"] && len(file.AllowedHosts) > 0 {
		f.sf.hosts = strings.Join(file.AllowedHosts, ",")
	}
	if err := f.keyConfig(&cfg, refuse); err != nil {
		return cfg, err
	}
	if cfg.Models, err = readModels(env, file.Models, refuse); err != nil {
		return cfg, err
	}
	if err := f.clients(env, file, refuse, &cfg); err != nil {
		return cfg, err
	}
	if cfg.Logger, err = f.lf.logger(env.Stderr, refuse); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// keyConfig sets how the key is counted and waited for: its profile,
// limits, window and accounting, the waits and the retries.
func (f *gatewayFlags) keyConfig(cfg *gateway.Config, refuse func(string, error) error) error {
	var err error
	if cfg.Profile, err = llm.ParseProfile(*f.profile); err != nil {
		return refuse("profile", err)
	}
	if cfg.Limits, err = govtext.Limits(*f.limitsF); err != nil {
		return refuse("limits", err)
	}
	if err := cfg.Price.UnmarshalText([]byte(*f.price)); err != nil {
		return refuse("price", err)
	}
	if err := cfg.Budget.UnmarshalText([]byte(*f.budget)); err != nil {
		return refuse("budget", err)
	}
	if err := cfg.Budget.Validate(cfg.Price); err != nil {
		return refuse("budget", err)
	}
	if cfg.FixedWindows, err = govtext.Window(*f.window); err != nil {
		return refuse("window", err)
	}
	switch {
	case *f.accounting == "" && cfg.Profile == llm.Anthropic:
		cfg.SettleOutput = true
	case *f.accounting != "":
		if cfg.SettleOutput, err = govtext.Accounting(*f.accounting); err != nil {
			return refuse("accounting", err)
		}
	}
	if *f.maxWait < 0 {
		return refuse("max-wait", fmt.Errorf("%s is negative", *f.maxWait))
	}
	cfg.MaxWait = cmp.Or(*f.maxWait, time.Nanosecond) // 0 means "do not wait", not "the default"
	if *f.keepPlace < 0 {
		return refuse("keep-place", fmt.Errorf("%s is negative", *f.keepPlace))
	}
	cfg.KeepPlace = cmp.Or(*f.keepPlace, -1) // 0 means "keep none", not "the default"
	cfg.Lag = cmp.Or(*f.lag, -1)
	if *f.dayBurst == 0 || *f.dayBurst > 24*time.Hour {
		return refuse("day-burst", fmt.Errorf("%s: want from 1ns to 24h, or negative for no pacing", *f.dayBurst))
	}
	cfg.DayBurst = *f.dayBurst
	cfg.RetryBase = *f.retryBase
	return nil
}

// clients sets the flows (--flow, else the file's) and the client keys
// (the variable's and the file's), and the provider key.
func (f *gatewayFlags) clients(env *cli.Env, file gatewayFile, refuse func(string, error) error, cfg *gateway.Config) error {
	if len(f.flows) > 0 {
		cfg.Flows = f.flows
	} else {
		for i, fl := range file.Flows {
			flow, err := newFlow(fl.Name, fl.Weight, fl.Priority, fl.DefaultMaxTokens)
			if err != nil {
				return refuse(fmt.Sprintf("flows[%d]", i), err)
			}
			if err := flow.Budget.UnmarshalText([]byte(fl.Budget)); err != nil {
				return refuse(fmt.Sprintf("flows[%d].budget", i), err)
			}
			price := cfg.Price
			if price.IsZero() && routesPriced(cfg.Models) {
				price = governor.Price{Input: 1} // a target's price prices it: the budget holds across targets
			}
			if err := flow.Budget.Validate(price); err != nil {
				return refuse(fmt.Sprintf("flows[%d].budget", i), fmt.Errorf("flow %q: %w", fl.Name, err))
			}
			cfg.Flows = append(cfg.Flows, flow)
		}
	}
	if cfg.APIKey = env.Getenv(*f.keyEnv); cfg.APIKey == "" && cfg.Upstream != "" {
		fmt.Fprintf(env.Stderr, "sluice gateway: %s is empty: no provider key is sent upstream\n", *f.keyEnv)
	}
	cfg.ClientKeys = parseClientKeys(env.Getenv(*f.clientEnv))
	for i, k := range file.ClientKeys {
		v := env.Getenv(k.Env)
		if v == "" {
			return refuse(fmt.Sprintf("client_keys[%d]", i), fmt.Errorf("environment variable %s is empty", k.Env))
		}
		cfg.ClientKeys = append(cfg.ClientKeys, gateway.ClientKey{Key: v, Flow: k.Flow})
	}
	return nil
}

// serve serves the gateway of cfg until ctx ends, then writes the charges
// of the last requests.
func (f *gatewayFlags) serve(ctx context.Context, env *cli.Env, cfg gateway.Config) error {
	listen := *f.addr
	if err := guard.CheckBind(listen, len(cfg.ClientKeys) > 0, "give client keys in "+*f.clientEnv); err != nil {
		return err
	}
	if cfg.Limits == (governor.Limits{}) && cfg.Upstream != "" {
		fmt.Fprintln(env.Stderr, "sluice gateway: warning: no --limits: the gateway knows no limit of the key until the provider says one; it probes the key (a request at a time at first, more as answers come) and learns the limits from the provider's headers and refusals")
	}
	if db := cmp.Or(*f.dbURL, env.Getenv("SLUICE_DB")); db != "" {
		st, err := store.Open(ctx, db)
		if err != nil {
			return fmt.Errorf("--db: %w", err)
		}
		defer st.Close()
		cfg.Store = st
	}
	cfg.Stopping = ctx.Done() // at SIGTERM, waiting requests are answered at once
	gw, err := gateway.New(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.Store != nil {
		// sluice report attributes changes in the flows' rates to these.
		if err := recordGatewayConfig(ctx, cfg); err != nil {
			cfg.Logger.Warn("cannot record the configuration's version; sluice report will not see this start", "err", err)
		}
	}
	gc, err := f.sf.config(listen, gw.WriteError)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	srv := guard.NewServer(gw, gc)
	gw.Start(ctx)
	if cfg.Upstream != "" {
		fmt.Fprintf(env.Stdout, "listening on http://%s (upstream %s, profile %s, limits %s)\n", ln.Addr(), cfg.Upstream, cfg.Profile, cfg.Limits)
	} else {
		fmt.Fprintf(env.Stdout, "listening on http://%s (routes only)\n", ln.Addr())
	}
	for _, m := range cfg.Models {
		names := make([]string, len(m.Targets))
		for i, t := range m.Targets {
			names[i] = t.Name
		}
		fmt.Fprintf(env.Stdout, "model %s: %s over %s\n", m.Name, m.Rule, strings.Join(names, ", "))
	}
	err = serveUntilDone(ctx, srv, ln, 10*time.Second, nil)
	// The server is down: the charges of the last requests are written
	// now, and a failure to write them is the command's too, since the next
	// start would spend them again.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(err, gw.Stop(sctx))
}

// recordGatewayConfig records the configuration the gateway starts with —
// its key's name, limits and flows, never the provider key or the client
// keys — unless it is the one last recorded.
func recordGatewayConfig(ctx context.Context, cfg gateway.Config) error {
	type target struct {
		Name   string           `json:"name"`
		Model  string           `json:"model"`
		Limits map[string]int64 `json:"limits"`
	}
	type model struct {
		Name    string   `json:"name"`
		Rule    string   `json:"rule"`
		Targets []target `json:"targets"`
	}
	type flow struct {
		Name             string  `json:"name"`
		Weight           float64 `json:"weight"`
		Priority         int     `json:"priority"`
		DefaultMaxTokens int     `json:"default_max_tokens,omitempty"`
	}
	c := struct {
		Key              string           `json:"key"`
		Profile          string           `json:"profile"`
		Limits           map[string]int64 `json:"limits"`
		Window           string           `json:"window"`
		Accounting       string           `json:"accounting"`
		DefaultMaxTokens int              `json:"default_max_tokens"`
		MaxWait          string           `json:"max_wait"`
		Flows            []flow           `json:"flows"`
		Models           []model          `json:"models,omitempty"`
	}{Key: cmp.Or(cfg.Key, string(cfg.Profile)), Profile: string(cfg.Profile), Limits: map[string]int64{}, Window: govtext.WindowWord(cfg.FixedWindows),
		Accounting: govtext.AccountingWord(cfg.SettleOutput), DefaultMaxTokens: cfg.DefaultMaxTokens, MaxWait: cfg.MaxWait.String(), Flows: []flow{}}
	for l := range governor.NumLimits {
		if cfg.Limits[l] > 0 {
			c.Limits[l.String()] = cfg.Limits[l]
		}
	}
	for _, f := range cfg.Flows {
		c.Flows = append(c.Flows, flow{f.Name, f.Weight, f.Priority, f.DefaultMaxTokens})
	}
	for _, m := range cfg.Models {
		mv := model{Name: m.Name, Rule: m.Rule.String()}
		for _, t := range m.Targets {
			tv := target{Name: t.Name, Model: t.Model, Limits: map[string]int64{}}
			for l := range governor.NumLimits {
				if t.Limits[l] > 0 {
					tv.Limits[l.String()] = t.Limits[l]
				}
			}
			mv.Targets = append(mv.Targets, tv)
		}
		c.Models = append(c.Models, mv)
	}
	config, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = cfg.Store.RecordConfig(ctx, store.NewConfigVersion(time.Now(), "gateway", buildVersion(), config))
	return err
}

// buildVersion is the binary's module version and VCS revision, as far as
// the build recorded them.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v += " " + s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				v += " (modified)"
			}
		}
	}
	return strings.TrimSpace(v)
}

// readModels reads the file's routed models, naming a bad value by its key
// and line, and a missing one by its model's or target's line.
func readModels(env *cli.Env, models []gatewayModel, refuse func(string, error) error) ([]gateway.Model, error) {
	if len(models) > gateway.MaxModels {
		return nil, refuse("models", fmt.Errorf("%d models, at most %d", len(models), gateway.MaxModels))
	}
	var out []gateway.Model
	seen := map[string]bool{}
	for i, fm := range models {
		at := fmt.Sprintf("models[%d]", i)
		m := gateway.Model{Name: strings.TrimSpace(fm.Name)}
		switch {
		case m.Name == "":
			return nil, refuse(at, errors.New("a model needs a name: the model name clients send"))
		case seen[m.Name]:
			return nil, refuse(at+".name", fmt.Errorf("model %q is listed twice", m.Name))
		case len(fm.Targets) == 0:
			return nil, refuse(at, fmt.Errorf("model %q has no targets", m.Name))
		case len(fm.Targets) > route.MaxTargets:
			return nil, refuse(at+".targets", fmt.Errorf("%d targets, at most %d", len(fm.Targets), route.MaxTargets))
		}
		seen[m.Name] = true
		var err error
		if m.Rule, err = route.ParseRule(fm.Rule); err != nil {
			return nil, refuse(at+".rule", err)
		}
		for _, d := range []struct {
			key  string
			text string
			to   *time.Duration
		}{{"max_wait", fm.MaxWait, &m.MaxWait}, {"cooldown", fm.Cooldown, &m.Cooldown}, {"max_cooldown", fm.MaxCooldown, &m.MaxCooldown}} {
			if d.text == "" {
				continue
			}
			v, err := time.ParseDuration(d.text)
			if err != nil || v <= 0 || v > route.MaxDuration {
				return nil, refuse(at+"."+d.key, fmt.Errorf("%q: want a duration from 1ns to %v, e.g. 30s", d.text, route.MaxDuration))
			}
			*d.to = v
		}
		if fm.Failures != "" {
			if m.Failures, err = strconv.Atoi(fm.Failures); err != nil || m.Failures < 1 || m.Failures > 1000 {
				return nil, refuse(at+".failures", fmt.Errorf("%q: want a whole number from 1 to 1000", fm.Failures))
			}
		}
		names := map[string]bool{}
		for j, ft := range fm.Targets {
			tat := fmt.Sprintf("%s.targets[%d]", at, j)
			t, err := readTarget(env, ft, tat, refuse)
			if err != nil {
				return nil, err
			}
			if names[t.Name] {
				return nil, refuse(tat+".name", fmt.Errorf("target %q is listed twice in model %q", t.Name, m.Name))
			}
			names[t.Name] = true
			m.Targets = append(m.Targets, t)
		}
		out = append(out, m)
	}
	return out, nil
}

// readTarget reads one target of a routed model at path at.
func readTarget(env *cli.Env, ft gatewayTarget, at string, refuse func(string, error) error) (gateway.Target, error) {
	t := gateway.Target{Name: strings.TrimSpace(ft.Name), Upstream: strings.TrimSpace(ft.Upstream), Model: strings.TrimSpace(ft.Model)}
	var err error
	switch {
	case t.Name == "":
		return t, refuse(at, errors.New("a target needs a name: it names the target in X-Sluice-Target, /v1/flows, metrics and the store"))
	case t.Upstream == "":
		return t, refuse(at, fmt.Errorf("target %q needs an upstream: the provider's OpenAI-compatible API root", t.Name))
	case t.Model == "":
		return t, refuse(at, fmt.Errorf("target %q needs a model: the upstream's name of the model", t.Name))
	}
	if t.Profile, err = llm.ParseProfile(cmp.Or(ft.Profile, string(llm.OpenAI))); err != nil {
		return t, refuse(at+".profile", err)
	}
	if t.Limits, err = govtext.Limits(ft.Limits); err != nil {
		return t, refuse(at+".limits", err)
	}
	if err := t.Price.UnmarshalText([]byte(ft.Price)); err != nil {
		return t, refuse(at+".price", err)
	}
	if err := t.Budget.UnmarshalText([]byte(ft.Budget)); err != nil {
		return t, refuse(at+".budget", err)
	}
	if err := t.Budget.Validate(t.Price); err != nil {
		return t, refuse(at+".budget", fmt.Errorf("target %q: %w", t.Name, err))
	}
	if t.FixedWindows, err = govtext.Window(cmp.Or(ft.Window, "rolling")); err != nil {
		return t, refuse(at+".window", err)
	}
	switch {
	case ft.Accounting == "" && t.Profile == llm.Anthropic:
		t.SettleOutput = true
	case ft.Accounting != "":
		if t.SettleOutput, err = govtext.Accounting(ft.Accounting); err != nil {
			return t, refuse(at+".accounting", err)
		}
	}
	if ft.APIKeyEnv != "" {
		if t.APIKey = env.Getenv(ft.APIKeyEnv); t.APIKey == "" {
			return t, refuse(at+".api_key_env", fmt.Errorf("environment variable %s is empty", ft.APIKeyEnv))
		}
	}
	return t, nil
}

// routesPriced reports whether a target of models has a price.
func routesPriced(models []gateway.Model) bool {
	for _, m := range models {
		for _, t := range m.Targets {
			if !t.Price.IsZero() {
				return true
			}
		}
	}
	return false
}

// checkModelsPlain refuses anchors and aliases within the config file's
// models: a list of targets within a list of models, each followed where
// it is used, could make a file of a megabyte read as billions of
// targets.
func checkModelsPlain(path string) error {
	if path == "" {
		return nil
	}
	data, err := yamlfile.ReadFile(path, yamlfile.MaxFileBytes)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil // the reader says what is wrong
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "models" {
			continue
		}
		var alias *yaml.Node
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			if alias != nil {
				return
			}
			if n.Kind == yaml.AliasNode || n.Anchor != "" {
				alias = n
				return
			}
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(top.Content[i+1])
		if alias != nil {
			return fmt.Errorf("--config %s: %w", path, &yamlfile.Error{Path: "models", Line: alias.Line,
				Err: errors.New("anchors and aliases are not read within models: write each target out")})
		}
	}
	return nil
}
