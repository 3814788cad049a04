// Package serveapp is what sluice serve runs: the app of the functions
// compiled into the binary (examples/summarize) on one provider key, and the
// handler that answers for the app's parts on one address. The benches
// that measure serve's pipeline and dashboard run the same.
package serveapp

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/jobs"
	"github.com/sluice-dev/sluice/llm"
)

// Options are serve's settings of the app, as its flags give them.
type Options struct {
	// DB is the database; empty: $SLUICE_DB, else sluice.db.
	DB string
	// ProviderURL, Profile, Limits and KeyEnv are the provider key's:
	// its base URL, profile (groq, openai or anthropic), limits
	// (rpm=30,tpm=8000) and the variable holding its API key (empty: none).
	ProviderURL, Profile, Limits, KeyEnv string
	// Price and Budget are the key's price and budget as --price and
	// --budget write them ("input=0.59,output=0.79", "day=5,month=100");
	// empty: none.
	Price, Budget string
	Model         string
	// Concurrency and Retries are the pipeline's (summarize.Config); 0:
	// its defaults.
	Concurrency, Retries  int
	RetryBase, RunTimeout time.Duration
	Timeouts              llm.Timeouts // of each provider call
	Logger                *slog.Logger // nil: slog.Default()
	Flows                 []governor.FlowConfig
	// DayBurst is the key's sluice.Provider.DayBurst (0: its default).
	DayBurst             time.Duration
	Node                 string        // empty: not one of a cluster
	LeaseTTL, AdoptEvery time.Duration // with Node
	AppVersion           string        // empty: the default
	StopGrace            time.Duration // 0: the default; negative: none
	// Jobs are the jobs of serve's config file (jobs:), checked; nil:
	// none. Their flows join Flows.
	Jobs *jobs.Config
}

// New builds an app running the summarize pipeline; getenv reads the
// variables the options name.
func New(ctx context.Context, getenv func(string) string, o Options) (*sluice.App, error) {
	db := DB(o.DB, getenv)
	ls, err := govtext.Limits(o.Limits)
	if err != nil {
		return nil, fmt.Errorf("--limits: %w", err)
	}
	prof, err := llm.ParseProfile(o.Profile)
	if err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	var price governor.Price
	if err := price.UnmarshalText([]byte(o.Price)); err != nil {
		return nil, fmt.Errorf("--price: %w", err)
	}
	var budget governor.Budget
	if err := budget.UnmarshalText([]byte(o.Budget)); err != nil {
		return nil, fmt.Errorf("--budget: %w", err)
	}
	key := ""
	if o.KeyEnv != "" {
		if key = getenv(o.KeyEnv); key == "" {
			return nil, fmt.Errorf("--api-key-env %s: the variable is empty", o.KeyEnv)
		}
	}
	var cluster *sluice.Cluster
	if o.Node != "" {
		cluster = &sluice.Cluster{LeaseTTL: o.LeaseTTL, AdoptEvery: o.AdoptEvery}
	}
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: db,
		ExecutorID:  o.Node,
		Cluster:     cluster,
		RetryBase:   o.RetryBase,
		Logger:      o.Logger,
		Flows:       append(slices.Clip(o.Flows), o.Jobs.Flows()...),
		AppVersion:  o.AppVersion,
		StopGrace:   o.StopGrace,
		Providers: []sluice.Provider{{
			Name:     o.Profile,
			LLM:      llm.Config{BaseURL: o.ProviderURL, APIKey: key, Profile: prof, Timeouts: o.Timeouts},
			Limits:   ls,
			Price:    price,
			Budget:   budget,
			DayBurst: o.DayBurst,
		}},
	})
	if err != nil {
		return nil, err
	}
	if err := summarize.Register(app, summarize.Config{Model: o.Model, Concurrency: o.Concurrency, Retries: o.Retries, Timeout: o.RunTimeout}); err != nil {
		_ = app.Stop(context.Background())
		return nil, err
	}
	if o.Jobs != nil {
		// The jobs' databases stay open as long as the process runs.
		if _, err := jobs.Register(ctx, app, o.Jobs, jobs.Options{AppDB: db, Model: o.Model, Provider: o.Profile, Getenv: getenv}); err != nil {
			_ = app.Stop(context.Background())
			return nil, err
		}
	}
	return app, nil
}

// DB is the database serve opens: db, else $SLUICE_DB, else sluice.db.
func DB(db string, getenv func(string) string) string {
	if db == "" {
		db = getenv("SLUICE_DB")
	}
	if db == "" {
		db = "sluice.db"
	}
	return db
}

// StopGrace is --stop-grace as sluice.Config.StopGrace: 0 there is the
// default, so none is negative.
func StopGrace(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
