-- NextItems reads the pending items, and the rejected ones due again, of
-- a backfill: one index of every item held an entry for each item ever
-- saved or parked too, most of a finished backfill's, which nothing reads
-- by state. Two partial indexes hold only the items in those two states:
-- an item leaves its index when it is saved or parked, and the store of
-- a backfill of a million items no longer keeps a million entries no
-- query reads. Each query names its state as the index's condition does,
-- which SQLite needs to use a partial index; the rejected items' index
-- holds the state too, so that SQLite passes over those not yet due in the
-- index alone (without it, it reads each one's row to check its state).
DROP INDEX sluice_backfill_items_next;

CREATE INDEX sluice_backfill_items_pending ON sluice_backfill_items (backfill, eligible_at, item_key, lane)
    WHERE state = 'pending';

CREATE INDEX sluice_backfill_items_rejected ON sluice_backfill_items (backfill, eligible_at, item_key, retry_at, lane, state)
    WHERE state = 'rejected';
