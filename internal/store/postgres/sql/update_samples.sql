-- Sets every column of the stored samples of the keys of the samples given
-- as one JSON array of objects, each key once.
UPDATE sluice_flow_samples AS s
SET state      = u.state,
    reason     = u.reason,
    done       = u.done,
    remaining  = u.remaining,
    admitted   = u.admitted,
    tokens     = u.tokens,
    rejections = u.rejections,
    refusals   = u.refusals,
    money      = u.money,
    priced     = u.priced,
    budgets    = u.budgets
FROM jsonb_to_recordset($1::text::jsonb)
    AS u (flow text, source text, at bigint, state text, reason text, done bigint, remaining bigint,
          admitted bigint, tokens bigint, rejections text, refusals text, money bigint, priced boolean, budgets text)
WHERE s.flow = u.flow COLLATE "C" AND s.at = u.at AND s.source = u.source COLLATE "C";
