SELECT run_id, backfill, started_at, ended_at, selected, retried, saved, parked, rejected, stopped
FROM sluice_backfill_runs
WHERE (?1 = '' OR backfill = ?1)
ORDER BY ended_at DESC, run_id
LIMIT ?2;
