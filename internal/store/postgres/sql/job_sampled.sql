-- The job's sampled mark, its row locked until the transaction ends; no row
-- for a flow that is no job.
SELECT sampled_done FROM sluice_jobs WHERE name = $1 FOR UPDATE;
