-- Each branch reads its partial index (sluice_backfill_items_pending,
-- sluice_backfill_items_rejected) in order and stops at the
-- limit: the pending items after the cursor (?4, ?5: where the read starts
-- in the index), and the rejected ones due again, wherever they are. Rejected
-- items wait in the index, in eligibility order, among those not yet due:
-- their keys are found in the index alone, then their rows. With ?6 lanes
-- (0: all), only the items of lane ?7 of them, judged in the index too.
SELECT i.backfill, i.item_key, i.state, i.eligible_at, i.processed_at, COALESCE(c.run_id, ''), COALESCE(c.request_id, ''),
       i.rejects, i.reason, i.retry_at
FROM (
    SELECT * FROM (
        SELECT * FROM sluice_backfill_items
        WHERE backfill = ?1 AND state = 'pending' AND (eligible_at, item_key) > (?4, ?5)
          AND (?6 = 0 OR lane % ?6 = ?7)
        ORDER BY eligible_at, item_key
        LIMIT ?3
    )
    UNION ALL
    SELECT * FROM sluice_backfill_items
    WHERE backfill = ?1 AND item_key IN (
        SELECT item_key FROM sluice_backfill_items
        WHERE backfill = ?1 AND state = 'rejected' AND retry_at <= ?2
          AND (?6 = 0 OR lane % ?6 = ?7)
        ORDER BY eligible_at, item_key
        LIMIT ?3
    )
) AS i
LEFT JOIN sluice_backfill_calls AS c ON c.id = i.call_id
ORDER BY i.eligible_at, i.item_key
LIMIT ?3;
