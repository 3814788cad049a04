package engine

import (
	"context"
	"fmt"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// queueIndex is an index of DBOS's workflow_status that SQLite can use for
// the queries DBOS's queues make on every poll: those of the runs queued
// (to dequeue, oldest first) and of the runs under way (for a concurrency
// limit), each by queue name and status. DBOS's own indexes for them are
// partial (WHERE status IN ('ENQUEUED', 'PENDING')), and SQLite uses a
// partial index only where a query's terms imply its condition, which a
// status passed as a parameter does not: it read the whole table instead,
// at every poll of every queue, so the engine slowed as runs accumulated
// (seeding 40,000 runs went at a third of the rate of 10,000). PostgreSQL
// plans with the parameters' values and uses DBOS's indexes.
const queueIndex = `CREATE INDEX IF NOT EXISTS sluice_workflow_status_queue ON workflow_status (queue_name, status, priority, created_at)`

// indexRuns creates queueIndex in the system database of cfg, which DBOS
// has migrated, when it is SQLite. On a database holding many runs, the
// first start after an upgrade builds it once.
func indexRuns(ctx context.Context, cfg dbos.Config) error {
	if db := cfg.SQLiteSystemDB; db != nil {
		if _, err := db.ExecContext(ctx, queueIndex); err != nil {
			return fmt.Errorf("index DBOS's queues on SQLite: %w", err)
		}
	}
	return nil
}
