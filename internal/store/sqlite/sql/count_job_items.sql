-- Adds to the counts of shard ?2 of job ?1, and keeps the later of its
-- last progress and ?7 (NULL: no progress).
INSERT INTO sluice_job_counts (name, shard, pending, rejected, saved, parked, last_progress_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (name, shard) DO UPDATE SET
    pending          = sluice_job_counts.pending + excluded.pending,
    rejected         = sluice_job_counts.rejected + excluded.rejected,
    saved            = sluice_job_counts.saved + excluded.saved,
    parked           = sluice_job_counts.parked + excluded.parked,
    last_progress_at = max(coalesce(sluice_job_counts.last_progress_at, excluded.last_progress_at),
                           coalesce(excluded.last_progress_at, sluice_job_counts.last_progress_at));
