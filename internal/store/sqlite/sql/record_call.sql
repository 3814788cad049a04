-- The number of the call of run ?1 and request ?2, recorded if new.
INSERT INTO sluice_backfill_calls (run_id, request_id) VALUES (?1, ?2)
ON CONFLICT (run_id, request_id) DO UPDATE SET run_id = excluded.run_id
RETURNING id;
