package jobs

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Options are what the jobs take from the app they run on.
type Options struct {
	// AppDB is the app's database (sluice.Config.DatabaseURL; default
	// sluice.db): a job whose source or output database is this one reads
	// and saves in sluice's own transactions.
	AppDB string
	// Model is the model of the jobs that name none.
	Model string
	// Provider names the app's provider or route the calls use (default:
	// the first provider).
	Provider string
	// Getenv reads the variables the jobs name (output.auth_env); default
	// os.Getenv's behaviour is not assumed: nil reads none.
	Getenv func(string) string
	// HTTPClient posts the HTTP outputs (default: a client of its own).
	HTTPClient *http.Client
}

func (o Options) appDB() dbRef { return parseDB(cmp.Or(o.AppDB, "sluice.db")) }

func (o Options) getenv(k string) string {
	if o.Getenv == nil {
		return ""
	}
	return o.Getenv(k)
}

// dbs holds the databases the jobs use, one handle each.
type dbs struct {
	handles map[string]*sql.DB
}

func (d *dbs) get(ctx context.Context, r dbRef) (*sql.DB, error) {
	if db := d.handles[r.url]; db != nil {
		return db, nil
	}
	db, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	if d.handles == nil {
		d.handles = map[string]*sql.DB{}
	}
	d.handles[r.url] = db
	return db, nil
}

func (d *dbs) close() error {
	var errs []error
	for _, db := range d.handles {
		errs = append(errs, db.Close())
	}
	return errors.Join(errs...)
}

// srcRef and outRef are a job's databases ("" is the app's).
func (j *job) srcRef(o Options) dbRef { return refOr(j.sourceDB, o) }
func (j *job) outRef(o Options) dbRef { return refOr(j.outputDB, o) }

func refOr(u string, o Options) dbRef {
	if u == "" {
		return o.appDB()
	}
	return parseDB(u)
}

func (j *job) model(o Options) string { return cmp.Or(j.Model, o.Model) }

// dbKey is the key of the file that names a job's database of kind
// ("source" or "output"), to place an error about it.
func (j *job) dbKey(kind string) string {
	switch {
	case kind == "source" && j.Source.DB != "":
		return j.at + ".source.db"
	case kind == "output" && j.Output.DB != "":
		return j.at + ".output.db"
	case kind == "output" && j.Source.DB != "":
		return j.at + ".source.db"
	case kind == "source" && j.sourceDB == "":
		return j.at + ".source" // sluice's own database: the file names none
	case kind == "output" && j.outputDB == "":
		return j.at + ".output"
	}
	return "source_db"
}

// Check checks every job against its databases before anything runs:
// each database answers; each source query runs with LIMIT 0 and gives
// the key column and every column prompt.item reads; the templates render
// on one row of the query (or, with none, a row of placeholder values);
// each output statement is prepared; each variable named is set. It
// writes nothing. Its errors name the file, the key and the line.
func (c *Config) Check(ctx context.Context, o Options) error {
	var d dbs
	defer d.close()
	return c.check(ctx, o, &d)
}

