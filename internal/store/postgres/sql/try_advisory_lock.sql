-- A session advisory lock, taken without waiting: true when this session
-- holds it now.
SELECT pg_try_advisory_lock($1);
