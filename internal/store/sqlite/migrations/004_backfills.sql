-- Backfills: each item of a backfill, each job's record (a job is a
-- backfill, by name), and the figures of each run. Times are Unix
-- milliseconds, UTC; NULL where never set.

-- One row per item and backfill: its state, when it became eligible, and
-- its last attempt. The primary key finds an item (Settle, Items, and
-- whether a backfill after another has saved a key); the index reads the
-- items NextItems may select in the order it returns them, and holds
-- retry_at so that rejected items not yet due are passed over in the
-- index alone.
CREATE TABLE sluice_backfill_items (
    backfill     TEXT    NOT NULL,
    item_key     TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('pending', 'rejected', 'saved', 'parked')),
    eligible_at  INTEGER NOT NULL,
    processed_at INTEGER,          -- when saved or parked
    run_id       TEXT    NOT NULL, -- of the last attempt; '' before any
    request_id   TEXT    NOT NULL,
    rejects      INTEGER NOT NULL,
    reason       TEXT    NOT NULL, -- why the last output was rejected
    retry_at     INTEGER,          -- when a rejected item may be selected again
    PRIMARY KEY (backfill, item_key)
) WITHOUT ROWID;

CREATE INDEX sluice_backfill_items_next ON sluice_backfill_items (backfill, state, eligible_at, item_key, retry_at);

-- One row per job. The counts of its items by state change in the
-- transaction that changes an item, so reading a job's health reads one
-- row however many items it has.
CREATE TABLE sluice_jobs (
    name                 TEXT    NOT NULL PRIMARY KEY,
    monitoring_since     INTEGER NOT NULL,
    last_progress_at     INTEGER,
    last_run_at          INTEGER,
    last_status          TEXT    NOT NULL DEFAULT '', -- 'ok', 'failed', '' before any run ended
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    last_error           TEXT    NOT NULL DEFAULT '',
    pending              INTEGER NOT NULL DEFAULT 0,
    rejected             INTEGER NOT NULL DEFAULT 0,
    saved                INTEGER NOT NULL DEFAULT 0,
    parked               INTEGER NOT NULL DEFAULT 0,
    alert                TEXT    NOT NULL DEFAULT ''
);

-- One row per run of a backfill: the figures of its log line. rejected is
-- a JSON object of reasons to counts.
CREATE TABLE sluice_backfill_runs (
    run_id     TEXT    NOT NULL PRIMARY KEY,
    backfill   TEXT    NOT NULL,
    started_at INTEGER,
    ended_at   INTEGER NOT NULL,
    selected   INTEGER NOT NULL,
    retried    INTEGER NOT NULL,
    saved      INTEGER NOT NULL,
    parked     INTEGER NOT NULL,
    rejected   TEXT    NOT NULL,
    stopped    TEXT    NOT NULL
);

-- BackfillRuns: newest first, of one backfill or of all.
CREATE INDEX sluice_backfill_runs_backfill ON sluice_backfill_runs (backfill, ended_at DESC, run_id);
CREATE INDEX sluice_backfill_runs_ended ON sluice_backfill_runs (ended_at DESC, run_id);
