INSERT INTO sluice_dropped_events (function, event_id, event_name, rate_key, reason, dropped_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (function, event_id) DO NOTHING;
