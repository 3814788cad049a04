INSERT INTO sluice_migrations (version, name, applied_at) VALUES ($1, $2, $3);
