package engine

import (
	"context"
	"fmt"
	"strings"

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
// is read from sluice's record of why each run ended, which the search
// joins to DBOS's table of runs through both tables' keys; DBOS's indexes
// of its runs by status and by creation time order them.
func (e *Engine) searchIDs(ctx context.Context, names []string, f RunFilter, limit int) ([]string, error) {
	var keyIDs []string
	if f.EventKey != "" {
		keyIDs = keyRunIDs(names, f.EventKey)
	}
	if f.Reason == "" {
		return keyIDs, nil
	}
	status, ok := endStatus(f.Status)
	if !ok {
		return nil, nil
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	list := func(vs []string) string {
		ps := make([]string, len(vs))
		for i, v := range vs {
			ps[i] = arg(v)
		}
		return strings.Join(ps, ", ")
	}
	p := e.sys.Dialect().SchemaPrefix(e.sys.Schema())
	var q strings.Builder
	fmt.Fprintf(&q, "SELECT w.workflow_uuid FROM %sworkflow_status w JOIN sluice_run_ends r ON r.run_id = w.workflow_uuid WHERE w.name IN (%s)", p, list(names))
	if keyIDs != nil {
		fmt.Fprintf(&q, " AND w.workflow_uuid IN (%s)", list(keyIDs))
	}
	// DBOS's status of a run that ended so reads only the runs a reason
	// can be found in (a record whose end DBOS did not write — a cancel
	// that failed — is left out), through DBOS's partial index of them
	// (idx_workflow_status_failed). The statuses are written as literals:
	// SQLite uses a partial index only where the query's own terms imply
	// its condition, which parameters do not.
	var dbosStatus []string
	for _, st := range []run.State{run.Failed, run.Cancelled} {
		if status == "" || status == string(st) || st == run.Cancelled && status == string(run.TimedOut) {
			ds, _ := dbosStatuses(st)
			for _, d := range ds {
				dbosStatus = append(dbosStatus, "'"+string(d)+"'") // DBOS's constants: no quote in them
			}
		}
	}
	fmt.Fprintf(&q, " AND w.status IN (%s)", strings.Join(dbosStatus, ", "))
	if status != "" {
		fmt.Fprintf(&q, " AND r.status = %s", arg(status))
	}
	if !f.Since.IsZero() {
		fmt.Fprintf(&q, " AND w.created_at >= %s", arg(f.Since.UnixMilli()))
	}
	if !f.Until.IsZero() {
		fmt.Fprintf(&q, " AND w.created_at <= %s", arg(f.Until.UnixMilli()))
	}
	// The reason is matched as written on both databases: PostgreSQL's
	// LIKE and SQLite's differ in case and in escapes, a plain position
	// of one text in the other does not.
	find := "strpos"
	if e.h.SQLite != nil {
		find = "instr"
	}
	fmt.Fprintf(&q, " AND %s(r.reason, %s) > 0 ORDER BY w.created_at DESC LIMIT %s", find, arg(f.Reason), arg(limit))
	rows, err := e.sys.Pool().Query(ctx, e.sys.RenderSQL("%s", q.String()), args...)
	if err != nil {
		return nil, fmt.Errorf("search runs by reason: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("search runs by reason: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search runs by reason: %w", err)
	}
	return ids, nil
}