func (c *Config) check(ctx context.Context, o Options, d *dbs) error {
	for _, j := range c.jobs {
		at := func(k string) string { return j.at + "." + k }
		model := j.model(o)
		if model == "" {
			return c.fail(at("model"), errors.New("missing: the job names no model and the app has none"))
		}
		sample := row{Key: "sample-key", Fields: map[string]any{j.Source.Key: "sample-key"}}
		if j.Source.Query != "" {
			ref := j.srcRef(o)
			db, err := d.get(ctx, ref)
			if err != nil {
				return c.fail(j.dbKey("source"), err)
			}
			s := j.source(ref)
			cols, err := s.columns(ctx, db)
			if err != nil {
				return c.fail(at("source.query"), fmt.Errorf("runs with LIMIT 0 on %s: %w", ref.redacted(), err))
			}
			if !slices.Contains(cols, j.Source.Key) {
				return c.fail(at("source.key"), fmt.Errorf("%q: the query gives no such column (it gives %s)", j.Source.Key, strings.Join(cols, ", ")))
			}
			for _, f := range fieldsOf(j.item) {
				if !slices.Contains(cols, f) {
					return c.fail(at("prompt.item"), fmt.Errorf("{{.%s}}: the query gives no column %s (it gives %s)", f, f, strings.Join(cols, ", ")))
				}
			}
			got, err := s.sample(ctx, db)
			if err != nil {
				return c.fail(at("source.query"), err)
			}
			if got != nil {
				sample = *got
			} else {
				for _, col := range cols {
					sample.Fields[col] = "sample " + col
				}
			}
		} else {
			for _, f := range fieldsOf(j.item) {
				sample.Fields[f] = "sample " + f
			}
		}
		text, err := render(j.item, sample.Fields)
		if err != nil {
			return c.fail(at("prompt.item"), err)
		}
		// An event's data has no columns to check against: the batch's
		// templates may read fields the item's does not, so they are
		// rendered from the first event on.
		if j.Source.Event == "" {
			if _, err := render(j.system, Batch{Job: j.Name, Model: model, Count: 1, Items: []ItemText{{N: 1, Key: sample.Key, Text: text, Row: sample.Fields}}}); err != nil {
				return c.fail(at("prompt.system"), err)
			}
			if _, err := j.request(model, []row{sample}); err != nil {
				return c.fail(at("prompt.user"), err)
			}
		}
		switch {
		case j.Output.SQL != "":
			ref := j.outRef(o)
			db, err := d.get(ctx, ref)
			if err != nil {
				return c.fail(j.dbKey("output"), err)
			}
			st, err := db.PrepareContext(ctx, j.outSQL)
			if err != nil {
				return c.fail(at("output.sql"), fmt.Errorf("prepare on %s: %w", ref.redacted(), err))
			}
			_ = st.Close()
		case j.Output.AuthEnv != "":
			if o.getenv(j.Output.AuthEnv) == "" {
				return c.fail(at("output.auth_env"), fmt.Errorf("%s: the variable is empty", j.Output.AuthEnv))
			}
		}
	}
	return nil
}

func (j *job) source(ref dbRef) source {
	return source{q: strings.TrimRight(strings.TrimSpace(j.Source.Query), "; \n\t"), key: j.Source.Key, postgres: ref.postgres}
}

// Register checks the jobs (Check) and adds them to app: a job with a
// source query as a backfill, a job with an event as a function. It
// returns what closes the databases the jobs opened; call it after the
// app has stopped. Register before app.Start.
func Register(ctx context.Context, app *sluice.App, c *Config, o Options) (closeDBs func() error, err error) {
	d := &dbs{}
	defer func() {
		if err != nil {
			_ = d.close()
		}
	}()
	if err := c.check(ctx, o, d); err != nil {
		return nil, err
	}
	client := o.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	for _, j := range c.jobs {
		if j.Output.AuthEnv != "" {
			j.authToken = o.getenv(j.Output.AuthEnv)
		}
		var err error
		if j.Source.Event != "" {
			err = j.registerEvent(ctx, app, o, d, client)
		} else {
			err = j.registerBackfill(ctx, app, o, d, client)
		}
		if err != nil {
			return nil, c.fail(j.at, err)
		}
		app.DeclaredInYAML(j.Name)
	}
	return d.close, nil
}

// deliver is how a job's outputs leave: in sluice's transaction (save,
// set when the output database is the app's), or by deliver.
type deliver struct {
	save    func(ctx context.Context, tx sluice.Tx, s saved, at time.Time) error
	deliver func(ctx context.Context, items []saved, refused []string, at time.Time) ([]string, error)
	// saved lists which of keys the job has saved on the team's database
	// (SavesTable); nil when sluice records its saves itself, or for HTTP.
	saved func(ctx context.Context, keys []string) (map[string]bool, error)
}

func (j *job) outputOf(ctx context.Context, o Options, d *dbs, client *http.Client) (deliver, error) {
	if j.Output.URL != "" {
		return deliver{deliver: func(ctx context.Context, items []saved, refused []string, _ time.Time) ([]string, error) {
			return j.deliverHTTP(ctx, client, items, refused)
		}}, nil
	}
	ref := j.outRef(o)
	if ref.same(o.appDB()) {
		// Sluice's transaction that runs the output statement records the
		// item saved in sluice's own table of items.
		return deliver{save: func(ctx context.Context, tx sluice.Tx, s saved, at time.Time) error {
			return j.saveIn(ctx, func(ctx context.Context, q string, args ...any) error {
				_, err := tx.Exec(ctx, q, args...)
				return err
			}, s, at)
		}}, nil
	}
	db, err := d.get(ctx, ref)
	if err != nil {
		return deliver{}, err
	}
	if _, err := db.ExecContext(ctx, savesSchema); err != nil {
		return deliver{}, fmt.Errorf("create %s in %s: %w", SavesTable, ref.redacted(), err)
	}
	return deliver{deliver: func(ctx context.Context, items []saved, refused []string, at time.Time) ([]string, error) {
		return j.deliverSQL(ctx, db, items, refused, at)
	}, saved: func(ctx context.Context, keys []string) (map[string]bool, error) {
		return j.savedKeys(ctx, db, keys)
	}}, nil
}

