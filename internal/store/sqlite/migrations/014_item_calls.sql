-- Each call's run and request ID once, not once per item: an item records
-- the call that last settled it by a number (0: none yet). A batch of 20
-- items kept its run and request ID (about 75 bytes together) 20 times;
-- now once, in sluice_backfill_calls, whose unique index also finds the
-- call again when the same batch is settled twice.
CREATE TABLE sluice_backfill_calls (
    id         INTEGER PRIMARY KEY,
    run_id     TEXT NOT NULL,
    request_id TEXT NOT NULL,
    UNIQUE (run_id, request_id)
);

INSERT INTO sluice_backfill_calls (run_id, request_id)
SELECT DISTINCT run_id, request_id FROM sluice_backfill_items WHERE run_id <> '';

ALTER TABLE sluice_backfill_items ADD COLUMN call_id INTEGER NOT NULL DEFAULT 0;

UPDATE sluice_backfill_items SET call_id = (
    SELECT c.id FROM sluice_backfill_calls AS c
    WHERE c.run_id = sluice_backfill_items.run_id AND c.request_id = sluice_backfill_items.request_id
) WHERE run_id <> '';

ALTER TABLE sluice_backfill_items DROP COLUMN run_id;
ALTER TABLE sluice_backfill_items DROP COLUMN request_id;
