-- Each part only down, and the end never later, nor before the grant.
UPDATE sluice_leases SET
    requests = min(requests, ?3),
    input    = min(input, ?4),
    output   = min(output, ?5),
    until_ms = max(at_ms, min(until_ms, ?6))
WHERE key = ?1 AND id = ?2;
