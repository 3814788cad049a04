-- Adds final leases of one node that ended in one minute to that node's
-- fold of the minute (state 2), made if there is none: key $1, ID $2,
-- node $3, the earliest grant $4, the latest end $5, requests $6, input
-- $7, output $8, money $10. Each sum of requests and tokens stays at
-- most $9 (governor.MaxCost, over any limit: a limit it reaches is used
-- up either way); the money's at most $11, over any budget.
INSERT INTO sluice_leases (key, id, node, at_ms, until_ms, requests, input, output, money, state)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, 2)
ON CONFLICT (key, id) DO UPDATE SET
    at_ms    = least(sluice_leases.at_ms, excluded.at_ms),
    until_ms = greatest(sluice_leases.until_ms, excluded.until_ms),
    requests = least(sluice_leases.requests + excluded.requests, $9),
    input    = least(sluice_leases.input + excluded.input, $9),
    output   = least(sluice_leases.output + excluded.output, $9),
    money    = least(sluice_leases.money + excluded.money, $11);
