-- The minute's sums, then the day's, then both of node ?4's leases alone
-- (none when ?4 is ''), in one pass over the leases that end
-- after the day's start (?3, at or before the minute's, ?2). sum, not
-- total: integers, and an overflow is an error, never a wrapped sum.
SELECT
    coalesce(sum(requests) FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(input)    FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(output)   FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(requests), 0),
    coalesce(sum(input), 0),
    coalesce(sum(output), 0),
    coalesce(sum(requests) FILTER (WHERE until_ms > ?2 AND node = ?4), 0),
    coalesce(sum(input)    FILTER (WHERE until_ms > ?2 AND node = ?4), 0),
    coalesce(sum(output)   FILTER (WHERE until_ms > ?2 AND node = ?4), 0),
    coalesce(sum(requests) FILTER (WHERE node = ?4), 0),
    coalesce(sum(input)    FILTER (WHERE node = ?4), 0),
    coalesce(sum(output)   FILTER (WHERE node = ?4), 0)
FROM sluice_leases
WHERE key = ?1 AND until_ms > ?3;
