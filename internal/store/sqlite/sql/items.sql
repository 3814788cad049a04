-- The keys come as one JSON array.
SELECT backfill, item_key, state, eligible_at, processed_at, run_id, request_id, rejects, reason, retry_at
FROM sluice_backfill_items
WHERE backfill = ?1 AND item_key IN (SELECT value FROM json_each(?2))
ORDER BY item_key;
