-- FOR UPDATE: the rows stay as read until the transaction ends, so the
-- outcomes are applied to what is stored, whatever else settles at once.
-- In key order, as every writer locks them. The keys are an array the
-- primary key is searched with, whatever the planner estimates of the
-- table: as a join, a backfill whose statistics are older than its items
-- was read whole for each batch.
SELECT backfill, item_key, state, eligible_at, processed_at, run_id, request_id, rejects, reason, retry_at
FROM sluice_backfill_items
WHERE backfill = $1 AND item_key = ANY (ARRAY(SELECT jsonb_array_elements_text($2::text::jsonb)))
ORDER BY item_key COLLATE "C"
FOR UPDATE;
