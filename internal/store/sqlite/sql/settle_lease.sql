-- Each part only down, and the end never later, nor before the grant; once
-- final (?7 is 1), final for good. A fold (state 2) is no lease to settle.
UPDATE sluice_leases SET
    requests = min(requests, ?3),
    input    = min(input, ?4),
    output   = min(output, ?5),
    money    = min(money, ?8),
    until_ms = max(at_ms, min(until_ms, ?6)),
    state    = max(state, ?7)
WHERE key = ?1 AND id = ?2 AND state < 2;
