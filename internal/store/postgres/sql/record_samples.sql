-- Inserts the samples of a key not stored yet and returns their keys; the
-- others are added to the stored ones (see stored_samples and
-- update_samples). The samples come as one JSON array of objects, each key
-- once, in the primary key's order, in which concurrent writers then lock
-- the rows. A key another transaction inserts meanwhile waits for it to
-- end: once it commits, the key is stored, not inserted.
INSERT INTO sluice_flow_samples (flow, source, at, state, reason, done, remaining, admitted, tokens, rejections, refusals,
                                 money, priced, budgets)
SELECT u.flow, u.source, u.at, u.state, u.reason, u.done, u.remaining, u.admitted, u.tokens, u.rejections, u.refusals,
       u.money, u.priced, u.budgets
FROM jsonb_to_recordset($1::text::jsonb)
    AS u (flow text, source text, at bigint, state text, reason text, done bigint, remaining bigint,
          admitted bigint, tokens bigint, rejections text, refusals text, money bigint, priced boolean, budgets text)
ON CONFLICT (flow, at, source) DO NOTHING
RETURNING flow, at, source;
