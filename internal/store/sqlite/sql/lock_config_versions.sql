-- Nothing to lock: a transaction on SQLite holds the database's write
-- lock from BEGIN IMMEDIATE, so no other records a version between
-- RecordConfig's test and its record.
SELECT 1;
