-- The keys come as one JSON array, sorted and each once. A key with a
-- record stays as it is; with a backfill to run after (?4), only the keys
-- it has saved are added. The WHERE tells SQLite's parser that ON CONFLICT
-- starts the upsert clause, not a join constraint. Each new item is
-- given a lane at random, which it keeps; its latest activity is now.
INSERT INTO sluice_backfill_items (backfill, item_key, state, eligible_at, processed_at, rejects, reason, retry_at, lane, active_at)
SELECT ?1, k.value, 'pending', ?3, NULL, 0, '', NULL, abs(random() % 1024), ?3
FROM json_each(?2) AS k
WHERE ?4 = '' OR EXISTS (
    SELECT 1 FROM sluice_backfill_items AS a
    WHERE a.backfill = ?4 AND a.item_key = k.value AND a.state = 'saved'
)
ON CONFLICT (backfill, item_key) DO NOTHING;
