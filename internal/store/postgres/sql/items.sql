-- The keys come as one JSON array, searched in the primary key as an
-- array (see lock_items.sql).
SELECT backfill, item_key, state, eligible_at, processed_at, run_id, request_id, rejects, reason, retry_at
FROM sluice_backfill_items
WHERE backfill = $1 AND item_key = ANY (ARRAY(SELECT jsonb_array_elements_text($2::text::jsonb)))
ORDER BY item_key COLLATE "C";
