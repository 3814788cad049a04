-- The job's sampled mark (the transaction holds the database's write lock);
-- no row for a flow that is no job.
SELECT sampled_done FROM sluice_jobs WHERE name = ?1;
