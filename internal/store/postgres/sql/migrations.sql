SELECT version, name, applied_at FROM sluice_migrations ORDER BY version;
