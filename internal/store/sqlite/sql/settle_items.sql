-- The items' new records come as one JSON array of objects, of items the
-- transaction has read: each conflicts with its row, which it updates. An
-- upsert, not UPDATE … FROM json_each, because SQLite would drive that
-- join from the table, reading every item of the backfill, where an
-- INSERT … SELECT reads the array and finds each row by its key. The WHERE
-- true tells SQLite's parser that ON CONFLICT starts the upsert clause.
INSERT INTO sluice_backfill_items (backfill, item_key, state, eligible_at, processed_at, call_id, rejects, reason, retry_at, active_at)
SELECT ?1, u.value ->> 'key', u.value ->> 'state', u.value ->> 'eligible_at', u.value ->> 'processed_at', ?3,
       u.value ->> 'rejects', u.value ->> 'reason', u.value ->> 'retry_at', u.value ->> 'active_at'
FROM json_each(?2) AS u
WHERE true
ON CONFLICT (backfill, item_key) DO UPDATE SET
    state        = excluded.state,
    processed_at = excluded.processed_at,
    rejects      = excluded.rejects,
    reason       = excluded.reason,
    retry_at     = excluded.retry_at,
    call_id      = excluded.call_id,
    active_at    = excluded.active_at;
