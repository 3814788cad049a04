-- Held until the transaction ends: a second TakeLease of the key waits
-- here, then sums the leases with the one the first inserted (each
-- statement of a READ COMMITTED transaction sees what committed before it
-- began). An advisory lock needs no row to lock, where a key's first
-- lease has none yet. It is on the pair (1818583411, the key's hash):
-- 1818583411 is the ASCII of "leas", and locks on a pair of integers are
-- apart from those on one bigint, as the migrations' and DBOS's are. Keys
-- of the same hash share a lock: they wait for each other, which is slower
-- but never wrong.
SELECT pg_advisory_xact_lock(1818583411, hashtext($1));
