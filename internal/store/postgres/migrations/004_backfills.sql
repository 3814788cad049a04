-- Backfills: each item of a backfill, each job's record (a job is a
-- backfill, by name), and the figures of each run. Times are Unix
-- milliseconds, UTC, as in the engine's tables; NULL where never set.
-- Keys and names are COLLATE "C", so that their indexes hold them in byte
-- order, the order SQLite keeps and every listing returns.

-- One row per item and backfill: its state, when it became eligible, and
-- its last attempt. The primary key finds an item (Settle, Items, and
-- whether a backfill after another has saved a key); the index reads the
-- items NextItems may select in the order it returns them, and holds
-- retry_at so that rejected items not yet due are passed over in the
-- index alone.
CREATE TABLE sluice_backfill_items (
    backfill     text COLLATE "C" NOT NULL,
    item_key     text COLLATE "C" NOT NULL,
    state        text   NOT NULL CHECK (state IN ('pending', 'rejected', 'saved', 'parked')),
    eligible_at  bigint NOT NULL,
    processed_at bigint,          -- when saved or parked
    run_id       text   NOT NULL, -- of the last attempt; '' before any
    request_id   text   NOT NULL,
    rejects      bigint NOT NULL,
    reason       text   NOT NULL, -- why the last output was rejected
    retry_at     bigint,          -- when a rejected item may be selected again
    PRIMARY KEY (backfill, item_key)
);

CREATE INDEX sluice_backfill_items_next ON sluice_backfill_items (backfill, state, eligible_at, item_key, retry_at);

-- One row per job. The counts of its items by state change in the
-- transaction that changes an item, so reading a job's health reads one
-- row however many items it has.
CREATE TABLE sluice_jobs (
    name                 text COLLATE "C" NOT NULL PRIMARY KEY,
    monitoring_since     bigint NOT NULL,
    last_progress_at     bigint,
    last_run_at          bigint,
    last_status          text   NOT NULL DEFAULT '', -- 'ok', 'failed', '' before any run ended
    consecutive_failures bigint NOT NULL DEFAULT 0,
    last_error           text   NOT NULL DEFAULT '',
    pending              bigint NOT NULL DEFAULT 0,
    rejected             bigint NOT NULL DEFAULT 0,
    saved                bigint NOT NULL DEFAULT 0,
    parked               bigint NOT NULL DEFAULT 0,
    alert                text   NOT NULL DEFAULT ''
);

-- One row per run of a backfill: the figures of its log line. rejected is
-- a JSON object of reasons to counts, as text, as on SQLite.
CREATE TABLE sluice_backfill_runs (
    run_id     text COLLATE "C" NOT NULL PRIMARY KEY,
    backfill   text COLLATE "C" NOT NULL,
    started_at bigint,
    ended_at   bigint NOT NULL,
    selected   bigint NOT NULL,
    retried    bigint NOT NULL,
    saved      bigint NOT NULL,
    parked     bigint NOT NULL,
    rejected   text   NOT NULL,
    stopped    text   NOT NULL
);

-- BackfillRuns: newest first, of one backfill or of all.
CREATE INDEX sluice_backfill_runs_backfill ON sluice_backfill_runs (backfill, ended_at DESC, run_id);
CREATE INDEX sluice_backfill_runs_ended ON sluice_backfill_runs (ended_at DESC, run_id);
