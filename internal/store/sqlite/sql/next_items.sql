-- Each branch reads sluice_backfill_items_next in order and stops at the
-- limit: the pending items after the cursor (?4, ?5: where the read starts
-- in the index), and the rejected ones due again, wherever they are. Rejected
-- items wait in the index, in eligibility order, among those not yet due:
-- their keys are found in the index alone, then their rows. With ?6 lanes
-- (0: all), only the items of lane ?7 of them, judged in the index too.
SELECT backfill, item_key, state, eligible_at, processed_at, run_id, request_id, rejects, reason, retry_at
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
)
ORDER BY eligible_at, item_key
LIMIT ?3;
