-- The governor's charges on each provider key: what every admitted call was
-- charged, corrected when it settles, so a restart does not forget the day's
-- usage. "at" is Unix milliseconds, UTC.
CREATE TABLE sluice_quota_charges (
    key      TEXT    NOT NULL,
    id       TEXT    NOT NULL,
    flow     TEXT    NOT NULL,
    at       INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    input    INTEGER NOT NULL,
    output   INTEGER NOT NULL,
    PRIMARY KEY (key, id)
) WITHOUT ROWID;

-- Reloading a key's last day and pruning it both scan a key by time.
CREATE INDEX sluice_quota_charges_key_at ON sluice_quota_charges (key, at);
