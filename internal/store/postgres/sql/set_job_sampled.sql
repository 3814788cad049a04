UPDATE sluice_jobs SET sampled_done = $2 WHERE name = $1;
