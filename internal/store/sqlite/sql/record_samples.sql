-- Inserts the samples of a key not stored yet and returns their keys; the
-- others are added to the stored ones (see stored_samples and
-- update_samples). The samples come as one JSON array of objects, each
-- key once, in the primary key's order. The WHERE true tells SQLite's
-- parser that ON CONFLICT starts the upsert clause, not a join constraint.
INSERT INTO sluice_flow_samples (flow, source, at, state, reason, done, remaining, admitted, tokens, rejections, refusals,
                                 money, priced, budgets)
SELECT u.value ->> 'flow', u.value ->> 'source', u.value ->> 'at', u.value ->> 'state', u.value ->> 'reason',
       u.value ->> 'done', u.value ->> 'remaining', u.value ->> 'admitted', u.value ->> 'tokens',
       u.value ->> 'rejections', u.value ->> 'refusals', u.value ->> 'money', u.value ->> 'priced', u.value ->> 'budgets'
FROM json_each(?1) AS u
WHERE true
ON CONFLICT (flow, at, source) DO NOTHING
RETURNING flow, at, source;
