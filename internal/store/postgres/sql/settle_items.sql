-- The items' new records come as one JSON array of objects. Their keys
-- are also searched in the primary key as an array, so that only the
-- batch's rows are read, whatever the planner estimates (see
-- lock_items.sql).
UPDATE sluice_backfill_items AS i SET
    state        = u.state,
    processed_at = u.processed_at,
    rejects      = u.rejects,
    reason       = u.reason,
    retry_at     = u.retry_at,
    call_id      = $3,
    active_at    = u.active_at
FROM jsonb_to_recordset($2::text::jsonb)
    AS u (key text, state text, processed_at bigint, rejects bigint, reason text, retry_at bigint, active_at bigint)
WHERE i.backfill = $1 AND i.item_key = u.key
    AND i.item_key = ANY (ARRAY(SELECT jsonb_array_elements($2::text::jsonb) ->> 'key'));
