-- Creates the job if new; otherwise adds to its counts, and keeps the
-- later of its last progress and ?7 (NULL: no progress).
INSERT INTO sluice_jobs (name, monitoring_since, pending, rejected, saved, parked, last_progress_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (name) DO UPDATE SET
    pending          = sluice_jobs.pending + excluded.pending,
    rejected         = sluice_jobs.rejected + excluded.rejected,
    saved            = sluice_jobs.saved + excluded.saved,
    parked           = sluice_jobs.parked + excluded.parked,
    last_progress_at = max(coalesce(sluice_jobs.last_progress_at, excluded.last_progress_at),
                           coalesce(excluded.last_progress_at, sluice_jobs.last_progress_at));
