package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
)

func init() {
	register(&cli.Command{
		Name:    "sim-provider",
		Summary: "serve a simulated LLM provider with exact rate limits (OpenAI-compatible HTTP)",
		Run:     runSimProvider,
	})
}

func runSimProvider(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "sim-provider", "[flags]",
		"Serves POST /v1/chat/completions, GET /v1/models, GET /sim/stats and POST /sim/outage from a\n"+
			"provider model that enforces every limit exactly and answers in the chosen provider's wire\n"+
			"format. Settings come from --scenario's provider section, then from the flags given explicitly.\n"+
			"With --model-limits it serves several models, each with its own limits (and the other settings\n"+
			"of the command), chosen by the request's model; a request naming another gets a 404.\n"+
			"--outage makes a model fail for a while, from a time after the start: 5xx (a 500), overload\n"+
			"(503, Anthropic 529), 429 (naming requests per day, retry-after the rest of the outage) or\n"+
			"down (the connection is reset); POST /sim/outage {\"model\":\"M\",\"mode\":\"5xx\",\"for\":\"1h\"}\n"+
			"begins one at run time (\"for\":\"0s\" ends it). A request in an outage is not charged.\n\n"+
			"Examples:\n  sluice sim-provider --profile groq --limits rpm=30,tpm=8000,tpd=200000,otpm=1000\n"+
			"  sluice sim-provider --profile groq \\\n"+
			"    --model-limits 'llama-3.1-8b-instant=rpm=30,tpm=6000,tpd=500000;llama-3.3-70b-versatile=rpm=30,tpm=12000,tpd=100000' \\\n"+
			"    --outage 'llama-3.1-8b-instant=5xx@10m+1h'")
	var (
		addr       = fs.String("addr", "127.0.0.1:8089", "address to listen on (port 0 picks a free port); off loopback only with --allow-remote")
		remote     = fs.Bool("allow-remote", false, "allow an --addr off loopback: the simulator is a test double that anyone who reaches it can drive")
		scenarioF  = fs.String("scenario", "", "scenario `FILE` whose provider section (and seed) to serve")
		profile    = fs.String("profile", "openai", "wire format: groq, openai or anthropic")
		limitsF    = fs.String("limits", "", "`LIST` of limits, e.g. rpm=30,tpm=8000,tpd=200000,otpm=1000 (names: rpm rpd tpm tpd itpm otpm); none means unlimited")
		window     = fs.String("window", "rolling", "rolling (a charge counts for exactly one period) or fixed (windows on whole minutes and days)")
		accounting = fs.String("accounting", "reserve", "reserve (the input + max_tokens charge stands) or settle (output corrected to the real output at the end)")
		latency    = fs.Duration("latency", 0, "mean response time; each response takes it ±50% (0 answers at once)")
		defMax     = fs.Int64("default-max-tokens", forecast.DefaultMaxTokens, "output tokens reserved for a request that sets no max_tokens")
		maxOut     = fs.Int64("max-output-tokens", forecast.MaxOutputTokens, "the simulated model's max output tokens: a request asking more max_tokens gets a 400")
		faultsF    = fs.String("faults", "", "`LIST` of fractions of admitted requests that fail, e.g. error_5xx=0.1,timeout=0.05,reset=0.01,bad_json=0.01")
		seed       = fs.Int64("seed", 1, "seed for faults, latency and output lengths")
		model      = fs.String("model", "sim-model", "model name listed by /v1/models (requests may name any: the limits are the key's); not with --model-limits")
		modelLims  = fs.String("model-limits", "", "`LIST` of models, each with its own limits, NAME=LIMITS separated by ';', e.g.\n'llama-3.1-8b-instant=rpm=30,tpm=6000;llama-3.3-70b-versatile=rpm=30,tpm=12000' (NAME= for none); not with --limits or --model")
		keyEnv     = fs.String("api-key-env", "", "`NAME` of an environment variable holding the API key clients must send (default: no key required)")
	)
	var outageF outageFlag
	fs.Var(&outageF, "outage", "`MODEL=MODE@START+DURATION` makes a served model fail from START until START+DURATION after the\nsimulator starts (Go durations, each at most 366 days); MODE is 5xx, overload, 429 or down;\nrepeatable, or several separated by ';', e.g. llama-3.1-8b-instant=5xx@10m+1h")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	set := cli.Given(fs)
	var perModel []modelLimits
	if set["model-limits"] {
		if set["model"] {
			return errors.New("--model and --model-limits: name the models in --model-limits only")
		}
		if set["limits"] {
			return errors.New("--limits and --model-limits: give each model's limits in --model-limits")
		}
		var err error
		if perModel, err = parseModelLimits(*modelLims); err != nil {
			return fmt.Errorf("--model-limits: %w", err)
		}
	}
	outages, err := outageF.outages()
	if err != nil {
		return fmt.Errorf("--outage: %w", err)
	}
	if err := guard.CheckBind(*addr, *remote, "pass --allow-remote to serve the simulator to other machines"); err != nil {
		return err
	}
	p, seedV, err := simProvider(set, *scenarioF, *seed, func(p *forecast.Provider) error {
		var err error
		if set["profile"] || *scenarioF == "" {
			p.Profile = llm.Profile(*profile)
			if !slices.Contains(llm.Profiles(), p.Profile) {
				return fmt.Errorf("--profile %q: want groq, openai or anthropic", p.Profile)
			}
		}
		if set["limits"] {
			if p.Limits, err = govtext.Limits(*limitsF); err != nil {
				return fmt.Errorf("--limits: %w", err)
			}
		}
		if set["window"] {
			if p.FixedWindows, err = govtext.Window(*window); err != nil {
				return fmt.Errorf("--window: %w", err)
			}
		}
		if set["accounting"] {
			if p.SettleOutput, err = govtext.Accounting(*accounting); err != nil {
				return fmt.Errorf("--accounting: %w", err)
			}
		}
		if set["latency"] {
			p.Latency = *latency
		}
		if set["default-max-tokens"] {
			p.DefaultMaxTokens = *defMax
		}
		if set["faults"] {
			if p.Faults, err = forecast.ParseFaults(*faultsF); err != nil {
				return fmt.Errorf("--faults: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	cfg := p.ModelConfig(seedV)
	cfg.Model, cfg.Wire, cfg.MaxOutputTokens = *model, true, *maxOut
	m, err := forecast.NewModel(cfg)
	if err != nil {
		return err
	}
	scfg := sim.ServerConfig{Addr: *addr}
	if *keyEnv != "" {
		scfg.APIKey = env.Getenv(*keyEnv)
		if scfg.APIKey == "" {
			return fmt.Errorf("--api-key-env %s: the variable is unset or empty", *keyEnv)
		}
	}
	var srv *sim.Server
	limits, models := p.Limits.String(), *model
	if limits == "" {
		limits = "none"
	}
	if perModel == nil {
		scfg.Models = []string{*model}
		srv = sim.NewServer(m, scfg)
	} else {
		byName := make(map[string]*forecast.Model, len(perModel))
		lims, names := make([]string, len(perModel)), make([]string, len(perModel))
		for i, ml := range perModel {
			c := cfg
			c.Model, c.Limits = ml.name, ml.limits
			if byName[ml.name], err = forecast.NewModel(c); err != nil {
				return fmt.Errorf("--model-limits: model %q: %w", ml.name, err)
			}
			lims[i], names[i] = ml.String(), ml.name
		}
		if srv, err = sim.NewMultiServer(byName, scfg); err != nil {
			return err
		}
		limits, models = strings.Join(lims, ";"), strings.Join(names, ", ")
	}
	if err := srv.ScheduleOutages(outages...); err != nil {
		return fmt.Errorf("--outage: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	auth := "no API key required"
	if scfg.APIKey != "" {
		auth = "API key from $" + *keyEnv + " required"
	}
	modelWord := "model"
	if len(perModel) > 0 {
		modelWord = "models"
	}
	outageText := ""
	if len(outages) > 0 {
		texts := make([]string, len(outages))
		for i, o := range outages {
			texts[i] = o.String()
		}
		outageText = ", outages " + strings.Join(texts, ";")
	}
	fmt.Fprintf(env.Stdout, "listening on http://%s (profile %s, limits %s, window %s, accounting %s, latency %s, default max_tokens %d, max output tokens %d, %s %s%s, %s)\n",
		srv.Addr(), p.Profile, limits, govtext.WindowWord(p.FixedWindows), govtext.AccountingWord(p.SettleOutput), p.Latency, p.DefaultMaxTokens, m.Config().MaxOutputTokens,
		modelWord, models, outageText, auth)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Stop(stopCtx)
}

// simProvider returns the provider to simulate and its seed: --scenario's
// provider section and seed, or the defaults, then what flags (the flags
// given explicitly) set.
func simProvider(set map[string]bool, scenario string, seed int64, flags func(*forecast.Provider) error) (forecast.Provider, int64, error) {
	p := forecast.Provider{Profile: llm.OpenAI, DefaultMaxTokens: forecast.DefaultMaxTokens}
	if scenario != "" {
		sc, err := forecast.Load(scenario)
		if err != nil {
			return p, 0, err
		}
		p = sc.Provider
		if !set["seed"] {
			seed = sc.Seed
		}
	}
	err := flags(&p)
	return p, seed, err
}

// modelLimits is one model of --model-limits and its limits.
type modelLimits struct {
	name   string
	limits governor.Limits
}

// String writes ml as --model-limits takes it: "NAME=LIMITS".
func (ml modelLimits) String() string { return ml.name + "=" + ml.limits.String() }

// parseModelLimits reads --model-limits: "NAME=LIMITS;NAME=LIMITS", LIMITS
// as --limits takes them ("rpm=30,tpm=6000"; empty for none), in the order
// given. Errors name the model or the part that is wrong.
func parseModelLimits(s string) ([]modelLimits, error) {
	var out []modelLimits
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, ls, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want NAME=LIMITS, e.g. llama-3.1-8b-instant=rpm=30,tpm=6000", part)
		case name == "":
			return nil, fmt.Errorf("%q: no model name before '='", part)
		case len(name) > sim.MaxModelName:
			return nil, fmt.Errorf("model %.40q…: a model name is at most %d bytes, got %d", name, sim.MaxModelName, len(name))
		case seen[name]:
			return nil, fmt.Errorf("model %q given twice", name)
		}
		seen[name] = true
		lims, err := govtext.Limits(ls)
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", name, err)
		}
		out = append(out, modelLimits{name, lims})
	}
	if len(out) == 0 {
		return nil, errors.New("no model: want NAME=LIMITS;NAME=LIMITS, e.g. llama-3.1-8b-instant=rpm=30,tpm=6000")
	}
	return out, nil
}

// outageFlag collects the values of --outage, each of one or more outages
// separated by ';'.
type outageFlag []string

func (f *outageFlag) String() string { return strings.Join(*f, ";") }

func (f *outageFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// outages reads every outage the flag was given, in order.
func (f outageFlag) outages() ([]sim.Outage, error) {
	var out []sim.Outage
	for _, v := range f {
		for part := range strings.SplitSeq(v, ";") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			o, err := sim.ParseOutage(strings.TrimSpace(part))
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	return out, nil
}
