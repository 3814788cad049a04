package engine

import (
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// On SQLite, the queries DBOS's queues make on every poll, with the queue
// and the status passed as parameters as DBOS passes them, search an index
// by queue and status instead of reading the whole workflow_status table.
func TestSQLiteQueuePollsUseAnIndex(t *testing.T) {
	t.Parallel()
	e := newEngine(t, filepath.Join(t.TempDir(), "sluice.db"))
	h, err := e.st.Handle()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		// The runs under way, for a concurrency limit.
		`SELECT COUNT(*) FROM workflow_status WHERE queue_name = ?1 AND status = ?2`,
		// The runs to dequeue, oldest first.
		`SELECT workflow_uuid FROM workflow_status WHERE queue_name = ?1 AND status = ?2
		 AND (application_version = ?3 OR application_version IS NULL) ORDER BY priority ASC, created_at ASC LIMIT 10`,
	} {
		p := testenv.QueryPlan(t, h.SQLite, q, "sluice:f", "ENQUEUED", "v1")
		if !strings.Contains(p, "SEARCH workflow_status USING") || !strings.Contains(p, "(queue_name=? AND status=?)") {
			t.Errorf("the plan of %q is %q: want a search by queue and status", q, p)
		}
	}
}

// The writes every run makes to workflow_status on SQLite (DBOS's enqueue,
// its claim by a queue's poll and the run's outcome, each in a transaction
// of its own), on databases DBOS migrated that differ only in the index
// sluice adds: none, queueIndex (each of these writes updates it), and a
// partial one of the queued runs only, which the polls for queued runs use
// (with the status bound, SQLite plans again and sees that it applies) but
// which the listings of queued or running runs by queue, whose statuses
// are a list, cannot use. Each iteration writes one run to each database,
// in turn, so that the machine's load weighs on all alike; it reports the
// time per run of each beside none's:
//
//	go test -run - -bench RunWritesToWorkflowStatus -count 6 ./internal/engine/
func BenchmarkRunWritesToWorkflowStatus(b *testing.B) {
	variants := []struct {
		name, index string
	}{
		{"none", ""},
		{"queueIndex", queueIndex},
		{"queued-only", `CREATE INDEX queued ON workflow_status (queue_name, priority, created_at) WHERE status = 'ENQUEUED'`},
	}
	dbs := make([]*sql.DB, len(variants))
	for i, v := range variants {
		path := filepath.Join(b.TempDir(), "sluice.db")
		e, err := New(b.Context(), Config{Store: testenv.OpenStore(b, path), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Launch(b.Context()); err != nil {
			b.Fatal(err)
		}
		// DBOS has migrated the database: the writes go on without its
		// queue polls beside them.
		if err := e.Shutdown(5 * time.Second); err != nil {
			b.Fatal(err)
		}
		h, err := testenv.OpenStore(b, path).Handle()
		if err != nil {
			b.Fatal(err)
		}
		for _, q := range []string{`DROP INDEX sluice_workflow_status_queue`, v.index} {
			if _, err := h.SQLite.Exec(q); q != "" && err != nil {
				b.Fatal(err)
			}
		}
		dbs[i] = h.SQLite
	}
	inTx := func(db *sql.DB, q string, args ...any) {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(q, args...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	took := make([]time.Duration, len(dbs))
	for i := 0; b.Loop(); i++ {
		id := "f:bench-" + strconv.Itoa(i)
		for k := range dbs {
			k = (k + i) % len(dbs) // each first in turn
			began := time.Now()
			inTx(dbs[k], `INSERT INTO workflow_status (workflow_uuid, status, name, queue_name, priority, inputs, application_version, executor_id)
				VALUES (?1, 'ENQUEUED', 'f', 'sluice:f', 1048576, '{}', 'v', 'local')`, id)
			inTx(dbs[k], `UPDATE workflow_status SET status = 'PENDING', owner_xid = 'o', started_at_epoch_ms = 1, updated_at = 1,
				recovery_attempts = recovery_attempts + 1 WHERE workflow_uuid = ?1 AND status = 'ENQUEUED'`, id)
			inTx(dbs[k], `UPDATE workflow_status SET status = 'SUCCESS', owner_xid = NULL, completed_at = 2, updated_at = 2 WHERE workflow_uuid = ?1`, id)
			took[k] += time.Since(began)
		}
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "ns/run-none")
	for k, v := range variants[1:] {
		b.ReportMetric(float64(took[k+1])/float64(took[0]), v.name+"/none")
	}
}
