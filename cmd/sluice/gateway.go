package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/store"
	_ "github.com/sluice-dev/sluice/internal/store/postgres"
	_ "github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/llm"
)

func init() {
	register(&command{
		name:    "gateway",
		summary: "serve an OpenAI-compatible gateway that governs one provider key for apps in any language",
		run:     runGateway,
	})
}

// gatewayFile is the gateway's section of a YAML config file; flags given
// explicitly win over it.
type gatewayFile struct {
	Upstream         string           `yaml:"upstream"`
	Profile          string           `yaml:"profile"`
	Limits           string           `yaml:"limits"`
	Addr             string           `yaml:"addr"`
	KeyEnv           string           `yaml:"key_env"`
	Key              string           `yaml:"key_name"`
	Window           string           `yaml:"window"`
	Accounting       string           `yaml:"accounting"`
	MaxWait          string           `yaml:"max_wait"`
	KeepPlace        string           `yaml:"keep_place"`
	DefaultMaxTokens *int             `yaml:"default_max_tokens"`
	MaxBodyBytes     *int64           `yaml:"max_body_bytes"`
	MaxWaiting       *int             `yaml:"max_waiting"`
	MaxFlowWaiting   *int             `yaml:"max_flow_waiting"`
	MaxWaitingBytes  *int64           `yaml:"max_waiting_bytes"`
	HeaderTimeout    string           `yaml:"header_timeout"`
	BodyTimeout      string           `yaml:"body_timeout"`
	WriteTimeout     string           `yaml:"write_timeout"`
	IdleTimeout      string           `yaml:"idle_timeout"`
	AllowedHosts     []string         `yaml:"allowed_hosts"`
	Lag              string           `yaml:"lag"`
	RetryBase        string           `yaml:"retry_base"`
	DB               string           `yaml:"db"`
	Flows            []gatewayFlow    `yaml:"flows"`
	ClientKeys       []gatewayKeyFile `yaml:"client_keys"`
}

// gatewayFlow is a flow in the file. A key left out takes its default; a
// key given is checked as the same part of --flow is.
type gatewayFlow struct {
	Name             string   `yaml:"name"`
	Weight           *float64 `yaml:"weight"`
	Priority         int      `yaml:"priority"`
	DefaultMaxTokens *int     `yaml:"default_max_tokens"`
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
	if !ok || name == "" {
		return gateway.Flow{}, fmt.Errorf("flow %q: want NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]], e.g. analysis=1:1", v)
	}
	parts := strings.Split(spec, ":")
	if len(parts) > 3 {
		return gateway.Flow{}, fmt.Errorf("flow %q: want NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]]", v)
	}
	fl := gateway.Flow{Name: name}
	w, err := strconv.ParseFloat(parts[0], 64)
	if err != nil {
		return fl, fmt.Errorf("flow %q: weight %q is not a number", name, parts[0])
	}
	fl.Weight = w
	if len(parts) > 1 && parts[1] != "" {
		if fl.Priority, err = strconv.Atoi(parts[1]); err != nil {
			return fl, fmt.Errorf("flow %q: priority %q is not a whole number", name, parts[1])
		}
	}
	maxTokens := (*int)(nil)
	if len(parts) > 2 {
		n, err := strconv.Atoi(parts[2])
		if err != nil {
			return fl, fmt.Errorf("flow %q: default max_tokens %q is not a whole number", name, parts[2])
		}
		maxTokens = &n
	}
	return checkFlow(fl.Name, &fl.Weight, fl.Priority, maxTokens)
}

