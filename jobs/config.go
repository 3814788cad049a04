// Package jobs runs LLM jobs declared in YAML — a query on the team's own
// database in, a prompt, the team's own table (or HTTP endpoint) out — on a
// sluice App, as backfills (a source query) or functions (an event), with
// no Go code: `sluice serve --config` reads them from its file's jobs:
// key, and an app built in Go loads the same file with Load and Register.
//
// A job with a source query is a backfill (sluice.Backfill): its items are
// recorded, batched under the key's governor, never billed twice after a
// crash, judged by their progress (stalled, failing, waiting for quota) and
// shown by `sluice status`, the dashboard and `sluice report` like any
// backfill. Its output is saved once per item: in sluice's own save
// transaction when the output database is sluice's, else in one
// transaction per batch on the team's database that also records the
// item's key in the table sluice_job_saves there, so a batch saved before a
// crash is not saved again. An HTTP output is delivered at least once, each
// item with the same Idempotency-Key on every try.
//
// Check validates a file against the databases before anything runs: the
// source query runs with LIMIT 0 and its columns are checked against the
// templates, the output statement is prepared, the templates render on
// one sample row. Every error names the file, the key and the line.
//
// docs/jobs.md is the reference.
package jobs

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/yamlfile"
)

// File is the part of a config file that declares jobs: the team's
// database (SourceDB, the default of every job's) and the jobs.
type File struct {
	// SourceDB is the team's database: an SQLite path (sqlite:PATH or a
	// file path) or a postgres:// URL. Empty: sluice's own database.
	SourceDB string `yaml:"source_db"`
	Jobs     []Job  `yaml:"jobs"`
}

// Job is one job.
type Job struct {
	// Name names the job, its backfill or function, its flow and its runs:
	// letters, digits and ._:- (at most 100), starting with a letter or digit.
	Name   string `yaml:"name"`
	Source Source `yaml:"source"`
	Prompt Prompt `yaml:"prompt"`
	Output Output `yaml:"output"`
	// Model is the model the job's calls ask for (default: the app's).
	Model string `yaml:"model"`
	// MaxTokens is the most output tokens each item may take: a batch's
	// request asks for MaxTokens × its items (default 256).
	MaxTokens int `yaml:"max_tokens"`
	// Checks refuse an item's output before it is saved.
	Checks Checks `yaml:"checks"`
	// Flow is the job's share of the key (default weight 1, priority 0).
	Flow Flow `yaml:"flow"`
	// After names another job with a source query: an item becomes
	// eligible here once that job has saved it.
	After string `yaml:"after"`
	// StallAfter: no item processed for this long while items remain is a
	// stall (default 2h). AlertWebhook receives the job's stall and
	// recovery alerts (default: the app's).
	StallAfter   Duration `yaml:"stall_after"`
	AlertWebhook string   `yaml:"alert_webhook"`
	// Poll is how often the job looks for new items (default 1m).
	Poll Duration `yaml:"poll"`
	// Within is how long a batch should take at the job's share of the
	// key (default 15m, or a quarter of StallAfter if shorter; at most
	// 24h): the governor sends the most items, up to batch_max, that fit
	// every limit and are done within it.
	Within Duration `yaml:"within"`
	// RetryAfter is how long an item whose output was refused waits before
	// its next try (default 10m); MaxRejects how many refusals park it
	// (default 3).
	RetryAfter Duration `yaml:"retry_after"`
	MaxRejects int      `yaml:"max_rejects"`
	// InFlight is the most batches going at once (default 0: as many as
	// the key's quota and the provider's latency need).
	InFlight int `yaml:"in_flight"`
}

// Source is where a job's items come from: a query on a database, or an
// event.
type Source struct {
	// DB is the database Query runs on (default: the file's source_db).
	DB string `yaml:"db"`
	// Query lists the items that still need the job, one row each, with
	// the key column and the columns the templates use. sluice pages
	// through it by the key, compared as text.
	Query string `yaml:"query"`
	// Key is the column (with Query) or the field of the event's data
	// (with Event) that identifies an item (default: id).
	Key string `yaml:"key"`
	// Event runs the job once per event of this name (POST /v1/events),
	// its data the item's fields.
	Event string `yaml:"event"`
}

// Prompt is how a batch of items becomes one request.
type Prompt struct {
	// System is the system message (a template of the batch; optional).
	System string `yaml:"system"`
	// Item renders one item from its row: {{.title}} is its title column.
	Item string `yaml:"item"`
	// User is the user message, a template of the batch (default: each
	// item numbered, "[1] …", separated by a blank line).
	User string `yaml:"user"`
	// BatchMax is the most items one call carries (default 1).
	BatchMax int `yaml:"batch_max"`
	// Split is how a batch's answer is cut into one output per item:
	// numbered ([1] … [2] …; the default), lines (one line per item) or
	// json (an array with one element per item).
	Split string `yaml:"split"`
	// Fallback, for split: numbered, is what an answer without exactly one
	// numbered block per item gives: reject (every item refused, the
	// default) or words (its words shared out in order, evenly).
	Fallback string `yaml:"fallback"`
}

// Output is where each item's output goes: SQL or HTTP.
type Output struct {
	// DB is the database SQL runs on (default: the source's database).
	DB string `yaml:"db"`
	// SQL runs once per item, all the items of a batch in one
	// transaction, with the parameters :key, :output, :model, :tokens,
	// :processed_at, :processed_at_ms and :job.
	SQL string `yaml:"sql"`
	// URL receives one JSON POST per item, with an Idempotency-Key header
	// the same on every try.
	URL string `yaml:"url"`
	// AuthEnv names an environment variable holding a bearer token for URL.
	AuthEnv string `yaml:"auth_env"`
	// Timeout bounds each POST (default 10s).
	Timeout Duration `yaml:"timeout"`
}

// Checks are what refuses an output, with the reason the item is counted
// under: every output must be non-empty ("empty").
type Checks struct {
	// English refuses an output with Han, kana, Hangul or full-width
	// characters, or without a Latin letter ("not English").
	English bool `yaml:"english"`
	// MaxTokens refuses an output longer than this many tokens ("too
	// long"; default: the job's max_tokens).
	MaxTokens int `yaml:"max_tokens"`
}

// Flow is a job's flow on the key's governor.
type Flow struct {
	Weight   float64 `yaml:"weight"`
	Priority int     `yaml:"priority"`
}

// Duration is a duration as Go writes it (90s, 2h30m).
type Duration time.Duration

// UnmarshalText reads a positive duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q: want a duration such as 90s or 2h", b)
	}
	if v <= 0 {
		return fmt.Errorf("%q: want a positive duration", b)
	}
	*d = Duration(v)
	return nil
}

// Load reads the jobs of the YAML file at path: its keys source_db and
// jobs. The file may hold other keys (serve's settings); they are not
// read here. Load checks what can be checked without the databases
// (Check checks the rest); every error names path, the key and the line.
func Load(path string) (*Config, error) {
	data, err := yamlfile.ReadFile(path, yamlfile.MaxFileBytes)
	if err != nil {
		return nil, err
	}
	var f File
	lines, err := yamlfile.DecodeSome(data, &f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, f, lines)
}
