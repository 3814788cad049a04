-- The engine's own tables (DBOS keeps runs, steps and queues in its own).

-- Rate limit (drops excess): events admitted per function, key and fixed
-- period. A row per window; old windows are pruned as new ones open.
CREATE TABLE sluice_rate_counts (
    function     TEXT   NOT NULL,
    rate_key     TEXT   NOT NULL,
    window_start BIGINT NOT NULL,
    count        BIGINT NOT NULL,
    PRIMARY KEY (function, rate_key, window_start)
);

-- Events a rate limit dropped, so "why did nothing run" has an answer.
CREATE TABLE sluice_dropped_events (
    function   TEXT   NOT NULL,
    event_id   TEXT   NOT NULL,
    event_name TEXT   NOT NULL,
    rate_key   TEXT   NOT NULL,
    reason     TEXT   NOT NULL,
    dropped_at BIGINT NOT NULL,
    PRIMARY KEY (function, event_id)
);

-- The save target of examples/summarize and the crash bench: one row per
-- idempotency key; writes counts how often a save reached the table.
CREATE TABLE sluice_summaries (
    idempotency_key TEXT   PRIMARY KEY,
    document_id     TEXT   NOT NULL,
    summary         TEXT   NOT NULL,
    category        TEXT   NOT NULL,
    saved_at        BIGINT NOT NULL,
    writes          BIGINT NOT NULL
);
