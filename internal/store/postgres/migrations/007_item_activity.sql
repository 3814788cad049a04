-- Each item's latest activity: when it was added, then when an outcome of
-- it was last settled, so that the items a backfill touched last can be
-- listed newest first (RecentItems) from an index instead of by sorting
-- every item. Items recorded before count when they were processed, or
-- else when they became eligible: the time a rejected item was rejected
-- was not kept.
ALTER TABLE sluice_backfill_items ADD COLUMN active_at bigint NOT NULL DEFAULT 0;

UPDATE sluice_backfill_items SET active_at = coalesce(processed_at, eligible_at);

CREATE INDEX sluice_backfill_items_recent ON sluice_backfill_items (backfill, active_at, item_key);