func (j *job) registerBackfill(ctx context.Context, app *sluice.App, o Options, d *dbs, client *http.Client) error {
	ref := j.srcRef(o)
	db, err := d.get(ctx, ref)
	if err != nil {
		return err
	}
	src := j.source(ref)
	out, err := j.outputOf(ctx, o, d, client)
	if err != nil {
		return err
	}
	model := j.model(o)
	b := sluice.Backfill[json.RawMessage]{
		Backfill: j.backfill(o.Provider),
		Load: func(ctx context.Context, keys []string) (map[string]json.RawMessage, error) {
			got, err := src.load(ctx, db, keys)
			if err != nil || out.saved == nil || len(got) == len(keys) {
				return got, err
			}
			// A key the query no longer lists may be one this job saved on
			// the team's database just before a crash, before sluice
			// recorded it: a query of the items that still need the job
			// stops listing them as they are saved. It keeps its place in
			// its batch, with null data (see Backfill.Load): its call is
			// recorded, and its delivery finds it in SavesTable.
			var gone []string
			for _, k := range keys {
				if _, ok := got[k]; !ok {
					gone = append(gone, k)
				}
			}
			done, err := out.saved(ctx, gone)
			for k := range done {
				got[k] = json.RawMessage("null")
			}
			return got, err
		},
		Request: func(items []sluice.Item[json.RawMessage]) (*llm.ChatRequest, error) {
			rows, err := j.rowsOf(items)
			if err != nil {
				return nil, err
			}
			return j.request(model, rows)
		},
		Parse: func(resp *llm.ChatResponse, items []sluice.Item[json.RawMessage]) ([]string, error) {
			keys := make([]string, len(items))
			for i, it := range items {
				keys[i] = it.Key
			}
			outs, reason := j.splitAnswer(resp.Text(), keys)
			if reason != "" {
				// Every item is refused with the reason: the marker
				// keeps it apart from an output.
				outs = make([]string, len(items))
				for i := range outs {
					outs[i] = refusedMark + reason
				}
			}
			return outs, nil
		},
	}
	if ref.same(o.appDB()) {
		b.PendingSQL = src.pageSQL()
	} else {
		b.Pending = func(ctx context.Context, after string, limit int) ([]string, error) {
			return src.pending(ctx, db, after, limit)
		}
	}
	if out.save != nil {
		b.Save = func(ctx context.Context, tx sluice.Tx, it sluice.Item[json.RawMessage], output string) error {
			if reason := j.refusal(model, output); reason != "" {
				return sluice.Reject(reason)
			}
			at := time.Now()
			return out.save(ctx, tx, j.savedOf(it.Key, output, model, at), at)
		}
	} else {
		b.Deliver = func(ctx context.Context, items []sluice.Item[json.RawMessage], outputs []string) ([]string, error) {
			at := time.Now()
			ss := make([]saved, len(items))
			refused := make([]string, len(items))
			for i, it := range items {
				ss[i] = j.savedOf(it.Key, outputs[i], model, at)
				refused[i] = j.refusal(model, outputs[i])
			}
			return out.deliver(ctx, ss, refused, at)
		}
	}
	return sluice.RegisterBackfill(app, b)
}

// backfill is the settings of the job's backfill, whose calls go to the
// app's provider named provider.
func (j *job) backfill(provider string) run.Backfill {
	return run.Backfill{
		ID:           j.Name,
		Provider:     provider,
		After:        j.After,
		MaxBatch:     j.Prompt.BatchMax,
		StallAfter:   time.Duration(j.StallAfter),
		MaxRejects:   j.MaxRejects,
		RetryAfter:   time.Duration(j.RetryAfter),
		Poll:         time.Duration(j.Poll),
		Within:       time.Duration(j.Within),
		InFlight:     j.InFlight,
		AlertWebhook: j.AlertWebhook,
	}
}

