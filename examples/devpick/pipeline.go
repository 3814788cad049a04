package devpick

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Config configures the pipeline on sluice.
type Config struct {
	// DB is a handle on the app's own database file (OpenDB of the app's
	// DatabaseURL), where Table lives: the backfills list pending articles
	// and save outputs in the app's transactions, and load articles
	// through DB. Required.
	DB *sql.DB
	// Model is the model every call asks for (default "sim-model").
	Model string
	// Provider names the app's provider the calls use (default: the first).
	Provider string
	// AnalysisPoll is how often the analysis looks for new articles
	// (default 10 s); Poll how often the two backfills look for new items
	// when they have none (default 1 min).
	AnalysisPoll, Poll time.Duration
	// RetryAfter is how long a rejected output's item waits before its
	// next try (default 10 min); MaxRejects how many rejections park it
	// (default 3).
	RetryAfter time.Duration
	MaxRejects int
	// StallAfter is how long without progress, with articles left, makes a
	// job stalled (default 2 h, the seed's own threshold).
	StallAfter time.Duration
	// InFlight is the most of a job's batches going at once (default 0:
	// as many as the key's quota and the provider's latency need); each
	// call is still admitted by the governor.
	InFlight int
	// TitleAfterSummary makes the title backfill run After the summary
	// backfill (an article's title is eligible the moment the backfill
	// saves its summary) instead of listing the articles with a summary at
	// each poll: only summaries the summary backfill saved count then.
	TitleAfterSummary bool
	// Strict refuses a batch's answer that does not have one marked block
	// per article ([1], [2] …) instead of sharing its words out evenly:
	// every item of such a batch is rejected as empty. Set it against a
	// real model; the provider simulator answers with unmarked words.
	Strict bool
}

// Flows are the governor flows of the three jobs, for sluice.Config.Flows:
// the analysis of new articles has priority; the two backfills share the
// rest by weight, in tokens. A flow's priority is set where the App is
// built, so pass these to sluice.New.
func Flows() []governor.FlowConfig {
	out := make([]governor.FlowConfig, len(Jobs))
	for i, j := range Jobs {
		out[i] = governor.FlowConfig{Name: j.Name, Priority: j.Priority}
	}
	return out
}

// Register adds the three jobs to app as backfills on Table: analysis
// (articles without an analysis), summary (without an English summary) and
// title (without an English title, once the summary backfill has saved the
// article's summary). It creates Table if missing. Register before
// app.Start.
func Register(app *sluice.App, cfg Config) error {
	if cfg.DB == nil {
		return errors.New("devpick: Config.DB is required (OpenDB of the app's database)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreateSchema(ctx, cfg.DB); err != nil {
		return err
	}
	model := cmp.Or(cfg.Model, "sim-model")
	for _, j := range Jobs {
		poll := cmp.Or(cfg.Poll, time.Minute)
		after := ""
		switch j.Name {
		case Analysis:
			poll = cmp.Or(cfg.AnalysisPoll, 10*time.Second)
		case Title:
			// After would admit only the summaries the summary backfill
			// saved itself, and DevPick had 1,412 saved before it moved
			// onto sluice (SeedSummaries): the title backfill lists the
			// articles with a summary, whoever saved it, and finds a new
			// one at its next poll.
			if cfg.TitleAfterSummary {
				after = Summary
			}
		}
		err := sluice.RegisterBackfill(app, sluice.Backfill[Article]{
			Backfill: run.Backfill{
				ID:         j.Name,
				Provider:   cfg.Provider,
				After:      after,
				PendingSQL: `SELECT id FROM ` + Table + ` WHERE ` + j.eligible("") + ` AND id > $1 ORDER BY id LIMIT $2`,
				MaxBatch:   j.MaxBatch,
				StallAfter: cfg.StallAfter,
				MaxRejects: cfg.MaxRejects,
				RetryAfter: cfg.RetryAfter,
				Poll:       poll,
				InFlight:   cfg.InFlight,
			},
			Load: func(ctx context.Context, keys []string) (map[string]Article, error) {
				return loadArticles(ctx, cfg.DB, keys, j.withBody)
			},
			Request: func(items []sluice.Item[Article]) (*llm.ChatRequest, error) {
				return j.request(model, articlesOf(items), true), nil
			},
			Parse: func(resp *llm.ChatResponse, items []sluice.Item[Article]) ([]string, error) {
				return split(resp.Text(), len(items), cfg.Strict), nil
			},
			Save: j.saver(model),
		})
		if err != nil {
			return fmt.Errorf("devpick: %w", err)
		}
	}
	return nil
}

func articlesOf(items []sluice.Item[Article]) []Article {
	out := make([]Article, len(items))
	for i, it := range items {
		out[i] = it.Data
		out[i].ID = it.Key
	}
	return out
}

// saver is the job's Save: it refuses an output Check refuses, with the
// reason, and otherwise writes it to the article's row in the transaction
// that records the item saved.
func (j Job) saver(model string) func(ctx context.Context, tx sluice.Tx, it sluice.Item[Article], output string) error {
	q := `UPDATE ` + Table + ` SET ` + j.Column + ` = $1, ` + j.Column + `_at = $2, ` + j.Column + `_saves = ` + j.Column + `_saves + 1 WHERE id = $3`
	return func(ctx context.Context, tx sluice.Tx, it sluice.Item[Article], output string) error {
		if reason := j.Check(model, output); reason != "" {
			return sluice.Reject(reason)
		}
		_, err := tx.Exec(ctx, q, strings.TrimSpace(output), time.Now().UnixMilli(), it.Key)
		return err
	}
}
