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
