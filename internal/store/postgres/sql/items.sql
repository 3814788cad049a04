-- The keys come as one JSON array, searched in the primary key as an
-- array (see lock_items.sql).
-- Each item's call is found by its key, one lookup per item: LIMIT 1
-- keeps the lookup from being turned into a join, which the planner,
-- counting on more items than a batch holds, made by reading every call
-- recorded, once for every batch.
SELECT i.backfill, i.item_key, i.state, i.eligible_at, i.processed_at, COALESCE(c.run_id, ''), COALESCE(c.request_id, ''),
       i.rejects, i.reason, i.retry_at
FROM sluice_backfill_items AS i
LEFT JOIN LATERAL (
    SELECT run_id, request_id FROM sluice_backfill_calls WHERE id = i.call_id LIMIT 1
) AS c ON true
WHERE i.backfill = $1 AND i.item_key = ANY (ARRAY(SELECT jsonb_array_elements_text($2::text::jsonb)))
ORDER BY i.item_key COLLATE "C";
