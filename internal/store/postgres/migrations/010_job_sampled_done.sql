-- The most items done (saved and parked) that any process's history sample
-- of a job has counted up to: several processes sharing a job each sample
-- its progress, and each records only what lies above the mark, so the
-- job's progress is counted once between them (see store.Sample). NULL:
-- never sampled, as every job before this migration.
ALTER TABLE sluice_jobs ADD COLUMN sampled_done bigint;
