SELECT name, monitoring_since, last_progress_at, last_run_at, last_status, consecutive_failures, last_error,
       pending, rejected, saved, parked, alert
FROM sluice_jobs
WHERE name = $1;
