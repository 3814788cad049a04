-- One flow's samples in [?1, ?2), read in the order of the primary key. A
-- statement of its own, not samples.sql with "?3 = '' OR", so the plan
-- always seeks the flow in the key.
SELECT flow, source, at, state, reason, done, remaining, admitted, tokens, rejections, refusals, money, priced, budgets
FROM sluice_flow_samples
WHERE flow = ?3 AND at >= ?1 AND at < ?2
ORDER BY at, flow, source;
