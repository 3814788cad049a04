-- The history: the configurations processes ran with, and what each flow
-- did minute by minute, for reports over days. Times are Unix
-- milliseconds, UTC, as in the backfills' tables. Names are COLLATE "C",
-- so that their indexes hold them in byte order, the order SQLite keeps
-- and every listing returns.

-- One row per configuration version a source recorded. id is the order
-- they were recorded in: RecordConfig locks the table before it tests and
-- records, so ids are taken in that order. The index finds a source's
-- latest version (the test of RecordConfig) and the one in effect before
-- a time.
CREATE TABLE sluice_config_versions (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     bigint NOT NULL,
    source text COLLATE "C" NOT NULL,
    hash   text COLLATE "C" NOT NULL,
    code   text   NOT NULL,
    config text   NOT NULL  -- JSON, as recorded: text, not jsonb, keeps its bytes
);

CREATE INDEX sluice_config_versions_source ON sluice_config_versions (source, at, id);

-- One row per flow, source and interval. rejections and refusals are JSON
-- objects of limit names to counts ('{}' for none), as text, as on
-- SQLite. The primary key reads one flow's window in order; the index
-- reads every flow's.
CREATE TABLE sluice_flow_samples (
    flow       text COLLATE "C" NOT NULL,
    source     text COLLATE "C" NOT NULL,
    at         bigint NOT NULL,
    state      text   NOT NULL,
    reason     text   NOT NULL,
    done       bigint NOT NULL,
    remaining  bigint NOT NULL,
    admitted   bigint NOT NULL,
    tokens     bigint NOT NULL,
    rejections text   NOT NULL,
    refusals   text   NOT NULL,
    PRIMARY KEY (flow, at, source)
);

CREATE INDEX sluice_flow_samples_at ON sluice_flow_samples (at, flow, source);
