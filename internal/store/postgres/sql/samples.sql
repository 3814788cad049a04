-- Every flow's samples in [$1, $2), read in the order of the index on at.
SELECT flow, source, at, state, reason, done, remaining, admitted, tokens, rejections, refusals, money, priced, budgets
FROM sluice_flow_samples
WHERE at >= $1 AND at < $2
ORDER BY at, flow, source;
