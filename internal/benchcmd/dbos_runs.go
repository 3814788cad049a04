package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/store"
)

// dbosRuns reads what DBOS records of a bench database's runs and their
// steps through DBOS's client, which knows where each kind of database
// keeps DBOS's tables: the benches hold no SQL on those tables. The client
// carries the context it was opened with: its calls end when that does.
type dbosRuns struct {
	c  dbos.Client
	st store.Store // the store openDBOSRuns opened for the client, closed after it
}

// dbosShutdown bounds how long closing a client waits for its listener and
// its pool.
const dbosShutdown = 5 * time.Second

// openDBOSRuns opens a client on the database dbURL names, through a store
// of its own. DBOS's tables must exist: open it once the app has started.
func openDBOSRuns(ctx context.Context, dbURL string) (*dbosRuns, error) {
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	r, err := dbosRunsOn(ctx, st)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	r.st = st
	return r, nil
}

// dbosRunsOn opens a client on st's database through st's pool. DBOS closes
// that pool when the client closes: close the client after the last call
// on st.
func dbosRunsOn(ctx context.Context, st store.Store) (*dbosRuns, error) {
	h, err := st.Handle()
	if err != nil {
		return nil, err
	}
	c, err := dbos.NewClient(ctx, dbos.ClientConfig{SQLiteSystemDB: h.SQLite, SystemDBPool: h.Postgres, Logger: quietLogger()})
	if err != nil {
		return nil, fmt.Errorf("open a DBOS client on %s: %w", st, err)
	}
	return &dbosRuns{c: c}, nil
}

// close shuts the client down, and then the store it opened, if any.
func (r *dbosRuns) close() {
	_ = dbos.Shutdown(r.c, dbosShutdown)
	if r.st != nil {
		_ = r.st.Close()
	}
}

// endedStatuses are the statuses of the runs that have ended.
var endedStatuses = []dbos.WorkflowStatusType{dbos.WorkflowStatusSuccess, dbos.WorkflowStatusError,
	dbos.WorkflowStatusCancelled, dbos.WorkflowStatusMaxRecoveryAttemptsExceeded}

// runCounts is how many runs a database holds in each status.
type runCounts map[dbos.WorkflowStatusType]int

// total is how many runs there are in all.
func (n runCounts) total() int {
	t := 0
	for _, k := range n {
		t += k
	}
	return t
}

// of is how many runs are in any of statuses.
func (n runCounts) of(statuses ...dbos.WorkflowStatusType) int {
	t := 0
	for _, s := range statuses {
		t += n[s]
	}
	return t
}

// notEnded is how many runs have not ended: queued, under way or delayed.
func (n runCounts) notEnded() int { return n.total() - n.of(endedStatuses...) }

// countByStatus counts the runs of the functions names by status.
func (r *dbosRuns) countByStatus(names ...string) (runCounts, error) {
	return r.byStatus(dbos.GetWorkflowAggregatesInput{Name: names})
}

// byStatus counts the runs in selects by status.
func (r *dbosRuns) byStatus(in dbos.GetWorkflowAggregatesInput) (runCounts, error) {
	in.GroupByStatus, in.SelectCount = true, true
	rows, err := dbos.GetWorkflowAggregates(r.c, in)
	if err != nil {
		return nil, err
	}
	n := runCounts{}
	for _, row := range rows {
		status, count := row.Group["status"], row.Count
		if status == nil || count == nil {
			return nil, errors.New("a count of runs by status names no status or no count")
		}
		n[dbos.WorkflowStatusType(*status)] += int(*count)
	}
	return n, nil
}

// countUnended counts the runs of the functions names that are queued or
// under way, by status. It asks by their queues, which an index of SQLite
// (and DBOS's on PostgreSQL) finds them by, so that a count made every
// fraction of a second does not read every run ever made.
func (r *dbosRuns) countUnended(names ...string) (runCounts, error) {
	queues := make([]string, len(names))
	for i, name := range names {
		queues[i] = engine.QueueName(name)
	}
	return r.byStatus(dbos.GetWorkflowAggregatesInput{Name: names, QueueName: queues,
		Status: []dbos.WorkflowStatusType{dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusPending}})
}

// pendingByExecutor counts the runs under way (PENDING) of every function
// by the executor that runs them.
func (r *dbosRuns) pendingByExecutor() (map[string]int, error) {
	rows, err := dbos.GetWorkflowAggregates(r.c, dbos.GetWorkflowAggregatesInput{GroupByExecutorID: true, SelectCount: true,
		Status: []dbos.WorkflowStatusType{dbos.WorkflowStatusPending}})
	if err != nil {
		return nil, err
	}
	n := map[string]int{}
	for _, row := range rows {
		if ex, count := row.Group["executor_id"], row.Count; ex != nil && count != nil {
			n[*ex] += int(*count)
		}
	}
	return n, nil
}
