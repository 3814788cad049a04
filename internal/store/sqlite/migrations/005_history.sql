-- The history: the configurations processes ran with, and what each flow
-- did minute by minute, for reports over days. Times are Unix
-- milliseconds, UTC.

-- One row per configuration version a source recorded. id is the order
-- they were recorded in: rows are never deleted, so each new rowid is
-- above every other. The index finds a source's latest version (the
-- test of RecordConfig) and the one in effect before a time.
CREATE TABLE sluice_config_versions (
    id     INTEGER NOT NULL PRIMARY KEY,
    at     INTEGER NOT NULL,
    source TEXT    NOT NULL,
    hash   TEXT    NOT NULL,
    code   TEXT    NOT NULL,
    config TEXT    NOT NULL  -- JSON, as recorded
);

CREATE INDEX sluice_config_versions_source ON sluice_config_versions (source, at, id);

-- One row per flow, source and interval. rejections and refusals are JSON
-- objects of limit names to counts ('{}' for none). The primary key reads
-- one flow's window in order; the index reads every flow's.
CREATE TABLE sluice_flow_samples (
    flow       TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    state      TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    done       INTEGER NOT NULL,
    remaining  INTEGER NOT NULL,
    admitted   INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    rejections TEXT    NOT NULL,
    refusals   TEXT    NOT NULL,
    PRIMARY KEY (flow, at, source)
) WITHOUT ROWID;

CREATE INDEX sluice_flow_samples_at ON sluice_flow_samples (at, flow, source);
