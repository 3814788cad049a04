package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/run"
)

// The bounds of a search's terms (RunFilter), so that a client's text
// never becomes an unbounded query.
const (
	MaxEventKeyBytes = 512
	MaxReasonBytes   = 256
)

// check checks the terms a client gave beyond the function and the status,
// naming the parameter that is wrong as the API calls it.
func (f RunFilter) check() error {
	if err := checkText("event_key", f.EventKey, MaxEventKeyBytes); err != nil {
		return err
	}
	if err := checkText("reason", f.Reason, MaxReasonBytes); err != nil {
		return err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return invalid("until", "%s is before since (%s)", f.Until.UTC().Format("2006-01-02T15:04:05Z07:00"),
			f.Since.UTC().Format("2006-01-02T15:04:05Z07:00"))
	}
	return nil
}

// keyRunIDs are the IDs of the runs an event of key starts in the
// functions names: a function's run is named by the key (see runID).
func keyRunIDs(names []string, key string) []string {
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		out = append(out, n+":"+key, n+":key:"+key)
	}
	return out
}

// maxKeyRuns bounds how many runs a search by event key gathers with
// their re-runs: the most a search lists.
const maxKeyRuns = 1000

// withReruns is ids and the IDs of their re-runs (runs DBOS forked from
// them, and from those, on), read through DBOS's index of runs by the run
// they were forked from, at most maxKeyRuns in all: a search by event key
// finds a run the event started and every re-run of it, which carry the
// same event.
func (e *Engine) withReruns(ctx context.Context, ids []string) ([]string, error) {
	all, next := slices.Clip(ids), ids
	for len(next) > 0 && len(all) < maxKeyRuns {
		var args params
		q := e.sys.RenderSQL("SELECT workflow_uuid FROM %sworkflow_status WHERE forked_from IN (%s) LIMIT %d",
			e.sys.Dialect().SchemaPrefix(e.sys.Schema()), args.list(next), maxKeyRuns-len(all))
		var err error
		if next, err = e.queryIDs(ctx, q, args...); err != nil {
			return nil, fmt.Errorf("search runs by event key: read re-runs: %w", err)
		}
		all = append(all, next...)
	}
	return all, nil
}

// endStatus is the status sluice records a run's end under in its table
// of ends (sluice_run_ends), for a search of s by reason; ok is false for
// a state that has no reason to search.
func endStatus(s run.State) (string, bool) {
	switch s {
	case "", run.Failed, run.Cancelled, run.TimedOut:
		return string(s), true
	}
	return "", false
}

// searchIDs finds, for a filter with an event key or a reason, the IDs of
// at most limit runs of names it selects, newest first; the listing of
// them then applies the rest of f. A key alone names its runs; a reason
// is read from sluice's record of why each run ended (see reasonQuery).
func (e *Engine) searchIDs(ctx context.Context, names []string, f RunFilter, limit int) ([]string, error) {
	var keyIDs []string
	if f.EventKey != "" {
		var err error
		if keyIDs, err = e.withReruns(ctx, keyRunIDs(names, f.EventKey)); err != nil {
			return nil, err
		}
	}
	if f.Reason == "" {
		return keyIDs, nil
	}
	candidates, many, err := e.reasonCandidates(ctx, f.Reason)
	switch {
	case err != nil:
		return nil, err
	case many:
		candidates = nil
	case candidates != nil && len(candidates) == 0:
		return nil, nil
	}
	q, args, ok := e.reasonQuery(names, keyIDs, candidates, f, limit)
	if !ok {
		return nil, nil
	}
	ids, err := e.queryIDs(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("search runs by reason: %w", err)
	}
	return ids, nil
}

// queryIDs runs q, a query of one column of IDs, and returns them.
func (e *Engine) queryIDs(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := e.sys.Pool().Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// reasonQuery is the query of searchIDs for a reason, with its arguments:
// the runs of names (of keyIDs if not nil; of candidates if not nil) that
// ended with a reason that holds f.Reason, newest first, at most limit. ok
// is false for a status that has no reason to search. The query joins
// sluice's record of why each run ended to DBOS's table of runs through
// both tables' keys. reasonCandidates has read the reasons' index first:
// a few candidates are read by key; many, in DBOS's order of the failed
// runs, newest first, until limit of them hold the text (a text that many
// runs hold is found soon).
func (e *Engine) reasonQuery(names, keyIDs, candidates []string, f RunFilter, limit int) (q string, args []any, ok bool) {
	status, ok := endStatus(f.Status)
	if !ok {
		return "", nil, false
	}
	var ps params
	arg, list := ps.add, ps.list
	p := e.sys.Dialect().SchemaPrefix(e.sys.Schema())
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT w.workflow_uuid FROM %sworkflow_status w JOIN sluice_run_ends r ON r.run_id = w.workflow_uuid WHERE w.name IN (%s)", p, list(names))
	if keyIDs != nil {
		fmt.Fprintf(&b, " AND w.workflow_uuid IN (%s)", list(keyIDs))
	}
	if candidates != nil {
		fmt.Fprintf(&b, " AND w.workflow_uuid IN (%s)", list(candidates))
	}
	// DBOS's status of a run that ended so reads only the runs a reason
	// can be found in (a record whose end DBOS did not write — a cancel
	// that failed — is left out), through DBOS's partial index of them
	// (idx_workflow_status_failed; see statusLiterals).
	var ended []run.State
	for _, st := range []run.State{run.Failed, run.Cancelled} {
		if status == "" || status == string(st) || st == run.Cancelled && status == string(run.TimedOut) {
			ended = append(ended, st)
		}
	}
	fmt.Fprintf(&b, " AND w.status IN (%s)", statusLiterals(ended...))
	if status != "" {
		fmt.Fprintf(&b, " AND r.status = %s", arg(status))
	}
	if !f.Since.IsZero() {
		fmt.Fprintf(&b, " AND w.created_at >= %s", arg(f.Since.UnixMilli()))
	}
	if !f.Until.IsZero() {
		fmt.Fprintf(&b, " AND w.created_at <= %s", arg(f.Until.UnixMilli()))
	}
	// The reason is matched as written, case and all, on both databases:
	// SQLite's instr is a plain position of one text in the other;
	// PostgreSQL's LIKE, which its pg_trgm index serves, matches case as
	// written once its wildcards are escaped.
	fmt.Fprintf(&b, " AND %s ORDER BY w.created_at DESC LIMIT %s", reasonHolds(e.h.SQLite != nil, f.Reason, arg), arg(limit))
	return e.sys.RenderSQL("%s", b.String()), ps, true
}

// params are a query's parameters as its text names them: add appends v
// and returns its name ($n), list the names of vs, comma-separated.
type params []any

func (p *params) add(v any) string {
	*p = append(*p, v)
	return fmt.Sprintf("$%d", len(*p))
}

func (p *params) list(vs []string) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = p.add(v)
	}
	return strings.Join(names, ", ")
}

