-- Of each node with leases that end after the month's start (?5, at or
-- before the day's, ?3, which is at or before the minute's, ?2, and the
-- pace window's, ?4): the minute's sums, then the pace window's, then the
-- day's with its money, then the month's money. sum, not total: integers,
-- and an overflow is an error, never a wrapped sum.
SELECT
    node,
    coalesce(sum(requests) FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(input)    FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(output)   FILTER (WHERE until_ms > ?2), 0),
    coalesce(sum(requests) FILTER (WHERE until_ms > ?4), 0),
    coalesce(sum(input)    FILTER (WHERE until_ms > ?4), 0),
    coalesce(sum(output)   FILTER (WHERE until_ms > ?4), 0),
    coalesce(sum(requests) FILTER (WHERE until_ms > ?3), 0),
    coalesce(sum(input)    FILTER (WHERE until_ms > ?3), 0),
    coalesce(sum(output)   FILTER (WHERE until_ms > ?3), 0),
    coalesce(sum(money)    FILTER (WHERE until_ms > ?3), 0),
    sum(money)
FROM sluice_leases
WHERE key = ?1 AND until_ms > ?5
GROUP BY node;
