package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/llm"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "run the built-in functions (the summarize pipeline) with the event and run HTTP API",
		run:     runServe,
	})
}

// serveFile is serve's YAML config file (--config). Each single-value key
// is the twin of the flag of the same name (run_timeout, --run-timeout):
// its text is handed to the flag (readConfigFile), so the file and the
// flags accept and refuse the same values; flags given explicitly win.
type serveFile struct {
	Addr             string   `yaml:"addr"`
	DB               string   `yaml:"db"`
	TokenEnv         string   `yaml:"token_env"`
	PublicURL        string   `yaml:"public_url"`
	MaxEventBytes    string   `yaml:"max_event_bytes"`
	OutputLimit      string   `yaml:"output_limit"`
	ProviderURL      string   `yaml:"provider_url"`
	Profile          string   `yaml:"profile"`
	Limits           string   `yaml:"limits"`
	APIKeyEnv        string   `yaml:"api_key_env"`
	Model            string   `yaml:"model"`
	RunTimeout       string   `yaml:"run_timeout"`
	ConnectTimeout   string   `yaml:"connect_timeout"`
	FirstByteTimeout string   `yaml:"first_byte_timeout"`
	CallTimeout      string   `yaml:"call_timeout"`
	HeaderTimeout    string   `yaml:"header_timeout"`
	BodyTimeout      string   `yaml:"body_timeout"`
	WriteTimeout     string   `yaml:"write_timeout"`
	IdleTimeout      string   `yaml:"idle_timeout"`
	AllowedHosts     []string `yaml:"allowed_hosts"`
	LogLevel         string   `yaml:"log_level"`
	LogFormat        string   `yaml:"log_format"`
	MetricsTokenEnv  string   `yaml:"metrics_token_env"`
	Gateway          string   `yaml:"gateway"`
	ClientKeysEnv    string   `yaml:"client_keys_env"`
	MaxFlowParked    string   `yaml:"max_flow_parked"`
	Node             string   `yaml:"node"`
	LeaseTTL         string   `yaml:"lease_ttl"`
	AdoptEvery       string   `yaml:"adopt_every"`
	StopGrace        string   `yaml:"stop_grace"`
	AppVersion       string   `yaml:"app_version"`
	// Flows are the gateway's flows, as in the gateway's own file.
	Flows []gatewayFlow `yaml:"flows"`
}

