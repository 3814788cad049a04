-- The keys come as one JSON array.
SELECT i.backfill, i.item_key, i.state, i.eligible_at, i.processed_at, COALESCE(c.run_id, ''), COALESCE(c.request_id, ''),
       i.rejects, i.reason, i.retry_at
FROM sluice_backfill_items AS i
LEFT JOIN sluice_backfill_calls AS c ON c.id = i.call_id
WHERE i.backfill = ?1 AND i.item_key IN (SELECT value FROM json_each(?2))
ORDER BY i.item_key;
