SELECT run_id, status, reason, step, attempt, started_at, ended_at
FROM sluice_run_ends
WHERE run_id = ANY($1::text[]);
