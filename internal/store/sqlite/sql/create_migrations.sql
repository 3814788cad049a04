CREATE TABLE IF NOT EXISTS sluice_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL -- Unix milliseconds, UTC
);
