package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/jobs"
	"github.com/sluice-dev/sluice/llm"
)

func init() {
	register(&cli.Command{
		Name:    "serve",
		Summary: "run the built-in functions (the summarize pipeline) with the event and run HTTP API",
		Run:     runServe,
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
	Price            string   `yaml:"price"`
	Budget           string   `yaml:"budget"`
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
	DayBurst         string   `yaml:"day_burst"`
	AdoptEvery       string   `yaml:"adopt_every"`
	StopGrace        string   `yaml:"stop_grace"`
	AppVersion       string   `yaml:"app_version"`
	// Flows are the gateway's flows, as in the gateway's own file.
	Flows []gatewayFlow `yaml:"flows"`
	// SourceDB and Jobs are the jobs declared in the file (package jobs,
	// docs/jobs.md).
	SourceDB string     `yaml:"source_db"`
	Jobs     []jobs.Job `yaml:"jobs"`
}

func runServe(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "serve", "[flags]",
		"Runs the functions compiled into this binary (examples/summarize) durably, and serves\n"+
			"POST /v1/events, GET /v1/runs, GET /v1/runs/{id}, POST /v1/runs/{id}/cancel and\n"+
			"POST /v1/runs/{id}/rerun. It listens at once and opens the database and resumes\n"+
			"unfinished runs in the background: GET /healthz answers as soon as it listens, GET\n"+
			"/readyz answers 200 once it is ready (503 with the phase before), and the API answers\n"+
			"503 with Retry-After until then. Bound to loopback by default; any other address needs\n"+
			"a bearer token in the environment variable named by --token-env.")
	f := addServeFlags(fs)
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	p, err := f.check(env, fs)
	if err != nil {
		return err
	}
	return f.serve(ctx, env, p)
}

// serveFlags are serve's flags.
type serveFlags struct {
	config, addr, tokenEnv, publicURL string
	maxEvent                          int64
	outputLimit                       int
	app                               serveapp.Options // but Logger, Flows and StopGrace
	price                             governor.Price   // app.Price read, by checkBounds
	metricsTokenEnv, clientEnv        string
	withGateway                       bool
	maxParked                         *int
	stopGrace                         time.Duration
	flows                             flowFlags
	sf                                *serverFlags
	lf                                *logFlags
}

func addServeFlags(fs *flag.FlagSet) *serveFlags {
	f := &serveFlags{}
	fs.StringVar(&f.config, "config", "", "YAML `FILE` with the same settings, keys named like the flags with _ for - (run_timeout: 5m); flags given explicitly win; see docs/serve.md")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8288", "address to listen on")
	fs.StringVar(&f.app.DB, "db", "", "database: an SQLite path or postgres://… URL (default $SLUICE_DB or sluice.db)")
	fs.StringVar(&f.tokenEnv, "token-env", "SLUICE_API_TOKEN", "environment variable holding the bearer token of the API and the dashboard (required off loopback)")
	fs.StringVar(&f.publicURL, "public-url", "", "the `URL` people open the dashboard at, behind a proxy (https://sluice.example.com); https marks the session cookie Secure although the proxy speaks plain HTTP to sluice")
	fs.Int64Var(&f.maxEvent, "max-event-bytes", 1<<20, "largest event body accepted; larger ones get 413")
	fs.IntVar(&f.outputLimit, "output-limit", 4096, "bytes of each step output shown by GET /v1/runs/{id}")
	fs.StringVar(&f.app.ProviderURL, "provider-url", "http://127.0.0.1:8089/v1", "OpenAI-compatible base URL the pipeline's LLM calls go to")
	fs.StringVar(&f.app.Profile, "profile", "groq", "provider profile: groq, openai or anthropic")
	fs.StringVar(&f.app.Limits, "limits", "rpm=30,tpm=8000,tpd=200000,otpm=1000", "the key's limits, e.g. rpm=30,tpm=8000")
	fs.StringVar(&f.app.Price, "price", "", "what the key's model charges, in money per million tokens, e.g. input=0.59,output=0.79[,cached_input=0.30]")
	fs.StringVar(&f.app.Budget, "budget", "", "money the key's calls may cost, e.g. day=5.00,month=100 (in any 24 hours, in any 30 days; needs --price; with --node, of all the nodes together): see docs/budgets.md")
	fs.StringVar(&f.app.KeyEnv, "api-key-env", "", "environment variable holding the provider's API key (optional)")
	fs.StringVar(&f.app.Model, "model", "sim-model", "model the pipeline asks for")
	fs.DurationVar(&f.app.RunTimeout, "run-timeout", 10*time.Minute, "deadline of each run from its start; a run past it ends timed_out, naming the step it was in")
	fs.DurationVar(&f.app.Timeouts.Connect, "connect-timeout", 0, "deadline of connecting to the provider (0: the llm default, 10s; negative: none)")
	fs.DurationVar(&f.app.Timeouts.FirstByte, "first-byte-timeout", 0, "deadline from a call sent to the first byte of its answer; a call past it is retried (0: the llm default, 2m; negative: none)")
	fs.DurationVar(&f.app.Timeouts.Total, "call-timeout", 0, "deadline of a whole provider call (0: the llm default, 10m; negative: none)")
	fs.StringVar(&f.metricsTokenEnv, "metrics-token-env", "", "environment variable holding a bearer token for /metrics alone (default: /metrics takes the API's token)")
	fs.BoolVar(&f.withGateway, "gateway", false, "also serve the OpenAI-compatible gateway (POST /v1/chat/completions, GET /v1/models) on this address, governed by the pipeline's key: apps in any language share the key with the functions")
	fs.StringVar(&f.clientEnv, "client-keys-env", "SLUICE_GATEWAY_KEYS", "`NAME` of an environment variable holding the gateway's client keys as KEY[=FLOW],…; the API token is one too")
	f.maxParked = maxFlowParkedFlag(fs)
	fs.StringVar(&f.app.Node, "node", "", "this process's `NAME` among several sluice serve on one PostgreSQL database: its DBOS executor ID (restarted with the same name, it resumes its runs) and its name in the quota leases; set, the key's limits hold in aggregate across the nodes (docs/multinode.md)")
	fs.DurationVar(&f.app.DayBurst, "day-burst", time.Hour, "how far ahead of an even pace the day limits (rpd, tpd) may be spent: an idle key answers at once from it, and a backlog spends the day's budget evenly (at most 24h; negative: no pacing, a day limit is spent as fast as the others allow)")
	fs.DurationVar(&f.app.LeaseTTL, "lease-ttl", 2*time.Second, "with --node: how long a lease of the key's capacity lasts (1ms to 1h)")
	fs.DurationVar(&f.stopGrace, "stop-grace", 30*time.Second, "at SIGTERM or Ctrl-C: how long the calls and requests in flight may take to finish; no new work starts, and every unfinished run resumes at the next start (0 to 1h; a second signal stops at once)")
	fs.StringVar(&f.app.AppVersion, "app-version", "", "the version runs are recorded under; a process resumes only the runs of its own version (default $SLUICE_APP_VERSION, else one derived from the functions' names, the same for every build; see docs/operations.md)")
	fs.DurationVar(&f.app.AdoptEvery, "adopt-every", sluice.DefaultAdoptEvery, "with --node: how often to look for runs left unfinished by nodes that no longer run, and resume them here or on another live node (at most 1h; negative: never, a node's runs then wait for a node of its name)")
	fs.Var(&f.flows, "flow", "a gateway flow as `NAME=WEIGHT[:PRIORITY[:MAX_TOKENS]]` (repeatable); the key's governor shares the key among them and the functions' flows")
	f.sf = addServerFlags(fs)
	f.lf = addLogFlags(fs)
	return f
}

// servePlan is what serve's flags and config file decide, checked before
// anything listens.
type servePlan struct {
	gc                  guard.Config
	token, metricsToken string
	logger              *slog.Logger
	gw                  *gatewayPlan // nil: no gateway
}

// check reads the config file into the flags it does not override and
// checks every setting, naming a bad one where it was given.
func (f *serveFlags) check(env *cli.Env, fs *flag.FlagSet) (*servePlan, error) {
	var file serveFile
	set, refuse, err := loadConfig(fs, f.config, &file)
	if err != nil {
		return nil, err
	}
	if !set["allowed-hosts"] && len(file.AllowedHosts) > 0 {
		f.sf.hosts = strings.Join(file.AllowedHosts, ",")
	}
	f.sf.refuse = refuse
	p := &servePlan{}
	if p.logger, err = f.lf.logger(env.Stderr, refuse); err != nil {
		return nil, err
	}
	p.token = env.Getenv(f.tokenEnv)
	if p.token != "" {
		if err := guard.CheckToken(f.tokenEnv, p.token); err != nil {
			return nil, err
		}
	}
	if err := guard.CheckBind(f.addr, p.token != "", "set "+f.tokenEnv); err != nil {
		return nil, err
	}
	if p.gc, err = f.sf.config(f.addr, nil); err != nil {
		return nil, err
	}
	p.gc.Forms = serveapp.DashboardForm // the dashboard checks a CSRF token on each of its forms
	if err := f.checkBounds(env, refuse); err != nil {
		return nil, err
	}
	if len(file.Jobs) > 0 {
		if f.app.Jobs, err = checkJobs(f.config, f.app, env); err != nil {
			return nil, err
		}
	} else if file.SourceDB != "" {
		return nil, refuse("source_db", errors.New("a database for jobs, but the file declares no jobs"))
	}
	if f.metricsTokenEnv != "" {
		if p.metricsToken = env.Getenv(f.metricsTokenEnv); p.metricsToken == "" {
			return nil, refuse("metrics-token-env", fmt.Errorf("%s: the variable is empty", f.metricsTokenEnv))
		}
		if err := guard.CheckToken(f.metricsTokenEnv, p.metricsToken); err != nil {
			return nil, err
		}
	}
	switch {
	case f.withGateway:
		if p.gw, err = planServeGateway(env, file, refuse, f.flows, f.clientEnv, p.token); err != nil {
			return nil, err
		}
		for i, fl := range p.gw.flows {
			if err := fl.Budget.Validate(f.price); err != nil {
				return nil, refuse(fmt.Sprintf("flows[%d].budget", i), fmt.Errorf("flow %q: %w", fl.Name, err))
			}
		}
		if err := checkMaxFlowParked(*f.maxParked); err != nil {
			return nil, refuse("max-flow-parked", err)
		}
		p.gw.maxFlowParked = *f.maxParked
	case len(f.flows) > 0 || len(file.Flows) > 0:
		return nil, refuse("flow", errors.New("gateway flows without the gateway: add --gateway (gateway: true)"))
	case cli.Given(fs)["max-flow-parked"]:
		return nil, refuse("max-flow-parked", errors.New("a bound of the gateway's line without the gateway: add --gateway (gateway: true)"))
	}
	if f.app.Jobs != nil {
		// Each job draws on a flow of its name: no other part's flow may
		// have it.
		for _, gf := range p.gw.governorFlows() {
			if slices.ContainsFunc(f.app.Jobs.Jobs(), func(j jobs.Job) bool { return j.Name == gf.Name }) {
				return nil, fmt.Errorf("--config %w", f.app.Jobs.RefuseName(gf.Name, errors.New("also the name of a gateway flow, and a job's calls draw on a flow of its name: rename one")))
			}
		}
	}
	return p, nil
}

// checkJobs reads the jobs of the config file at path and checks them
// against their databases (jobs.Config.Check) before anything starts.
func checkJobs(path string, o serveapp.Options, env *cli.Env) (*jobs.Config, error) {
	cfg, err := jobs.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--config %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cfg.Check(ctx, jobs.Options{AppDB: serveapp.DB(o.DB, env.Getenv), Model: o.Model, Provider: o.Profile, Getenv: env.Getenv}); err != nil {
		return nil, fmt.Errorf("--config %w", err)
	}
	return cfg, nil
}

// checkBounds refuses settings out of their bounds, and what the app would
// refuse once it opens the database, before anything listens; it fills in
// the version from $SLUICE_APP_VERSION.
func (f *serveFlags) checkBounds(env *cli.Env, refuse func(string, error) error) error {
	o := &f.app
	if o.RunTimeout <= 0 {
		return refuse("run-timeout", fmt.Errorf("%s: want a positive duration", o.RunTimeout))
	}
	if f.publicURL != "" {
		if err := ui.CheckPublicURL(f.publicURL); err != nil {
			return refuse("public-url", err)
		}
	}
	if o.DayBurst == 0 || o.DayBurst > 24*time.Hour {
		return refuse("day-burst", fmt.Errorf("%s: want from 1ns to 24h, or negative for no pacing", o.DayBurst))
	}
	if o.LeaseTTL < time.Millisecond || o.LeaseTTL > time.Hour {
		return refuse("lease-ttl", fmt.Errorf("%s: want from 1ms to 1h", o.LeaseTTL))
	}
	if f.stopGrace < 0 || f.stopGrace > time.Hour {
		return refuse("stop-grace", fmt.Errorf("%s: want from 0 to 1h", f.stopGrace))
	}
	if o.AppVersion == "" {
		o.AppVersion = env.Getenv("SLUICE_APP_VERSION")
	}
	if o.AppVersion != "" {
		if err := sluice.CheckVersion(o.AppVersion); err != nil {
			return refuse("app-version", err)
		}
	}
	if o.AdoptEvery == 0 || o.AdoptEvery > time.Hour {
		return refuse("adopt-every", fmt.Errorf("%s: want from 1ns to 1h, or negative for never", o.AdoptEvery))
	}
	if o.Node != "" {
		if err := checkNodeName(o.Node); err != nil {
			return refuse("node", err)
		}
	}
	if _, err := govtext.Limits(o.Limits); err != nil {
		return refuse("limits", err)
	}
	if err := f.price.UnmarshalText([]byte(o.Price)); err != nil {
		return refuse("price", err)
	}
	var budget governor.Budget
	if err := budget.UnmarshalText([]byte(o.Budget)); err != nil {
		return refuse("budget", err)
	}
	if err := budget.Validate(f.price); err != nil {
		return refuse("budget", err)
	}
	if _, err := llm.ParseProfile(o.Profile); err != nil {
		return refuse("profile", err)
	}
	if o.KeyEnv != "" && env.Getenv(o.KeyEnv) == "" {
		return refuse("api-key-env", fmt.Errorf("%s: the variable is empty", o.KeyEnv))
	}
	if f.maxEvent < 1 || f.maxEvent > 64<<20 {
		return refuse("max-event-bytes", fmt.Errorf("%d: want between 1 and %d", f.maxEvent, 64<<20))
	}
	if f.outputLimit < 1 || f.outputLimit > 1<<20 {
		return refuse("output-limit", fmt.Errorf("%d: want between 1 and %d", f.outputLimit, 1<<20))
	}
	return nil
}

// serve listens first, so that a restart is reachable within moments and
// /readyz says when the database is open and unfinished runs are resumed,
// then starts the app in the background and serves until ctx ends.
func (f *serveFlags) serve(ctx context.Context, env *cli.Env, p *servePlan) error {
	starting, err := newServeFront("opening the database", f.withGateway, f.app.Profile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.addr, err)
	}
	srv := starting.server(p.gc)
	fmt.Fprintf(env.Stdout, "listening on http://%s\n", ln.Addr())
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	appc := make(chan *sluice.App, 1)
	go func() {
		if err := f.startApp(sctx, env, p, starting, appc); err != nil {
			starting.Fail(err)
			cancel(err)
		}
	}()
	err = serveUntilDone(sctx, srv, ln, f.stopGrace, func() {
		starting.Stopping()
		select {
		case app := <-appc:
			stopAppGracefully(env, app, f.stopGrace)
		default:
		}
	})
	if cause := context.Cause(sctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // start-up failed
	}
	return err
}

