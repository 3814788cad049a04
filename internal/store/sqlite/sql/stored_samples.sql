-- The stored samples of the keys given as one JSON array of objects of
-- flow, at and source (the transaction holds the database's write lock),
-- with the columns scanSample reads, in the primary key's order.
SELECT s.flow, s.source, s.at, s.state, s.reason, s.done, s.remaining, s.admitted, s.tokens, s.rejections, s.refusals,
       s.money, s.priced, s.budgets
FROM json_each(?1) AS u
JOIN sluice_flow_samples AS s
    ON s.flow = u.value ->> 'flow' AND s.at = u.value ->> 'at' AND s.source = u.value ->> 'source'
ORDER BY s.flow, s.at, s.source;
