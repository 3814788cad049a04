-- Of each node with leases that end after the day's start (?3, at or
-- before the minute's, ?2, and the pace window's, ?4): the minute's sums,
-- then the pace window's, then the day's. sum, not total: integers, and an
-- overflow is an error, never a wrapped sum.
SELECT
    node,
    coalesce(sum(requests) FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(input)    FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(output)   FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(requests) FILTER (WHERE until_ms > ?4), 0),
    coalesce(sum(input)    FILTER (WHERE until_ms > ?4), 0),
    coalesce(sum(output)   FILTER (WHERE until_ms > ?4), 0),
    sum(requests),
    sum(input),
    sum(output)
FROM sluice_leases
WHERE key = ?1 AND until_ms > ?3
GROUP BY node;
