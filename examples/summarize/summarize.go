// Package summarize is the document pipeline of a classic durable-execution
// write-up, on sluice: fetch a document, summarize it with an LLM, classify
// the summary with another LLM call, and save the result under an
// idempotency key. Each stage is a durable step, so when the process dies
// the run resumes at the stage it was in and a finished LLM call is never
// billed twice; the save is a transaction recorded with its step, so it
// happens exactly once.
//
// Run it against the provider simulator:
//
//	sluice sim-provider --profile groq --limits rpm=30,tpm=8000 --addr 127.0.0.1:8089 &
//	sluice serve --provider-url http://127.0.0.1:8089/v1
//	sluice send doc/uploaded --data '{"documentId":"d1"}'
package summarize

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Names of the pipeline's function and of the event that starts it.
const (
	FunctionID = "summarize-doc"
	Event      = "doc/uploaded"
)

// Table is where the pipeline saves its results: one row per idempotency
// key, whose writes column counts how often a save reached the table (the
// crash bench checks it stays 1). The pipeline owns it, not sluice: Schema
// creates it if missing, in the save's own transaction, on SQLite and
// PostgreSQL alike.
const Table = "sluice_summaries"

// Schema creates Table if it is missing. Every save runs it first; run it
// yourself before reading Table from a database no save may have reached,
// or before starting many runs on a new PostgreSQL database, where the
// first saves race to create the table and the losers' steps fail once
// and are retried.
const Schema = `CREATE TABLE IF NOT EXISTS ` + Table + ` (
    idempotency_key TEXT   PRIMARY KEY,
    document_id     TEXT   NOT NULL,
    summary         TEXT   NOT NULL,
    category        TEXT   NOT NULL,
    saved_at        BIGINT NOT NULL,
    writes          BIGINT NOT NULL
)`

// DefaultConcurrency is how many runs are in flight at most when
// Config.Concurrency is zero.
const DefaultConcurrency = 20

// Config configures the pipeline. The zero value works with the simulator.
type Config struct {
	// Model is the model both LLM calls ask for (default "sim-model").
	Model string
	// MaxTokens caps each call's output (default 200): every call sets one,
	// so the governor knows its cost and no call is refused as too large
	// because the provider assumed a large default.
	MaxTokens int
	// Fetch loads a document's text (default: a made-up article of a few
	// hundred words derived from the ID).
	Fetch func(ctx context.Context, documentID string) (string, error)
	// Concurrency bounds runs in flight (default DefaultConcurrency).
	Concurrency int
	// Timeout bounds a run (default 10m).
	Timeout time.Duration
	// Retries is how many times a failing step is tried again (default 5;
	// run.NoRetries for none). A provider that fails often needs more.
	Retries int
}

// Doc is the event's data.
type Doc struct {
	DocumentID string `json:"documentId"`
}

// Result is a run's output.
type Result struct {
	DocumentID string `json:"documentId"`
	Category   string `json:"category"`
	Saved      bool   `json:"saved"`
}

// Register adds the pipeline to app.
func Register(app *sluice.App, cfg Config) error {
	model := cmp.Or(cfg.Model, "sim-model")
	maxTokens := cmp.Or(cfg.MaxTokens, 200)
	fetch := cfg.Fetch
	if fetch == nil {
		fetch = madeUp
	}
	return sluice.Register(app, run.Function{
		ID:          FunctionID,
		Event:       Event,
		Retries:     cmp.Or(cfg.Retries, 5),
		Timeout:     cmp.Or(cfg.Timeout, 10*time.Minute),
		Idempotency: "event.data.documentId",
		Concurrency: []run.Concurrency{{Limit: cmp.Or(cfg.Concurrency, DefaultConcurrency)}},
		Flow:        "summaries",
	}, func(ctx *sluice.Context, ev sluice.Event[Doc]) (Result, error) {
		id := ev.Data.DocumentID
		if id == "" {
			return Result{}, sluice.NonRetriable(fmt.Errorf("event %s has no documentId", ev.ID))
		}
		text, err := sluice.Step(ctx, "fetch-document", func(ctx context.Context) (string, error) {
			return fetch(ctx, id)
		})
		if err != nil {
			return Result{}, err
		}
		summary, err := sluice.LLM(ctx, "summarize", &llm.ChatRequest{
			Model:     model,
			MaxTokens: maxTokens,
			Messages: []llm.Message{
				{Role: "system", Content: "Summarize the article in three sentences."},
				{Role: "user", Content: text},
			},
		})
		if err != nil {
			return Result{}, err
		}
		category, err := sluice.LLM(ctx, "classify", &llm.ChatRequest{
			Model:     model,
			MaxTokens: 20,
			Messages: []llm.Message{
				{Role: "system", Content: "Answer with one word: the article's category."},
				// The article's name opens both prompts, as its text does,
				// so a provider's log tells which document each call was for.
				{Role: "user", Content: fmt.Sprintf("Article %s. %s", id, summary.Text())},
			},
		})
		if err != nil {
			return Result{}, err
		}
		cat := firstWord(category.Text())
		// The write side has its own idempotency key, and the transaction
		// commits together with the step's record: a save happens once.
		_, err = sluice.Transaction(ctx, "save-result", func(ctx context.Context, tx sluice.Tx) (int64, error) {
			if _, err := tx.Exec(ctx, Schema); err != nil {
				return 0, err
			}
			res, err := tx.Exec(ctx, `INSERT INTO `+Table+` (idempotency_key, document_id, summary, category, saved_at, writes)
				VALUES ($1, $2, $3, $4, $5, 1)
				ON CONFLICT (idempotency_key) DO UPDATE SET writes = `+Table+`.writes + 1`,
				id+":v1", id, summary.Text(), cat, time.Now().UnixMilli())
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		})
		if err != nil {
			return Result{}, err
		}
		return Result{DocumentID: id, Category: cat, Saved: true}, nil
	})
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return strings.ToLower(strings.Trim(f[0], ".,;:!?\"'"))
	}
	return "unknown"
}

// madeUp returns a deterministic article for a document ID.
func madeUp(_ context.Context, id string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Article %s. ", id)
	words := []string{"durable", "execution", "keeps", "pipelines", "moving", "when", "processes", "crash", "and", "quotas", "run", "out"}
	for i := range 240 {
		b.WriteString(words[(i*7+len(id))%len(words)])
		b.WriteByte(' ')
	}
	return b.String(), nil
}
