-- Nothing to lock: a transaction on SQLite holds the database's write
-- lock from BEGIN IMMEDIATE, so no other TakeLease sums the leases until
-- this one's lease is committed. The key (?1) is taken as on PostgreSQL,
-- where the lock is the key's.
SELECT ?1;
