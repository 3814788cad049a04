-- RecentItems lists a backfill's items by their latest activity. A pending
-- item's latest activity is when it was recorded, which is when it became
-- eligible (an item is pending only from AddItems or a settlement's Then,
-- both at its eligible_at, until it is first settled), and the pending
-- items' index holds them in that order already. So the index on the
-- latest activity holds only the items settled at least once, and
-- RecentItems reads both indexes: recording a page of new items writes
-- one index entry fewer per item, and settling an item adds an entry
-- where it moved one.
DROP INDEX sluice_backfill_items_recent;

CREATE INDEX sluice_backfill_items_recent ON sluice_backfill_items (backfill, active_at, item_key)
    WHERE state <> 'pending';