// statusLiterals are DBOS's statuses of states, as SQL literals for an IN
// list: written out rather than passed, since SQLite uses DBOS's partial
// index of ended runs only where a query's own terms imply its condition.
func statusLiterals(states ...run.State) string {
	var lits []string
	for _, st := range states {
		ds, _ := dbosStatuses(st)
		for _, d := range ds {
			lits = append(lits, "'"+string(d)+"'") // DBOS's constants: no quote in them
		}
	}
	return strings.Join(lits, ", ")
}

// functionIDs are the IDs of the registered functions.
func (e *Engine) functionIDs() []string {
	fns := e.Functions()
	ids := make([]string, len(fns))
	for i, fn := range fns {
		ids[i] = fn.ID
	}
	return ids
}

// reasonHolds is the condition that the reason of sluice_run_ends r holds
// text, on SQLite or PostgreSQL, with arg adding its parameters.
func reasonHolds(sqlite bool, text string, arg func(any) string) string {
	if sqlite {
		return fmt.Sprintf("instr(r.reason, %s) > 0", arg(text))
	}
	return fmt.Sprintf(`r.reason LIKE %s ESCAPE '\'`, arg("%"+likeEscaper.Replace(text)+"%"))
}

// defaultMaxReasonCandidates is how many runs reasonCandidates reads from
// the index at most: a search with more reads DBOS's failed runs in order
// instead, where its matches are many enough to find limit of them soon.
const defaultMaxReasonCandidates = 1000

// reasonCandidates reads the IDs of the runs whose reason may hold text
// from the reasons' trigram index (migration 020) — on SQLite its
// full-text table, on PostgreSQL sluice_run_ends through its pg_trgm index
// or whole, as the planner weighs them; it holds only runs that ended
// without completing, so it is read before DBOS's table of every run —
// and returns them (an empty list, not nil, when no reason holds text: the
// answer to a search for a text that is not there). many says there are
// more than Engine.maxReasonCandidates, and ids are then not all of them.
// On SQLite, a text shorter than a trigram has no candidates from the
// index: ids is nil and many false. SQLite's index holds a run's earlier
// reasons too; the search's exact match on its present one decides.
func (e *Engine) reasonCandidates(ctx context.Context, text string) (ids []string, many bool, err error) {
	most := cmp.Or(e.maxReasonCandidates, defaultMaxReasonCandidates)
	q, args, ok := e.candidatesQuery(text, most+1)
	if !ok {
		return nil, false, nil
	}
	if ids, err = e.queryIDs(ctx, q, args...); err != nil {
		return nil, false, fmt.Errorf("search runs by reason: %w", err)
	}
	return ids, len(ids) > most, nil
}

// candidatesQuery is reasonCandidates's query of at most limit runs, with
// its arguments; ok is false for a text that has no candidates from the
// index (shorter than a trigram, on SQLite).
func (e *Engine) candidatesQuery(text string, limit int) (q string, args []any, ok bool) {
	var ps params
	switch {
	case e.h.SQLite == nil:
		q = fmt.Sprintf("SELECT r.run_id FROM sluice_run_ends r WHERE %s LIMIT %s", reasonHolds(false, text, ps.add), ps.add(limit))
	case utf8.RuneCountInString(text) < 3:
		return "", nil, false
	default:
		q = fmt.Sprintf("SELECT DISTINCT run_id FROM sluice_run_end_text WHERE sluice_run_end_text MATCH %s LIMIT %s", ps.add(ftsPhrase(text)), ps.add(limit))
	}
	return e.sys.RenderSQL("%s", q), ps, true
}

// likeEscaper escapes LIKE's wildcards and its escape character, so that a
// pattern '%' + text + '%' finds the text as written.
var likeEscaper = strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`)

// ftsPhrase is text as one phrase of an SQLite full-text query, whatever it
// holds: in double quotes, each of its own doubled. With the trigram
// tokenizer, a phrase matches the rows that hold the text.
func ftsPhrase(text string) string {
	return `"` + strings.ReplaceAll(text, `"`, `""`) + `"`
}
