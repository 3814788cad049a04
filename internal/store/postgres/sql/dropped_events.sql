-- COLLATE "C" orders ties by bytes, as SQLite does, whatever the database's
-- collation.
SELECT function, event_id, event_name, rate_key, reason, dropped_at
FROM sluice_dropped_events
WHERE ($1 = '' OR function = $1)
ORDER BY dropped_at DESC, function COLLATE "C", event_id COLLATE "C"
LIMIT $2;
