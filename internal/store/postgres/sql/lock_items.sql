-- FOR UPDATE: the rows stay as read until the transaction ends, so the
-- outcomes are applied to what is stored, whatever else settles at once.
-- In key order, as every writer locks them.
SELECT backfill, item_key, state, eligible_at, processed_at, run_id, request_id, rejects, reason, retry_at
FROM sluice_backfill_items
WHERE backfill = $1 AND item_key IN (SELECT jsonb_array_elements_text($2::text::jsonb))
ORDER BY item_key COLLATE "C"
FOR UPDATE;
