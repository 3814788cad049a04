-- Lanes: each item belongs to one of 1,024 lanes, so that several parts of
-- a backfill's run can each go through the items of their own lanes at
-- once, none ever taking another's. The lane is drawn once when the item
-- is added and never changes; an item recorded before lanes existed is
-- given one here. The index carries it, so a lane's read filters in the
-- index.
ALTER TABLE sluice_backfill_items ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;

UPDATE sluice_backfill_items SET lane = abs(random() % 1024);

DROP INDEX sluice_backfill_items_next;

CREATE INDEX sluice_backfill_items_next ON sluice_backfill_items (backfill, state, eligible_at, item_key, retry_at, lane);

-- A job's counts of items by state, and its last progress, in shards:
-- settlements of several lanes at once each change their own shard's row
-- instead of all waiting on the job's one row. A job's counts are the sums
-- over its shards (at most MaxLanes rows), its last progress the latest.
CREATE TABLE sluice_job_counts (
    name             TEXT    NOT NULL,
    shard            INTEGER NOT NULL,
    pending          INTEGER NOT NULL,
    rejected         INTEGER NOT NULL,
    saved            INTEGER NOT NULL,
    parked           INTEGER NOT NULL,
    last_progress_at INTEGER,
    PRIMARY KEY (name, shard)
) WITHOUT ROWID;

INSERT INTO sluice_job_counts (name, shard, pending, rejected, saved, parked, last_progress_at)
SELECT name, 0, pending, rejected, saved, parked, last_progress_at FROM sluice_jobs;

ALTER TABLE sluice_jobs DROP COLUMN pending;
ALTER TABLE sluice_jobs DROP COLUMN rejected;
ALTER TABLE sluice_jobs DROP COLUMN saved;
ALTER TABLE sluice_jobs DROP COLUMN parked;
ALTER TABLE sluice_jobs DROP COLUMN last_progress_at;