func runServe(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "serve", "[flags]",
		"Runs the functions compiled into this binary (examples/summarize) durably, and serves\n"+
			"POST /v1/events, GET /v1/runs, GET /v1/runs/{id}, POST /v1/runs/{id}/cancel and\n"+
			"POST /v1/runs/{id}/rerun. It listens at once and opens the database and resumes\n"+
			"unfinished runs in the background: GET /healthz answers as soon as it listens, GET\n"+
			"/readyz answers 200 once it is ready (503 with the phase before), and the API answers\n"+
			"503 with Retry-After until then. Bound to loopback by default; any other address needs\n"+
			"a bearer token in the environment variable named by --token-env.")
	configF := fs.String("config", "", "YAML `FILE` with the same settings, keys named like the flags with _ for - (run_timeout: 5m); flags given explicitly win; see docs/serve.md")
	addr := fs.String("addr", "127.0.0.1:8288", "address to listen on")
	dbURL := fs.String("db", "", "database: an SQLite path or postgres://… URL (default $SLUICE_DB or sluice.db)")
	tokenEnv := fs.String("token-env", "SLUICE_API_TOKEN", "environment variable holding the bearer token of the API and the dashboard (required off loopback)")
	publicURL := fs.String("public-url", "", "the `URL` people open the dashboard at, behind a proxy (https://sluice.example.com); https marks the session cookie Secure although the proxy speaks plain HTTP to sluice")
	maxEvent := fs.Int64("max-event-bytes", 1<<20, "largest event body accepted; larger ones get 413")
	outputLimit := fs.Int("output-limit", 4096, "bytes of each step output shown by GET /v1/runs/{id}")
	providerURL := fs.String("provider-url", "http://127.0.0.1:8089/v1", "OpenAI-compatible base URL the pipeline's LLM calls go to")
	profile := fs.String("profile", "groq", "provider profile: groq, openai or anthropic")
	limits := fs.String("limits", "rpm=30,tpm=8000,tpd=200000,otpm=1000", "the key's limits, e.g. rpm=30,tpm=8000")
	keyEnv := fs.String("api-key-env", "", "environment variable holding the provider's API key (optional)")
	model := fs.String("model", "sim-model", "model the pipeline asks for")
	runTimeout := fs.Duration("run-timeout", 10*time.Minute, "deadline of each run from its start; a run past it ends timed_out, naming the step it was in")
	var calls llm.Timeouts
	fs.DurationVar(&calls.Connect, "connect-timeout", 0, "deadline of connecting to the provider (0: the llm default, 10s; negative: none)")
	fs.DurationVar(&calls.FirstByte, "first-byte-timeout", 0, "deadline from a call sent to the first byte of its answer; a call past it is retried (0: the llm default, 2m; negative: none)")
	fs.DurationVar(&calls.Total, "call-timeout", 0, "deadline of a whole provider call (0: the llm default, 10m; negative: none)")
	metricsTokenEnv := fs.String("metrics-token-env", "", "environment variable holding a bearer token for /metrics alone (default: /metrics takes the API's token)")
	withGateway := fs.Bool("gateway", false, "also serve the OpenAI-compatible gateway (POST /v1/chat/completions, GET /v1/models) on this address, governed by the pipeline's key: apps in any language share the key with the functions")
	clientEnv := fs.String("client-keys-env", "SLUICE_GATEWAY_KEYS", "`NAME` of an environment variable holding the gateway's client keys as KEY[=FLOW],…; the API token is one too")
	maxParked := maxFlowParkedFlag(fs)
	node := fs.String("node", "", "this process's `NAME` among several sluice serve on one PostgreSQL database: its DBOS executor ID (restarted with the same name, it resumes its runs) and its name in the quota leases; set, the key's limits hold in aggregate across the nodes (docs/multinode.md)")
	leaseTTL := fs.Duration("lease-ttl", 2*time.Second, "with --node: how long a lease of the key's capacity lasts (1ms to 1h)")
	stopGrace := fs.Duration("stop-grace", 30*time.Second, "at SIGTERM or Ctrl-C: how long the calls and requests in flight may take to finish; no new work starts, and every unfinished run resumes at the next start (0 to 1h; a second signal stops at once)")
	appVersion := fs.String("app-version", "", "the version runs are recorded under; a process resumes only the runs of its own version (default $SLUICE_APP_VERSION, else one derived from the functions' names, the same for every build; see docs/operations.md)")
	adopt := fs.Duration("adopt-every", sluice.DefaultAdoptEvery, "with --node: how often to look for runs left unfinished by nodes that no longer run, and resume them here or on another live node (at most 1h; negative: never, a node's runs then wait for a node of its name)")
	var flows flowFlags
	fs.Var(&flows, "flow", "a gateway flow as `NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]]` (repeatable); the key's governor shares the key among them and the functions' flows")
	sf := addServerFlags(fs)
	lf := addLogFlags(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	var file serveFile
	set, refuse, err := loadConfig(fs, *configF, &file)
	if err != nil {
		return err
	}
	if !set["allowed-hosts"] && len(file.AllowedHosts) > 0 {
		sf.hosts = strings.Join(file.AllowedHosts, ",")
	}
	sf.refuse = refuse
	logger, err := lf.logger(env.stderr, refuse)
	if err != nil {
		return err
	}
	token := env.getenv(*tokenEnv)
	if token != "" {
		if err := guard.CheckToken(*tokenEnv, token); err != nil {
			return err
		}
	}
	if err := guard.CheckBind(*addr, token != "", "set "+*tokenEnv); err != nil {
		return err
	}
	gc, err := sf.config(*addr, nil)
	if err != nil {
		return err
	}
	gc.Forms = dashboardForm // the dashboard checks a CSRF token on each of its forms
	if *runTimeout <= 0 {
		return refuse("run-timeout", fmt.Errorf("%s: want a positive duration", *runTimeout))
	}
	if *publicURL != "" {
		if err := ui.CheckPublicURL(*publicURL); err != nil {
			return refuse("public-url", err)
		}
	}
	if *leaseTTL < time.Millisecond || *leaseTTL > time.Hour {
		return refuse("lease-ttl", fmt.Errorf("%s: want from 1ms to 1h", *leaseTTL))
	}
	if *stopGrace < 0 || *stopGrace > time.Hour {
		return refuse("stop-grace", fmt.Errorf("%s: want from 0 to 1h", *stopGrace))
	}
	if *appVersion == "" {
		*appVersion = env.getenv("SLUICE_APP_VERSION")
	}
	if *appVersion != "" {
		if err := sluice.CheckVersion(*appVersion); err != nil {
			return refuse("app-version", err)
		}
	}
	if *adopt == 0 || *adopt > time.Hour {
		return refuse("adopt-every", fmt.Errorf("%s: want from 1ns to 1h, or negative for never", *adopt))
	}
	if *node != "" {
		if err := checkNodeName(*node); err != nil {
			return refuse("node", err)
		}
	}
	// What the app would refuse once it opens the database, refused now,
	// before anything listens, and named where it was given.
	if _, err := governor.ParseLimits(*limits); err != nil {
		return refuse("limits", err)
	}
	if _, err := llm.ParseProfile(*profile); err != nil {
		return refuse("profile", err)
	}
	if *keyEnv != "" && env.getenv(*keyEnv) == "" {
		return refuse("api-key-env", fmt.Errorf("%s: the variable is empty", *keyEnv))
	}
	if *maxEvent < 1 || *maxEvent > 64<<20 {
		return refuse("max-event-bytes", fmt.Errorf("%d: want between 1 and %d", *maxEvent, 64<<20))
	}
	if *outputLimit < 1 || *outputLimit > 1<<20 {
		return refuse("output-limit", fmt.Errorf("%d: want between 1 and %d", *outputLimit, 1<<20))
	}
	metricsToken := ""
	if *metricsTokenEnv != "" {
		if metricsToken = env.getenv(*metricsTokenEnv); metricsToken == "" {
			return refuse("metrics-token-env", fmt.Errorf("%s: the variable is empty", *metricsTokenEnv))
		}
		if err := guard.CheckToken(*metricsTokenEnv, metricsToken); err != nil {
			return err
		}
	}
	var gw *gatewayPlan
	if *withGateway {
		if gw, err = planServeGateway(env, file, refuse, flows, *clientEnv, token); err != nil {
			return err
		}
		if err := checkMaxFlowParked(*maxParked); err != nil {
			return refuse("max-flow-parked", err)
		}
		gw.maxFlowParked = *maxParked
	} else if len(flows) > 0 || len(file.Flows) > 0 {
		return refuse("flow", errors.New("gateway flows without the gateway: add --gateway (gateway: true)"))
	} else if flagsGiven(fs)["max-flow-parked"] {
		return refuse("max-flow-parked", errors.New("a bound of the gateway's line without the gateway: add --gateway (gateway: true)"))
	}
	starting, err := newServeFront("opening the database", *withGateway, *profile)
	if err != nil {
		return err
	}
	// Listen first: a restart is reachable within moments, and /readyz
	// says when the database is open and unfinished runs are resumed.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := starting.server(gc)
	fmt.Fprintf(env.stdout, "listening on http://%s\n", ln.Addr())
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	appc := make(chan *sluice.App, 1)
	go func() {
		began := time.Now()
		app, err := newSummarizeApp(sctx, env, summarizeOptions{db: *dbURL, providerURL: *providerURL, profile: *profile, limits: *limits, keyEnv: *keyEnv, model: *model, runTimeout: *runTimeout, timeouts: calls, logger: logger, flows: gw.governorFlows(), node: *node, leaseTTL: *leaseTTL, adoptEvery: *adopt,
			appVersion: *appVersion, stopGrace: stopGraceConfig(*stopGrace)})
		parts := serveParts{app: app, api: sluice.HandlerConfig{Token: token, MaxEventBytes: *maxEvent, OutputLimit: *outputLimit}, metricsToken: metricsToken}
		if err == nil {
			appc <- app
			parts.gateway, err = gw.build(sctx, app, *providerURL, *profile, *keyEnv, env, logger)
		}
		if err == nil {
			parts.dashboard, err = app.Dashboard(sluice.DashboardConfig{Token: token, PublicURL: *publicURL, OutputLimit: *outputLimit, MaxEventBytes: *maxEvent})
		}
		if err == nil {
			starting.Phase("resuming unfinished runs")
			err = app.Start(sctx)
		}
		if err != nil {
			starting.Fail(err)
			cancel(err)
			return
		}
		starting.Ready(serveHandler(parts))
		fmt.Fprintf(env.stdout, "ready in %s\n", time.Since(began).Round(time.Millisecond))
	}()
	err = serveUntilDone(sctx, srv, ln, *stopGrace, func() {
		select {
		case app := <-appc:
			stopAppGracefully(env, app, *stopGrace)
		default:
		}
	})
	if cause := context.Cause(sctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // start-up failed
	}
	return err
}

