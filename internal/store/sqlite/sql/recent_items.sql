-- The page of backfill ?1's items after the cursor (?3, ?4) in the order
-- of their latest activity, newest first, then by key in reverse byte
-- order: read backwards in sluice_backfill_items_recent from the cursor,
-- stopping at the limit ?2.
SELECT i.backfill, i.item_key, i.state, i.eligible_at, i.processed_at, COALESCE(c.run_id, ''), COALESCE(c.request_id, ''),
       i.rejects, i.reason, i.retry_at, i.active_at
FROM sluice_backfill_items AS i
LEFT JOIN sluice_backfill_calls AS c ON c.id = i.call_id
WHERE i.backfill = ?1 AND (i.active_at, i.item_key) < (?3, ?4)
ORDER BY i.active_at DESC, i.item_key DESC
LIMIT ?2;
