-- Whether this session holds the session advisory lock $1: pg_locks shows
-- a bigint key as classid (its high half) and objid (its low half).
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
        AND ((classid::bigint << 32) | objid::bigint) = $1
);
