package driver

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/store"
)

// History is the part of store.Store on the history: the configurations
// processes ran with and the flows' samples, the same for both drivers
// but for their statements and how they run them. Times are BIGINT Unix
// milliseconds, as in the backfills' tables; a batch of samples goes to a
// statement as one JSON text parameter. A driver's Store embeds it, made
// by NewHistory.
type History struct {
	conn Conn
	sql  map[string]string // by file name without .sql
}

// historyStatements are the files of a driver's sql folder that
// NewHistory reads, each in the driver's dialect, with the parameters
// listed.
var historyStatements = []string{
	"lock_config_versions", // none; keeps other recorders of versions out until the transaction ends
	"record_config",        // at, source, hash, code, config; affects 1 row if the source's latest hash differs, else 0
	"config_versions",      // since; returns at, source, hash, code, config
	"record_samples",       // samples (a JSON array of sampleRow objects); inserts those of a key not stored, returns their flow, at, source
	"stored_samples",       // samples (as record_samples); returns the stored ones of their keys as samples does, locked until the transaction ends
	"update_samples",       // samples (as record_samples); sets every column of the stored ones of their keys
	"job_sampled",          // job; returns its sampled mark (NULL: none yet), its row locked until the transaction ends; no row for no job
	"set_job_sampled",      // job, mark
	"samples",              // since, until; returns the columns scanSample reads
	"flow_samples",         // since, until, flow; as samples
	"prune_samples",        // before, at most; affects the rows deleted
}

// NewHistory returns the history's tables on a driver's database: conn
// runs the statements in the sql folder of fsys (see historyStatements).
func NewHistory(conn Conn, fsys fs.FS) (History, error) {
	q, err := readStatements(fsys, historyStatements)
	if err != nil {
		return History{}, fmt.Errorf("read the history's statements: %w", err)
	}
	return History{conn: conn, sql: q}, nil
}

// RecordConfig implements store.Store. On PostgreSQL the lock keeps a
// second recorder out between the test of the latest hash and the
// record; on SQLite the transaction's write lock does.
func (h History) RecordConfig(ctx context.Context, v store.ConfigVersion) (bool, error) {
	op, err := named("record config version", " of ", "source", v.Source, store.MaxKeyBytes)
	if err != nil {
		return false, err
	}
	if err := checkConfig(v); err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	recorded := false
	err = h.conn.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.Exec(ctx, h.sql["lock_config_versions"]); err != nil {
			return err
		}
		res, err := tx.Exec(ctx, h.sql["record_config"], v.At.UnixMilli(), v.Source, v.Hash, text(v.Code, store.MaxReasonBytes), string(v.Config))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		recorded = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	return recorded, nil
}

// checkConfig returns an error naming what of v, whose Source is checked,
// must not be stored.
func checkConfig(v store.ConfigVersion) error {
	if err := checkName("hash", v.Hash, store.MaxKeyBytes); err != nil {
		return err
	}
	if err := checkTime("time", v.At); err != nil {
		return err
	}
	switch c := v.Config; {
	case len(c) == 0:
		return fmt.Errorf("empty config")
	case len(c) > store.MaxConfigBytes:
		return fmt.Errorf("config of %d bytes is over the limit of %d", len(c), store.MaxConfigBytes)
	case !utf8.Valid(c):
		// json.Valid takes invalid UTF-8 in strings; PostgreSQL's text
		// does not.
		return fmt.Errorf("config is not UTF-8")
	case !json.Valid(c):
		return fmt.Errorf("config is not valid JSON: %s", quote(string(c)))
	}
	return nil
}

