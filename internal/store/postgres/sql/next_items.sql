-- Each branch reads its partial index (sluice_backfill_items_pending,
-- sluice_backfill_items_rejected) in order and stops at the
-- limit: the pending items after the cursor ($4, $5: where the read starts
-- in the index), and the rejected ones due again, wherever they are. Rejected
-- items wait in the index, in eligibility order, among those not yet due:
-- their keys are found in the index, then their rows. Keys are COLLATE "C"
-- (byte order, as SQLite orders them). With $6 lanes (0: all), only the
-- items of lane $7 of them, judged in the index too.
-- Each item's call is found by its key, one lookup per item: LIMIT 1
-- keeps the lookup from being turned into a join, which the planner,
-- counting on more items than a batch holds, made by reading every call
-- recorded, once for every batch.
SELECT i.backfill, i.item_key, i.state, i.eligible_at, i.processed_at, COALESCE(c.run_id, ''), COALESCE(c.request_id, ''),
       i.rejects, i.reason, i.retry_at
FROM (
    (SELECT * FROM sluice_backfill_items
     WHERE backfill = $1 AND state = 'pending' AND (eligible_at, item_key) > ($4, $5)
       AND ($6::int = 0 OR lane % $6::int = $7::int)
     ORDER BY eligible_at, item_key
     LIMIT $3)
    UNION ALL
    SELECT * FROM sluice_backfill_items
    WHERE backfill = $1 AND item_key IN (
        SELECT item_key FROM sluice_backfill_items
        WHERE backfill = $1 AND state = 'rejected' AND retry_at <= $2
          AND ($6::int = 0 OR lane % $6::int = $7::int)
        ORDER BY eligible_at, item_key
        LIMIT $3
    )
) AS i
LEFT JOIN LATERAL (
    SELECT run_id, request_id FROM sluice_backfill_calls WHERE id = i.call_id LIMIT 1
) AS c ON true
ORDER BY i.eligible_at, i.item_key COLLATE "C"
LIMIT $3;
