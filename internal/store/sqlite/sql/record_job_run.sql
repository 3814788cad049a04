-- ?3 is 'ok' or 'failed'; a success keeps the last failure's error.
INSERT INTO sluice_jobs (name, monitoring_since, last_run_at, last_status, consecutive_failures, last_error)
VALUES (?1, ?2, ?2, ?3, CASE WHEN ?3 = 'ok' THEN 0 ELSE 1 END, CASE WHEN ?3 = 'ok' THEN '' ELSE ?4 END)
ON CONFLICT (name) DO UPDATE SET
    last_run_at          = excluded.last_run_at,
    last_status          = excluded.last_status,
    consecutive_failures = CASE WHEN excluded.last_status = 'ok' THEN 0 ELSE sluice_jobs.consecutive_failures + 1 END,
    last_error           = CASE WHEN excluded.last_status = 'ok' THEN sluice_jobs.last_error ELSE excluded.last_error END;