// checkFlow builds a flow from --flow or from the file alike, so both
// accept and refuse the same values. Nil means left out: the default.
func checkFlow(name string, weight *float64, priority int, maxTokens *int) (gateway.Flow, error) {
	fl := gateway.Flow{Name: name, Weight: 1, Priority: priority}
	if name == "" {
		return fl, errors.New("a flow has no name")
	}
	if weight != nil {
		if w := *weight; !(w >= governor.MinWeight && w <= governor.MaxWeight) {
			return fl, fmt.Errorf("flow %q: weight %v: want a positive number from %v to %v", name, w, governor.MinWeight, governor.MaxWeight)
		}
		fl.Weight = *weight
	}
	if priority < governor.MinPriority || priority > governor.MaxPriority {
		return fl, fmt.Errorf("flow %q: priority %d: want %d to %d (each step multiplies the flow's share by 4; priority is never absolute)",
			name, priority, governor.MinPriority, governor.MaxPriority)
	}
	if maxTokens != nil {
		if n := *maxTokens; n < 1 || n > llm.MaxOutputTokens {
			return fl, fmt.Errorf("flow %q: default max_tokens %d: want 1 to %d", name, n, llm.MaxOutputTokens)
		}
		fl.DefaultMaxTokens = *maxTokens
	}
	return fl, nil
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

func runGateway(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "gateway", "[flags]",
		"Serves POST /v1/chat/completions (plain and streaming), GET /v1/models, GET /v1/flows and\n"+
			"GET /metrics in front of one provider key. Point any OpenAI-compatible client at\n"+
			"http://ADDR/v1; X-Sluice-Flow picks the flow. Requests wait for their turn instead of\n"+
			"being refused; the provider key is read from the environment and never leaves the gateway.\n\n"+
			"Example:\n  SLUICE_UPSTREAM_KEY=gsk_… sluice gateway --upstream https://api.groq.com/openai/v1 --profile groq \\\n"+
			"    --limits rpm=30,tpm=8000,tpd=200000,otpm=1000 --flow summary=1 --flow title=1 --flow analysis=1:1")
	var (
		configF    = fs.String("config", "", "YAML `FILE` with the same settings (flags given explicitly win); see docs/gateway.md")
		upstream   = fs.String("upstream", "", "the provider's OpenAI-compatible API root, e.g. https://api.groq.com/openai/v1 (required)")
		profile    = fs.String("profile", "openai", "how to read the provider's headers and errors: groq, openai or anthropic")
		limitsF    = fs.String("limits", "", "the key's limits, e.g. rpm=30,tpm=8000,tpd=200000,otpm=1000 (names: rpm rpd tpm tpd itpm otpm)")
		addr       = fs.String("addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free port); off loopback, client keys are required")
		keyEnv     = fs.String("key-env", "SLUICE_UPSTREAM_KEY", "`NAME` of the environment variable holding the provider key")
		keyName    = fs.String("key-name", "", "name of the key in /v1/flows, metrics and logs (default: the profile)")
		clientEnv  = fs.String("client-keys-env", "SLUICE_GATEWAY_KEYS", "`NAME` of an environment variable holding client keys as KEY[=FLOW],…; unset: no authentication")
		window     = fs.String("window", "rolling", "how the provider counts a period: rolling or fixed")
		accounting = fs.String("accounting", "", "what the provider keeps of a charge: reserve or settle (default: settle for anthropic, else reserve)")
		maxWait    = fs.Duration("max-wait", 4*time.Minute, "longest a request waits for admission before 429 (a request may set X-Sluice-Max-Wait); under common client timeouts (aiohttp's 300s)")
		keepPlace  = fs.Duration("keep-place", 2*time.Minute, "how long after its estimated admission a request answered 429 keeps its place in line for the same request sent again (0: keep none)")
		defMax     = fs.Int("default-max-tokens", 1024, "max_tokens given to a request that sets none, when its flow has no default")
		maxBody    = fs.Int64("max-body-bytes", 4<<20, "largest request body accepted; larger ones get 413")
		lag        = fs.Duration("lag", time.Second, "how much later than its admission the provider may count a call; charges are held that much longer (negative: off)")
		retryBase  = fs.Duration("retry-base", 250*time.Millisecond, "first backoff after a 5xx, overload, timeout or reset; doubles per attempt, within the request's max wait")
		logLevel   = fs.String("log-level", "info", "log level: debug, info, warn or error (logs go to stderr)")
		maxWaiting = fs.Int("max-waiting", 1024, "most requests that may wait for admission on the key; one more gets 429 naming the bound")
		maxFlowW   = fs.Int("max-flow-waiting", 512, "most requests of one flow that may wait for admission")
		maxWBytes  = fs.Int64("max-waiting-bytes", 256<<20, "most bytes of request bodies that may wait for admission, added up")
		dbURL      = fs.String("db", "", "database that keeps the key's day usage across restarts: an SQLite path (….db) or postgres://… URL (default $SLUICE_DB; neither: kept in memory only)")
		flows      flowFlags
	)
	fs.Var(&flows, "flow", "a flow as `NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]]` (repeatable; priority from "+
		strconv.Itoa(governor.MinPriority)+" to "+strconv.Itoa(governor.MaxPriority)+"); unknown flows go to default")
	sf := addServerFlags(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var file gatewayFile
	if *configF != "" {
		data, err := os.ReadFile(*configF)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&file); err != nil {
			return fmt.Errorf("--config %s: %w", *configF, err)
		}
	}
	// pick returns the flag's value when given explicitly, else the file's when set.
	pick := func(name, flagV, fileV string) string {
		if set[name] || fileV == "" {
			return flagV
		}
		return fileV
	}
	dur := func(name string, flagV time.Duration, fileV string) (time.Duration, error) {
		if set[name] || fileV == "" {
			return flagV, nil
		}
		d, err := time.ParseDuration(fileV)
		if err != nil {
			return 0, fmt.Errorf("--config: %s %q: %w", strings.ReplaceAll(name, "-", "_"), fileV, err)
		}
		return d, nil
	}

	cfg := gateway.Config{Upstream: pick("upstream", *upstream, file.Upstream), Key: pick("key-name", *keyName, file.Key)}
	if cfg.Upstream == "" {
		fmt.Fprintln(env.stderr, "sluice gateway: --upstream is required (or upstream: in --config)")
		return errUsage
	}
	// Numbers: the flag when given, else the file's when present, else the
	// flag's default; checked the same wherever they came from.
	var err error
	if cfg.DefaultMaxTokens, err = bounded("default-max-tokens", set, *defMax, file.DefaultMaxTokens, 1, llm.MaxOutputTokens); err != nil {
		return err
	}
	if cfg.MaxBodyBytes, err = bounded("max-body-bytes", set, *maxBody, file.MaxBodyBytes, 1, 1<<30); err != nil {
		return err
	}
	if cfg.MaxWaiting, err = bounded("max-waiting", set, *maxWaiting, file.MaxWaiting, 1, 1<<20); err != nil {
		return err
	}
	if cfg.MaxFlowWaiting, err = bounded("max-flow-waiting", set, *maxFlowW, file.MaxFlowWaiting, 1, 1<<20); err != nil {
		return err
	}
	if cfg.MaxWaitingBytes, err = bounded("max-waiting-bytes", set, *maxWBytes, file.MaxWaitingBytes, 1, 1<<40); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
		file string
	}{{"header-timeout", &sf.header, file.HeaderTimeout}, {"body-timeout", &sf.body, file.BodyTimeout},
		{"write-timeout", &sf.write, file.WriteTimeout}, {"idle-timeout", &sf.idle, file.IdleTimeout}} {
		if *d.to, err = dur(d.name, *d.to, d.file); err != nil {
			return err
		}
	}
	if !set["allowed-hosts"] && len(file.AllowedHosts) > 0 {
		sf.hosts = strings.Join(file.AllowedHosts, ",")
	}
	prof, err := llm.ParseProfile(pick("profile", *profile, file.Profile))
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	cfg.Profile = prof
	if cfg.Limits, err = governor.ParseLimits(pick("limits", *limitsF, file.Limits)); err != nil {
		return fmt.Errorf("--limits: %w", err)
	}
	switch w := pick("window", *window, file.Window); w {
	case "rolling":
	case "fixed":
		cfg.Window = governor.Fixed
	default:
		return fmt.Errorf("--window %q: want rolling or fixed", w)
	}
	switch a := pick("accounting", *accounting, file.Accounting); a {
	case "":
		if prof == llm.Anthropic {
			cfg.Accounting = governor.SettleAccounting
		}
	case "reserve":
	case "settle":
		cfg.Accounting = governor.SettleAccounting
	default:
		return fmt.Errorf("--accounting %q: want reserve or settle", a)
	}
	if cfg.MaxWait, err = dur("max-wait", *maxWait, file.MaxWait); err != nil {
		return err
	}
	if cfg.MaxWait < 0 {
		return fmt.Errorf("max wait %s is negative", cfg.MaxWait)
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = time.Nanosecond // 0 means "do not wait", not "the default"
	}
	if cfg.KeepPlace, err = dur("keep-place", *keepPlace, file.KeepPlace); err != nil {
		return err
	}
	if cfg.KeepPlace < 0 {
		return fmt.Errorf("keep place %s is negative", cfg.KeepPlace)
	}
	if cfg.KeepPlace == 0 {
		cfg.KeepPlace = -1 // 0 means "keep none", not "the default"
	}
	if cfg.Lag, err = dur("lag", *lag, file.Lag); err != nil {
		return err
	}
	if cfg.Lag == 0 {
		cfg.Lag = -1
	}
	if cfg.RetryBase, err = dur("retry-base", *retryBase, file.RetryBase); err != nil {
		return err
	}
	if len(flows) > 0 {
		cfg.Flows = flows
	} else {
		for i, f := range file.Flows {
			fl, err := checkFlow(f.Name, f.Weight, f.Priority, f.DefaultMaxTokens)
			if err != nil {
				return fmt.Errorf("--config: flows[%d]: %w", i, err)
			}
			cfg.Flows = append(cfg.Flows, fl)
		}
	}

	kEnv := pick("key-env", *keyEnv, file.KeyEnv)
	if cfg.APIKey = env.getenv(kEnv); cfg.APIKey == "" {
		fmt.Fprintf(env.stderr, "sluice gateway: %s is empty: no provider key is sent upstream\n", kEnv)
	}
	cfg.ClientKeys = parseClientKeys(env.getenv(*clientEnv))
	for i, k := range file.ClientKeys {
		v := env.getenv(k.Env)
		if v == "" {
			return fmt.Errorf("--config: client_keys[%d]: environment variable %s is empty", i, k.Env)
		}
		cfg.ClientKeys = append(cfg.ClientKeys, gateway.ClientKey{Key: v, Flow: k.Flow})
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: level}))

	listen := pick("addr", *addr, file.Addr)
	if err := guard.CheckBind(listen, len(cfg.ClientKeys) > 0, "give client keys in "+*clientEnv); err != nil {
		return err
	}
	if cfg.Limits == (governor.Limits{}) {
		fmt.Fprintln(env.stderr, "sluice gateway: warning: no --limits: the gateway governs nothing and sends every request upstream at once")
	}
	if db := cmp.Or(pick("db", *dbURL, file.DB), env.getenv("SLUICE_DB")); db != "" {
		st, err := store.Open(ctx, db)
		if err != nil {
			return fmt.Errorf("--db: %w", err)
		}
		defer st.Close()
		cfg.Store = st
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		return err
	}
	gc, err := sf.config(listen, gw.WriteError)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	srv := guard.NewServer(gw, gc)
	gw.Start(ctx)
	fmt.Fprintf(env.stdout, "listening on http://%s (upstream %s, profile %s, limits %s)\n", ln.Addr(), cfg.Upstream, prof, cfg.Limits)
	err = serveUntilDone(ctx, srv, ln)
	// The server is down: the charges of the last requests are written
	// now, and a failure to write them is the command's too, since the next
	// start would spend them again.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(err, gw.Stop(sctx))
}

// bounded picks a number as the gateway's other settings are picked — the
// flag when given, else the file's when present — and checks it within
// [lo, hi], naming the flag and the file's key alike.
func bounded[T int | int64](name string, set map[string]bool, flagV T, fileV *T, lo, hi T) (T, error) {
	v := flagV
	if !set[name] && fileV != nil {
		v = *fileV
	}
	if v < lo || v > hi {
		return v, fmt.Errorf("--%s (%s: in --config) %d: want %d to %d", name, strings.ReplaceAll(name, "-", "_"), v, lo, hi)
	}
	return v, nil
}
