SELECT function, event_id, event_name, rate_key, reason, dropped_at
FROM sluice_dropped_events
WHERE (?1 = '' OR function = ?1)
ORDER BY dropped_at DESC, function, event_id
LIMIT ?2;
