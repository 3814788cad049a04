-- The first record of a run stays: a second cancel, or a cancel after the
-- run recorded its own end, changes nothing.
INSERT INTO sluice_run_ends (run_id, status, reason, step, attempt, started_at, ended_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (run_id) DO NOTHING;
