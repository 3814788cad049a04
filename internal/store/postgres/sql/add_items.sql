-- The keys come as one JSON array, sorted and each once, so concurrent
-- writers insert them in the same order. A key with a record stays as it
-- is; with a backfill to run after ($4), only the keys it has saved are
-- added. Each new item is given a lane at random, which it keeps; its
-- latest activity is now.
INSERT INTO sluice_backfill_items (backfill, item_key, state, eligible_at, processed_at, rejects, reason, retry_at, lane, active_at)
SELECT $1, k.key, 'pending', $3, NULL, 0, '', NULL, floor(random() * 1024)::int, $3
FROM jsonb_array_elements_text($2::text::jsonb) AS k (key)
WHERE $4::text = '' OR EXISTS (
    SELECT 1 FROM sluice_backfill_items AS a
    WHERE a.backfill = $4 AND a.item_key = k.key AND a.state = 'saved'
)
ON CONFLICT (backfill, item_key) DO NOTHING;
