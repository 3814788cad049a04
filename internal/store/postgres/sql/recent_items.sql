-- The page of backfill $1's items after the cursor ($3, $4) in the order
-- of their latest activity, newest first, then by key in reverse byte
-- order (keys are COLLATE "C", as SQLite orders them). Items settled at
-- least once are read backwards in sluice_backfill_items_recent, pending
-- ones in sluice_backfill_items_pending, whose eligible_at is their latest
-- activity (see migration 016): each read stops at the limit $2, and the
-- two pages, in the same order, are merged.
-- Each item's call is found by its key, one lookup per item: LIMIT 1
-- keeps the lookup from being turned into a join, which the planner,
-- counting on more items than a batch holds, made by reading every call
-- recorded, once for every batch.
SELECT i.backfill, i.item_key, i.state, i.eligible_at, i.processed_at, COALESCE(c.run_id, ''), COALESCE(c.request_id, ''),
       i.rejects, i.reason, i.retry_at, i.active_at
FROM (
    (SELECT backfill, item_key, state, eligible_at, processed_at, rejects, reason, retry_at, active_at, call_id
     FROM sluice_backfill_items
     WHERE backfill = $1 AND state <> 'pending' AND (active_at, item_key) < ($3::bigint, $4::text)
     ORDER BY active_at DESC, item_key COLLATE "C" DESC
     LIMIT $2)
    UNION ALL
    (SELECT backfill, item_key, state, eligible_at, processed_at, rejects, reason, retry_at, eligible_at, call_id
     FROM sluice_backfill_items
     WHERE backfill = $1 AND state = 'pending' AND (eligible_at, item_key) < ($3::bigint, $4::text)
     ORDER BY eligible_at DESC, item_key COLLATE "C" DESC
     LIMIT $2)
) AS i
LEFT JOIN LATERAL (
    SELECT run_id, request_id FROM sluice_backfill_calls WHERE id = i.call_id LIMIT 1
) AS c ON true
ORDER BY i.active_at DESC, i.item_key COLLATE "C" DESC
LIMIT $2;
