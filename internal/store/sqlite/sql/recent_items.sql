-- The page of backfill ?1's items after the cursor (?3, ?4) in the order
-- of their latest activity, newest first, then by key in reverse byte
-- order: read backwards in sluice_backfill_items_recent from the cursor,
-- stopping at the limit ?2.
SELECT backfill, item_key, state, eligible_at, processed_at, run_id, request_id, rejects, reason, retry_at, active_at
FROM sluice_backfill_items
WHERE backfill = ?1 AND (active_at, item_key) < (?3, ?4)
ORDER BY active_at DESC, item_key DESC
LIMIT ?2;
