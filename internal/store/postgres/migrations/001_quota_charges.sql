-- The governor's charges on each provider key: what every admitted call was
-- charged, corrected when it settles, so a restart does not forget the day's
-- usage, and so every node sharing this database sees every node's usage.
CREATE TABLE sluice_quota_charges (
    key      text        NOT NULL,
    id       text        NOT NULL,
    flow     text        NOT NULL,
    at       timestamptz NOT NULL,
    requests bigint      NOT NULL,
    input    bigint      NOT NULL,
    output   bigint      NOT NULL,
    PRIMARY KEY (key, id)
);

-- Reloading a key's last day and pruning it both scan a key by time.
CREATE INDEX sluice_quota_charges_key_at ON sluice_quota_charges (key, at);
