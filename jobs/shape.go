package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/llm"
)

// Shape is what a planner needs of a job: its flow, its batches, the
// tokens of its requests as its prompt renders them on rows of its source,
// and its backlog.
type Shape struct {
	Name     string
	Model    string
	Weight   float64
	Priority int
	BatchMax int
	After    string
	// Event: the job runs per event; it has no backlog to count.
	Event bool
	// Within is how long a batch should take at the job's share, as its
	// backfill sizes batches (within:, or its default).
	Within time.Duration
	// PromptTokens are the tokens of a request's system and user messages
	// beside its items' texts; ItemInputTokens the mean of an item's text
	// over Sampled rows of the source (the prompt of placeholder values when
	// it has none); MaxTokens the output tokens each item may take.
	PromptTokens, ItemInputTokens, MaxTokens int64
	Sampled                                  int
	// Backlog is the rows the source query lists now; for a job after
	// another, those its upstream job has done already (the others it
	// hands on as it saves them: Fed).
	Backlog, Fed int
}

// maxSampled bounds the rows read to size a job's items.
const maxSampled = 50

// Shapes reads each job's shape from its source database, after Check.
func (c *Config) Shapes(ctx context.Context, o Options) ([]Shape, error) {
	var d dbs
	defer d.close()
	if err := c.check(ctx, o, &d); err != nil {
		return nil, err
	}
	est, err := llm.NewEstimator(llm.EstimatorConfig{})
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	var out []Shape
	for _, j := range c.jobs {
		model := j.model(o)
		s := Shape{Name: j.Name, Model: model, Weight: j.flowWeight, Priority: j.flowPriority, BatchMax: j.Prompt.BatchMax,
			After: j.After, Event: j.Source.Event != "", MaxTokens: int64(j.MaxTokens), Within: j.backfill(o.Provider).BatchWithin()}
		var rows []row
		if j.Source.Query != "" {
			ref := j.srcRef(o)
			db, err := d.get(ctx, ref)
			if err != nil {
				return nil, c.fail(j.dbKey("source"), err)
			}
			src := j.source(ref)
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ("+src.q+") AS src").Scan(&s.Backlog); err != nil {
				return nil, c.fail(j.at+".source.query", fmt.Errorf("count its rows: %w", err))
			}
			if rows, err = src.rows(ctx, db, fmt.Sprintf("SELECT * FROM (%s) AS src LIMIT %d", src.q, maxSampled)); err != nil {
				return nil, c.fail(j.at+".source.query", err)
			}
			counts[j.Name] = s.Backlog
		}
		if len(rows) == 0 {
			rows = []row{{Key: "sample-key", Fields: placeholders(j)}}
		} else {
			s.Sampled = len(rows)
		}
		one, err := j.request(model, rows[:1])
		if err != nil {
			return nil, c.fail(j.at+".prompt", err)
		}
		var items, first int64 // all the items' tokens, and the first's
		for i, r := range rows {
			text, err := render(j.item, r.Fields)
			if err != nil {
				return nil, c.fail(j.at+".prompt.item", fmt.Errorf("item %s: %w", r.Key, err))
			}
			n := int64(llm.CountTokens(model, text))
			if i == 0 {
				first = n
			}
			items += n
		}
		s.ItemInputTokens = (items + int64(len(rows)) - 1) / int64(len(rows))
		s.PromptTokens = max(est.PromptTokens(one)-first, 0)
		out = append(out, s)
	}
	for i := range out {
		if a := out[i].After; a != "" {
			// Rows the upstream job still lists wait for it; the rest it
			// has done, and are eligible here now.
			waiting := min(out[i].Backlog, counts[a])
			out[i].Backlog, out[i].Fed = out[i].Backlog-waiting, waiting
		}
	}
	return out, nil
}

// placeholders is a row of placeholder values for the fields j's item
// template reads.
func placeholders(j *job) map[string]any {
	m := map[string]any{j.Source.Key: "sample-key"}
	for _, f := range fieldsOf(j.item) {
		m[f] = "sample " + f
	}
	return m
}
