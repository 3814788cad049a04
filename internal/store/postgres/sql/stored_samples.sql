-- The stored samples of the keys given as one JSON array of objects of
-- flow, at and source, with the columns scanSample reads, locked in the
-- primary key's order until the transaction ends: a concurrent writer of
-- the same key adds to what this one writes, not to what it read.
SELECT s.flow, s.source, s.at, s.state, s.reason, s.done, s.remaining, s.admitted, s.tokens, s.rejections, s.refusals,
       s.money, s.priced, s.budgets
FROM jsonb_to_recordset($1::text::jsonb) AS u (flow text, source text, at bigint)
JOIN sluice_flow_samples AS s
    ON s.flow = u.flow COLLATE "C" AND s.at = u.at AND s.source = u.source COLLATE "C"
ORDER BY s.flow, s.at, s.source
FOR UPDATE OF s;
