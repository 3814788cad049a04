INSERT INTO sluice_backfill_runs (run_id, backfill, started_at, ended_at, selected, retried, saved, parked, rejected, stopped)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (run_id) DO UPDATE SET
    backfill   = excluded.backfill,
    started_at = excluded.started_at,
    ended_at   = excluded.ended_at,
    selected   = excluded.selected,
    retried    = excluded.retried,
    saved      = excluded.saved,
    parked     = excluded.parked,
    rejected   = excluded.rejected,
    stopped    = excluded.stopped;
