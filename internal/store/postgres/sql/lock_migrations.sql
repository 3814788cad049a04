-- Held until the migrating transaction ends, so a second process opening the
-- same database waits, then finds every migration recorded. The key is the
-- ASCII of "sluice" as a number, chosen to stay clear of DBOS's own locks.
SELECT pg_advisory_xact_lock(126909663503205);
