package engine

import "github.com/sluice-dev/sluice/internal/store/sqlite"

// explain returns err, as a statement the engine ran on its database
// returned it (before any wrapping, which it would drop), in words a user can
// act on: on SQLite, a lock another process held on the
// file for the whole busy timeout becomes a *sqlite.LockedError naming the
// file and what to do. Other errors come back unchanged.
//
// The engine's own statements (db.exec, queryRow, query) pass their errors
// through it. DBOS retries the writes it makes (workflow and step records,
// queues) on SQLITE_BUSY until the lock is gone, so a run waits out another
// process's lock instead of failing; and the store explains its own errors.
func (d *db) explain(err error) error {
	if s, ok := d.st.(*sqlite.Store); ok {
		return s.Locked(err)
	}
	return err
}
