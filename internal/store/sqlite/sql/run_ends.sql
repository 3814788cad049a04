-- The run IDs come as one JSON array, so any number of them is one
-- statement with one parameter.
SELECT run_id, status, reason, step, attempt, started_at, ended_at
FROM sluice_run_ends
WHERE run_id IN (SELECT value FROM json_each(?1));