// startApp opens the database, builds the app and its parts, resumes the
// unfinished runs and hands starting the handler; the app goes to appc as
// soon as it exists, for the stop.
func (f *serveFlags) startApp(ctx context.Context, env *cli.Env, p *servePlan, starting *serveFront, appc chan<- *sluice.App) error {
	began := time.Now()
	o := f.app
	o.Logger, o.Flows, o.StopGrace = p.logger, p.gw.governorFlows(), serveapp.StopGrace(f.stopGrace)
	app, err := serveapp.New(ctx, env.Getenv, o)
	if err != nil {
		return err
	}
	appc <- app
	parts := serveapp.Parts{App: app, API: sluice.HandlerConfig{Token: p.token, MaxEventBytes: f.maxEvent, OutputLimit: f.outputLimit}, MetricsToken: p.metricsToken}
	if parts.Gateway, err = p.gw.build(ctx, app, o.ProviderURL, o.Profile, o.KeyEnv, env, p.logger); err != nil {
		return err
	}
	parts.Dashboard, err = app.Dashboard(sluice.DashboardConfig{Token: p.token, PublicURL: f.publicURL, OutputLimit: f.outputLimit, MaxEventBytes: f.maxEvent})
	if err != nil {
		return err
	}
	starting.Phase("resuming unfinished runs")
	if err := app.Start(ctx); err != nil {
		return err
	}
	starting.Ready(serveapp.Handler(parts))
	fmt.Fprintf(env.Stdout, "ready in %s\n", time.Since(began).Round(time.Millisecond))
	return nil
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
func stopAppGracefully(env *cli.Env, app *sluice.App, grace time.Duration) {
	fmt.Fprintf(env.Stdout, "stopping: no new work; calls in flight have %s to finish, unfinished runs resume at the next start\n", grace)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), grace+2*time.Second)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "sluice: stop: %v\n", err)
	}
	fmt.Fprintf(env.Stdout, "stopped in %s\n", time.Since(began).Round(time.Millisecond))
}
