-- Each part only down, and the end never later, nor before the grant; once
-- final ($7 is 1), final for good. A fold (state 2) is no lease to settle.
UPDATE sluice_leases SET
    requests = least(requests, $3),
    input    = least(input, $4),
    output   = least(output, $5),
    money    = least(money, $8),
    until_ms = greatest(at_ms, least(until_ms, $6)),
    state    = greatest(state, $7)
WHERE key = $1 AND id = $2 AND state < 2;