type summarizeOptions struct {
	db, providerURL, profile, limits, keyEnv, model string
	concurrency, retries                            int
	retryBase, runTimeout                           time.Duration
	timeouts                                        llm.Timeouts // of each provider call
	logger                                          *slog.Logger // nil: slog.Default()
	flows                                           []governor.FlowConfig
	node                                            string        // empty: not one of a cluster
	leaseTTL, adoptEvery                            time.Duration // with node
	appVersion                                      string        // empty: the default
	stopGrace                                       time.Duration // 0: the default; negative: none
}

// newSummarizeApp builds an app running the summarize pipeline.
func newSummarizeApp(ctx context.Context, env *cmdEnv, o summarizeOptions) (*sluice.App, error) {
	db := o.db
	if db == "" {
		db = env.getenv("SLUICE_DB")
	}
	if db == "" {
		db = "sluice.db"
	}
	ls, err := governor.ParseLimits(o.limits)
	if err != nil {
		return nil, fmt.Errorf("--limits: %w", err)
	}
	prof, err := llm.ParseProfile(o.profile)
	if err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	key := ""
	if o.keyEnv != "" {
		if key = env.getenv(o.keyEnv); key == "" {
			return nil, fmt.Errorf("--api-key-env %s: the variable is empty", o.keyEnv)
		}
	}
	var cluster *sluice.Cluster
	if o.node != "" {
		cluster = &sluice.Cluster{LeaseTTL: o.leaseTTL, AdoptEvery: o.adoptEvery}
	}
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: db,
		ExecutorID:  o.node,
		Cluster:     cluster,
		RetryBase:   o.retryBase,
		Logger:      o.logger,
		Flows:       o.flows,
		AppVersion:  o.appVersion,
		StopGrace:   o.stopGrace,
		Providers: []sluice.Provider{{
			Name:   o.profile,
			LLM:    llm.Config{BaseURL: o.providerURL, APIKey: key, Profile: prof, Timeouts: o.timeouts},
			Limits: ls,
		}},
	})
	if err != nil {
		return nil, err
	}
	if err := summarize.Register(app, summarize.Config{Model: o.model, Concurrency: o.concurrency, Retries: o.retries, Timeout: o.runTimeout}); err != nil {
		_ = app.Stop(context.Background())
		return nil, err
	}
	return app, nil
}

