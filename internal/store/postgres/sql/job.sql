-- A job with its counts: the sums over its shards.
SELECT j.name, j.monitoring_since, c.last_progress_at, j.last_run_at, j.last_status, j.consecutive_failures, j.last_error,
       coalesce(c.pending, 0), coalesce(c.rejected, 0), coalesce(c.saved, 0), coalesce(c.parked, 0), j.alert
FROM sluice_jobs AS j
LEFT JOIN (
    SELECT name, SUM(pending)::bigint AS pending, SUM(rejected)::bigint AS rejected, SUM(saved)::bigint AS saved, SUM(parked)::bigint AS parked,
           MAX(last_progress_at) AS last_progress_at
    FROM sluice_job_counts
    WHERE name = $1
    GROUP BY name
) AS c ON c.name = j.name
WHERE j.name = $1;
