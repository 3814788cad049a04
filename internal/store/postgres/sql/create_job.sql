-- Creates the job, monitored from $2, if new; an existing job's row is
-- neither changed nor locked.
INSERT INTO sluice_jobs (name, monitoring_since) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING;