func sluiceHandlerConfig(token string) sluice.HandlerConfig {
	return sluice.HandlerConfig{Token: token}
}

// checkNodeName refuses a node name the store could not keep: it names the
// process in DBOS and in the quota leases.
func checkNodeName(name string) error {
	switch {
	case len(name) > 64:
		return fmt.Errorf("%q: at most 64 bytes", name[:64]+"…")
	case !nodeName.MatchString(name):
		return fmt.Errorf("%q: letters, digits, '.', '_' and '-' only", name)
	}
	return nil
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// stopAppGracefully stops app as a pause within grace plus two seconds (see
// sluice.App.Stop) and says so, with what stays to resume.
func stopAppGracefully(env *cmdEnv, app *sluice.App, grace time.Duration) {
	fmt.Fprintf(env.stdout, "stopping: no new work; calls in flight have %s to finish, unfinished runs resume at the next start\n", grace)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), grace+2*time.Second)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		fmt.Fprintf(env.stderr, "sluice: stop: %v\n", err)
	}
	fmt.Fprintf(env.stdout, "stopped in %s\n", time.Since(began).Round(time.Millisecond))
}

// stopGraceConfig is --stop-grace as sluice.Config.StopGrace: 0 there is
// the default, so none is negative.
func stopGraceConfig(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
