-- Each part only down, and the end never later, nor before the grant.
UPDATE sluice_leases SET
    requests = least(requests, $3),
    input    = least(input, $4),
    output   = least(output, $5),
    until_ms = greatest(at_ms, least(until_ms, $6))
WHERE key = $1 AND id = $2;
