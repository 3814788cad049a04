-- A record without a step is a cancel recorded before the run stopped: the
-- run completes it with where it was. The WHERE on the update leaves a
-- record that has a step as it is, and a cancel's or a deadline's as it is
-- when the run's own end is a failure: a failure that comes once a run is
-- being stopped is what the stop did to it (DBOS refusing the record of
-- the step it was in), and DBOS shows the run stopped, not failed.
INSERT INTO sluice_run_ends (run_id, status, reason, step, attempt, started_at, ended_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (run_id) DO UPDATE SET
    reason     = excluded.reason,
    step       = excluded.step,
    attempt    = excluded.attempt,
    started_at = CASE WHEN sluice_run_ends.started_at = 0 THEN excluded.started_at ELSE sluice_run_ends.started_at END
WHERE sluice_run_ends.step = '' AND (excluded.status <> 'failed' OR sluice_run_ends.status = 'failed');
