package main

import (
	"context"
	"fmt"
	"slices"
	"time"

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
		"Serves POST /v1/chat/completions, GET /v1/models and GET /sim/stats from a provider model that\n"+
			"enforces every limit exactly and answers in the chosen provider's wire format. Settings come\n"+
			"from --scenario's provider section, then from the flags given explicitly.\n\n"+
			"Example:\n  sluice sim-provider --profile groq --limits rpm=30,tpm=8000,tpd=200000,otpm=1000")
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
		model      = fs.String("model", "sim-model", "model name listed by /v1/models and used when a request names none")
		keyEnv     = fs.String("api-key-env", "", "`NAME` of an environment variable holding the API key clients must send (default: no key required)")
	)
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	set := cli.Given(fs)
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
	scfg := sim.ServerConfig{Addr: *addr, Models: []string{*model}}
	if *keyEnv != "" {
		scfg.APIKey = env.Getenv(*keyEnv)
		if scfg.APIKey == "" {
			return fmt.Errorf("--api-key-env %s: the variable is unset or empty", *keyEnv)
		}
	}
	srv := sim.NewServer(m, scfg)
	if err := srv.Start(ctx); err != nil {
		return err
	}
	limits := p.Limits.String()
	if limits == "" {
		limits = "none"
	}
	auth := "no API key required"
	if scfg.APIKey != "" {
		auth = "API key from $" + *keyEnv + " required"
	}
	fmt.Fprintf(env.Stdout, "listening on http://%s (profile %s, limits %s, window %s, accounting %s, latency %s, default max_tokens %d, max output tokens %d, model %s, %s)\n",
		srv.Addr(), p.Profile, limits, govtext.WindowWord(p.FixedWindows), govtext.AccountingWord(p.SettleOutput), p.Latency, p.DefaultMaxTokens, m.Config().MaxOutputTokens, *model, auth)
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