// refusedMark starts an output that Parse made from a refused answer: the
// reason follows.
const refusedMark = "\x00refused: "

// refusal is why output is refused: the answer's split, or a check.
func (j *job) refusal(model, output string) string {
	if r, ok := strings.CutPrefix(output, refusedMark); ok {
		return r
	}
	return j.check(model, output)
}

// rowsOf decodes the rows of a batch's items. An item with null data is
// one its job saved before a crash, kept in its batch in a replay (its
// call is recorded, not made again): it renders from placeholder values.
func (j *job) rowsOf(items []sluice.Item[json.RawMessage]) ([]row, error) {
	rows := make([]row, len(items))
	for i, it := range items {
		if string(it.Data) == "null" {
			rows[i] = row{Key: it.Key, Fields: placeholders(j)}
			continue
		}
		f, err := decodeRow(it.Data)
		if err != nil {
			return nil, fmt.Errorf("item %s: %w", it.Key, err)
		}
		rows[i] = row{Key: it.Key, Fields: f}
	}
	return rows, nil
}

// eventKey is the key of an event's item: the field source.key of its
// data, a string or a number as written. Anything else is refused rather
// than turned into Go's text of it ("<nil>", "map[a:1]"), and the key is
// bounded and checked as an idempotency key is, so that the output's :key
// is one sluice's own keys could be, on SQLite and PostgreSQL alike.
func (j *job) eventKey(eventID string, fields map[string]any) (string, error) {
	k, ok := fields[j.Source.Key]
	if !ok {
		return "", fmt.Errorf("event %s: its data has no %s (the job's key)", eventID, j.Source.Key)
	}
	return engine.KeyText(fmt.Sprintf("event %s: field %q of its data (the job's key)", eventID, j.Source.Key), k)
}

// EventResult is the output of an event's run.
type EventResult struct {
	Key    string `json:"key"`
	Tokens int    `json:"tokens"`
}

func (j *job) registerEvent(ctx context.Context, app *sluice.App, o Options, d *dbs, client *http.Client) error {
	out, err := j.outputOf(ctx, o, d, client)
	if err != nil {
		return err
	}
	model := j.model(o)
	fn := run.Function{ID: j.Name, Event: j.Source.Event, Flow: j.Name, Provider: o.Provider}
	return sluice.Register(app, fn, func(ctx *sluice.Context, ev sluice.Event[json.RawMessage]) (EventResult, error) {
		fields, err := decodeRow(ev.Data)
		if err != nil {
			return EventResult{}, sluice.NonRetriable(fmt.Errorf("event %s: its data is not a JSON object: %w", ev.ID, err))
		}
		key, err := j.eventKey(ev.ID, fields)
		if err != nil {
			return EventResult{}, sluice.NonRetriable(err)
		}
		req, err := j.request(model, []row{{Key: key, Fields: fields}})
		if err != nil {
			return EventResult{}, sluice.NonRetriable(err)
		}
		resp, err := sluice.LLM(ctx, "call", req)
		if err != nil {
			return EventResult{}, err
		}
		outs, reason := j.splitAnswer(resp.Text(), []string{key})
		if reason == "" {
			reason = j.check(model, outs[0])
		}
		if reason != "" {
			return EventResult{}, sluice.NonRetriable(fmt.Errorf("item %s: output refused: %s", key, reason))
		}
		if out.save != nil {
			return sluice.Transaction(ctx, "save", func(c context.Context, tx sluice.Tx) (EventResult, error) {
				at := time.Now()
				s := j.savedOf(key, outs[0], model, at)
				return EventResult{Key: key, Tokens: s.Tokens}, out.save(c, tx, s, at)
			})
		}
		return sluice.Step(ctx, "deliver", func(c context.Context) (EventResult, error) {
			at := time.Now()
			s := j.savedOf(key, outs[0], model, at)
			s.delivery = ev.ID // each event is delivered, even of one key
			got, err := out.deliver(c, []saved{s}, []string{""}, at)
			if err == nil && got[0] != "" {
				err = sluice.NonRetriable(fmt.Errorf("item %s: %s", key, got[0]))
			}
			return EventResult{Key: key, Tokens: s.Tokens}, err
		})
	})
}
