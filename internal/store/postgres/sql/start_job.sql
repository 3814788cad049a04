INSERT INTO sluice_jobs (name, monitoring_since) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING;
