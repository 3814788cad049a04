package engine

import (
	"path/filepath"
	"strings"
	"testing"

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
