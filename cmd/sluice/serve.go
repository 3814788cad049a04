package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/llm"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "run the built-in functions (the summarize pipeline) with the event and run HTTP API",
		run:     runServe,
	})
}

func runServe(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "serve", "[flags]",
		"Runs the functions compiled into this binary (examples/summarize) durably, and serves\n"+
			"POST /v1/events, GET /v1/runs, GET /v1/runs/{id}, POST /v1/runs/{id}/cancel and\n"+
			"POST /v1/runs/{id}/rerun. Bound to loopback by default; any other address needs a\n"+
			"bearer token in the environment variable named by --token-env.")
	addr := fs.String("addr", "127.0.0.1:8288", "address to listen on")
	dbURL := fs.String("db", "", "database: an SQLite path or postgres://… URL (default $SLUICE_DB or sluice.db)")
	tokenEnv := fs.String("token-env", "SLUICE_API_TOKEN", "environment variable holding the API's bearer token (required off loopback)")
	maxEvent := fs.Int64("max-event-bytes", 1<<20, "largest event body accepted; larger ones get 413")
	outputLimit := fs.Int("output-limit", 4096, "bytes of each step output shown by GET /v1/runs/{id}")
	providerURL := fs.String("provider-url", "http://127.0.0.1:8089/v1", "OpenAI-compatible base URL the pipeline's LLM calls go to")
	profile := fs.String("profile", "groq", "provider profile: groq, openai or anthropic")
	limits := fs.String("limits", "rpm=30,tpm=8000,tpd=200000,otpm=1000", "the key's limits, e.g. rpm=30,tpm=8000")
	keyEnv := fs.String("api-key-env", "", "environment variable holding the provider's API key (optional)")
	model := fs.String("model", "sim-model", "model the pipeline asks for")
	sf := addServerFlags(fs)
	if err := parseFlags(fs, env, args); err != nil {
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
	app, err := newSummarizeApp(ctx, env, summarizeOptions{db: *dbURL, providerURL: *providerURL, profile: *profile, limits: *limits, keyEnv: *keyEnv, model: *model})
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())
	if err := app.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := guard.NewServer(app.Handler(sluice.HandlerConfig{Token: token, MaxEventBytes: *maxEvent, OutputLimit: *outputLimit}), gc)
	fmt.Fprintf(env.stdout, "listening on http://%s\n", ln.Addr())
	return serveUntilDone(ctx, srv, ln)
}

type summarizeOptions struct {
	db, providerURL, profile, limits, keyEnv, model string
	concurrency, retries                            int
	retryBase                                       time.Duration
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
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: db,
		RetryBase:   o.retryBase,
		Providers: []sluice.Provider{{
			Name:   o.profile,
			LLM:    llm.Config{BaseURL: o.providerURL, APIKey: key, Profile: prof},
			Limits: ls,
		}},
	})
	if err != nil {
		return nil, err
	}
	if err := summarize.Register(app, summarize.Config{Model: o.model, Concurrency: o.concurrency, Retries: o.retries}); err != nil {
		_ = app.Stop(context.Background())
		return nil, err
	}
	return app, nil
}

func sluiceHandlerConfig(token string) sluice.HandlerConfig {
	return sluice.HandlerConfig{Token: token}
}
