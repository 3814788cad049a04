-- One statement for the whole batch: the charges come as parallel arrays,
-- one ID at most once, sorted by ID so concurrent writers lock rows in the
-- same order.
INSERT INTO sluice_quota_charges (key, id, flow, at, requests, input, output, money)
SELECT $1, c.id, c.flow, c.at, c.requests, c.input, c.output, c.money
FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
    AS c (id, flow, at, requests, input, output, money)
ON CONFLICT (key, id) DO UPDATE SET
    flow     = excluded.flow,
    at       = excluded.at,
    requests = excluded.requests,
    input    = excluded.input,
    output   = excluded.output,
    money    = excluded.money;
