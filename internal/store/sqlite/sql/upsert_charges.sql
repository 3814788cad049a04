-- One statement for the whole batch: the charges come as one JSON array of
-- [id, flow, at, requests, input, output, money] rows, so the statement is
-- parsed once per batch rather than once per charge. The WHERE true tells
-- SQLite's parser that ON CONFLICT starts the upsert clause, not a join
-- constraint.
INSERT INTO sluice_quota_charges (key, id, flow, at, requests, input, output, money)
SELECT ?1, c.value ->> 0, c.value ->> 1, c.value ->> 2, c.value ->> 3, c.value ->> 4, c.value ->> 5, c.value ->> 6
FROM json_each(?2) AS c
WHERE true
ON CONFLICT (key, id) DO UPDATE SET
    flow     = excluded.flow,
    at       = excluded.at,
    requests = excluded.requests,
    input    = excluded.input,
    output   = excluded.output,
    money    = excluded.money;