// ConfigVersions implements store.Store.
func (h History) ConfigVersions(ctx context.Context, since time.Time) ([]store.ConfigVersion, error) {
	out := []store.ConfigVersion{}
	err := h.conn.Query(ctx, h.sql["config_versions"], []any{since.UnixMilli()}, func(r Row) error {
		var v store.ConfigVersion
		var at int64
		var config []byte
		if err := r.Scan(&at, &v.Source, &v.Hash, &v.Code, &config); err != nil {
			return err
		}
		v.At, v.Config = time.UnixMilli(at).UTC(), json.RawMessage(config)
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list config versions: %w", err)
	}
	return out, nil
}

// sampleRow is a sample as record_samples reads it from JSON. The maps
// are JSON objects as text, and the budgets a JSON array as text, so both
// databases store the same bytes.
type sampleRow struct {
	Flow       string `json:"flow"`
	Source     string `json:"source"`
	At         int64  `json:"at"`
	State      string `json:"state"`
	Reason     string `json:"reason"`
	Done       int64  `json:"done"`
	Remaining  int64  `json:"remaining"`
	Admitted   int64  `json:"admitted"`
	Tokens     int64  `json:"tokens"`
	Rejections string `json:"rejections"`
	Refusals   string `json:"refusals"`
	Money      int64  `json:"money"`
	Priced     bool   `json:"priced"`
	Budgets    string `json:"budgets"`

	doneFrom, doneTo     int64                // store.Sample's: not stored
	rejections, refusals map[string]int64     // Rejections and Refusals as maps
	budgets              []store.SampleBudget // Budgets as a list
}

// sampleKey is a sample's primary key.
type sampleKey struct {
	flow, source string
	at           int64
}

func (r *sampleRow) key() sampleKey { return sampleKey{r.Flow, r.Source, r.At} }

// RecordSamples implements store.Store. The jobs' sampled marks are read
// and moved, and the samples written, in one transaction: a sample's Done
// is counted once, or not at all. A sample of a key already stored, as
// another process of the same source records in the same millisecond, is
// added to it (see addSample): each process's counts are its own, and
// each Done counts only what no other sample did, so the stored sample
// counts what both did, as readers sum them.
func (h History) RecordSamples(ctx context.Context, samples []store.Sample) error {
	const op = "record samples"
	rows, err := sampleRows(samples)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if len(rows) == 0 {
		return nil
	}
	err = h.conn.InTx(ctx, func(tx store.Tx) error {
		// In the rows' order, by flow: concurrent writers lock the jobs'
		// rows in the same order. Samples of one key claim one after the
		// other, in the order given, as if recorded by calls of their own.
		for i := range rows {
			if err := h.claimDone(ctx, tx, &rows[i]); err != nil {
				return err
			}
		}
		rows, err := foldSamples(rows)
		if err != nil {
			return err
		}
		list, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		inserted := make(map[sampleKey]bool, len(rows))
		err = txQuery(tx)(ctx, h.sql["record_samples"], []any{string(list)}, func(r Row) error {
			var k sampleKey
			if err := r.Scan(&k.flow, &k.at, &k.source); err != nil {
				return err
			}
			inserted[k] = true
			return nil
		})
		if err != nil || len(inserted) == len(rows) {
			return err
		}
		return h.addToStored(ctx, tx, slices.DeleteFunc(rows, func(r sampleRow) bool { return inserted[r.key()] }))
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// addToStored adds rows, each of a key stored, to the stored samples. A
// key deleted since record_samples found it (by PruneHistory, which would
// have deleted the sample too) is left out.
func (h History) addToStored(ctx context.Context, tx store.Tx, rows []sampleRow) error {
	list, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	stored := make(map[sampleKey]sampleRow, len(rows))
	err = txQuery(tx)(ctx, h.sql["stored_samples"], []any{string(list)}, func(r Row) error {
		s, err := scanSample(r)
		if err != nil {
			return err
		}
		row := sampleRow{Flow: s.Flow, Source: s.Source, At: s.At.UnixMilli(), State: s.State, Reason: s.Reason,
			Done: s.Done, Remaining: s.Remaining, Admitted: s.Admitted, Tokens: s.Tokens, Money: s.Money, Priced: s.Priced,
			rejections: s.Rejections, refusals: s.Refusals, budgets: s.Budgets}
		stored[row.key()] = row
		return nil
	})
	if err != nil {
		return err
	}
	merged := rows[:0]
	for _, r := range rows {
		if old, ok := stored[r.key()]; ok {
			merged = append(merged, addSample(old, r))
		}
	}
	for i := range merged {
		if err := merged[i].encodeCounts(); err != nil {
			return err
		}
	}
	if list, err = json.Marshal(merged); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, h.sql["update_samples"], string(list))
	return err
}

// addSample returns r, recorded after old of the same key, added to it:
// Done, Admitted, Tokens, Money and each limit's Rejections and Refusals
// are summed (at most the largest int64), and Priced is either's; State,
// Reason, Remaining and the budgets, which say how things stood at At,
// are r's. Its Rejections, Refusals and Budgets are to be encoded (see
// encodeCounts).
func addSample(old, r sampleRow) sampleRow {
	r.Done = saturatingSum(old.Done, r.Done)
	r.Admitted = saturatingSum(old.Admitted, r.Admitted)
	r.Tokens = saturatingSum(old.Tokens, r.Tokens)
	r.Money = saturatingSum(old.Money, r.Money)
	r.Priced = r.Priced || old.Priced
	r.rejections = addCounts(old.rejections, r.rejections)
	r.refusals = addCounts(old.refusals, r.refusals)
	r.doneFrom, r.doneTo = 0, 0
	return r
}

// addCounts returns the sum of a and b by limit name, in a new map.
func addCounts(a, b map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(a)+len(b))
	for _, m := range []map[string]int64{a, b} {
		for name, n := range m {
			out[name] = saturatingSum(out[name], n)
		}
	}
	return out
}

// saturatingSum returns x+y, at most the largest int64; both are at
// least 0.
func saturatingSum(x, y int64) int64 {
	if x > math.MaxInt64-y {
		return math.MaxInt64
	}
	return x + y
}

// encodeCounts sets r's Rejections, Refusals and Budgets from its maps
// and list.
func (r *sampleRow) encodeCounts() error {
	var err error
	if r.Rejections, err = limitCounts("Rejections", r.rejections); err != nil {
		return err
	}
	if r.Refusals, err = limitCounts("Refusals", r.refusals); err != nil {
		return err
	}
	r.Budgets, err = sampleBudgets(r.budgets)
	return err
}

// foldSamples returns rows, sorted by key with those of one key in the
// order given, with each key's rows added up in that order (see
// addSample), in the same slice.
func foldSamples(rows []sampleRow) ([]sampleRow, error) {
	out := rows[:0]
	for _, r := range rows {
		n := len(out)
		if n == 0 || out[n-1].key() != r.key() {
			out = append(out, r)
			continue
		}
		out[n-1] = addSample(out[n-1], r)
		if err := out[n-1].encodeCounts(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// claimDone lowers r's Done to what lies above its job's sampled mark, and
// moves the mark up to r's doneTo (see store.Sample's DoneFrom and DoneTo).
func (h History) claimDone(ctx context.Context, tx store.Tx, r *sampleRow) error {
	if r.doneTo <= 0 {
		return nil
	}
	var mark *int64
	found := false
	err := txQuery(tx)(ctx, h.sql["job_sampled"], []any{r.Flow}, func(row Row) error {
		found = true
		return row.Scan(&mark)
	})
	if err != nil || !found {
		return err // no job: Done as given
	}
	from := r.doneFrom
	if mark != nil {
		from = max(from, *mark)
	}
	r.Done = min(r.Done, max(r.doneTo-from, 0))
	if mark != nil && *mark >= r.doneTo {
		return nil
	}
	_, err = tx.Exec(ctx, h.sql["set_job_sampled"], r.Flow, r.doneTo)
	return err
}

// sampleRows returns samples as they are stored, in the primary key's
// order (flow, at, source), in which every writer then touches rows, so
// that concurrent ones cannot deadlock; samples of one key stay in the
// order given. The error names the first sample that must not be stored.
func sampleRows(samples []store.Sample) ([]sampleRow, error) {
	rows := make([]sampleRow, 0, len(samples))
	for i, s := range samples {
		r, err := sampleRowOf(s)
		if err != nil {
			return nil, fmt.Errorf("sample %d: %w", i, err)
		}
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b sampleRow) int {
		return cmp.Or(strings.Compare(a.Flow, b.Flow), cmp.Compare(a.At, b.At), strings.Compare(a.Source, b.Source))
	})
	return rows, nil
}

// sampleRowOf returns s as it is stored, or an error naming what of it
// must not be.
func sampleRowOf(s store.Sample) (sampleRow, error) {
	if err := checkName("flow", s.Flow, store.MaxKeyBytes); err != nil {
		return sampleRow{}, err
	}
	if err := checkName("source", s.Source, store.MaxKeyBytes); err != nil {
		return sampleRow{}, err
	}
	if s.State != "" {
		if err := checkName("state", s.State, store.MaxKeyBytes); err != nil {
			return sampleRow{}, err
		}
	}
	if err := checkTime("time", s.At); err != nil {
		return sampleRow{}, err
	}
	for _, f := range []struct {
		name string
		n    int64
	}{{"Done", s.Done}, {"DoneFrom", s.DoneFrom}, {"DoneTo", s.DoneTo}, {"Remaining", s.Remaining}, {"Admitted", s.Admitted}, {"Tokens", s.Tokens}, {"Money", s.Money}} {
		if f.n < 0 {
			return sampleRow{}, fmt.Errorf("%s %d is negative", f.name, f.n)
		}
	}
	rejections, err := limitCounts("Rejections", s.Rejections)
	if err != nil {
		return sampleRow{}, err
	}
	refusals, err := limitCounts("Refusals", s.Refusals)
	if err != nil {
		return sampleRow{}, err
	}
	budgets, err := sampleBudgets(s.Budgets)
	if err != nil {
		return sampleRow{}, err
	}
	return sampleRow{Flow: s.Flow, Source: s.Source, At: s.At.UnixMilli(), State: s.State, Reason: text(s.Reason, store.MaxReasonBytes),
		Done: s.Done, Remaining: s.Remaining, Admitted: s.Admitted, Tokens: s.Tokens, Rejections: rejections, Refusals: refusals,
		Money: s.Money, Priced: s.Priced, Budgets: budgets,
		doneFrom: s.DoneFrom, doneTo: s.DoneTo, rejections: s.Rejections, refusals: s.Refusals, budgets: s.Budgets}, nil
}

// sampleBudgets returns a sample's budgets as stored: a JSON array of
// them, "[]" for none.
func sampleBudgets(budgets []store.SampleBudget) (string, error) {
	for i, b := range budgets {
		if err := checkName(fmt.Sprintf("limit of budget %d", i), b.Limit, store.MaxKeyBytes); err != nil {
			return "", err
		}
		for _, f := range []struct {
			name string
			n    int64
		}{{"Max", b.Max}, {"Spent", b.Spent}} {
			if f.n < 0 {
				return "", fmt.Errorf("%s %d of budget %d (%s) is negative", f.name, f.n, i, quote(b.Limit))
			}
		}
	}
	if len(budgets) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(budgets)
	return string(b), err
}

// limitCounts returns counts, the field what of a sample, as stored: a
// JSON object of limit names to counts, "{}" for none.
func limitCounts(what string, counts map[string]int64) (string, error) {
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if err := checkName("limit name in "+what, name, store.MaxKeyBytes); err != nil {
			return "", err
		}
		if n := counts[name]; n < 0 {
			return "", fmt.Errorf("count %d of %s[%s] is negative", n, what, quote(name))
		}
	}
	if len(counts) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(counts)
	return string(b), err
}

// Samples implements store.Store.
func (h History) Samples(ctx context.Context, since, until time.Time, flow string) ([]store.Sample, error) {
	op, q, args := "list samples", h.sql["samples"], []any{since.UnixMilli(), until.UnixMilli()}
	if flow != "" {
		if err := checkName("flow", flow, store.MaxKeyBytes); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		op, q, args = op+" of "+flow, h.sql["flow_samples"], append(args, flow)
	}
	out := []store.Sample{}
	err := h.conn.Query(ctx, q, args, func(r Row) error {
		s, err := scanSample(r)
		if err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// scanSample reads a sample of the columns the samples statement returns.
func scanSample(r Row) (store.Sample, error) {
	var s store.Sample
	var at int64
	var rejections, refusals, budgets string
	if err := r.Scan(&s.Flow, &s.Source, &at, &s.State, &s.Reason, &s.Done, &s.Remaining, &s.Admitted, &s.Tokens, &rejections, &refusals,
		&s.Money, &s.Priced, &budgets); err != nil {
		return s, err
	}
	s.At = time.UnixMilli(at).UTC()
	var err error
	if s.Rejections, err = readCounts(rejections); err != nil {
		return s, fmt.Errorf("sample of %s at %d: rejections: %w", s.Flow, at, err)
	}
	if s.Refusals, err = readCounts(refusals); err != nil {
		return s, fmt.Errorf("sample of %s at %d: refusals: %w", s.Flow, at, err)
	}
	if budgets != "[]" {
		if err := json.Unmarshal([]byte(budgets), &s.Budgets); err != nil {
			return s, fmt.Errorf("sample of %s at %d: budgets: %w", s.Flow, at, err)
		}
		if len(s.Budgets) == 0 {
			s.Budgets = nil
		}
	}
	return s, nil
}

// readCounts returns a stored JSON object of limit names to counts; nil
// for none.
func readCounts(stored string) (map[string]int64, error) {
	if stored == "{}" {
		return nil, nil // as most are: no decoding
	}
	var m map[string]int64
	if err := json.Unmarshal([]byte(stored), &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// PruneBatch is how many samples PruneHistory deletes in one transaction.
const PruneBatch = 1000

// PruneHistory implements store.Store: in transactions of at most
// PruneBatch samples each, the oldest first, so that a first prune of a
// long history does not hold SQLite's write lock for as long as it takes.
func (h History) PruneHistory(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		var n int64
		err := h.conn.InTx(ctx, func(tx store.Tx) error {
			res, err := tx.Exec(ctx, h.sql["prune_samples"], before.UnixMilli(), PruneBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("prune history: %w", err)
		}
		if total += n; n < PruneBatch {
			return total, nil
		}
	}
}
