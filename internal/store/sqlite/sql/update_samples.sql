-- Sets every column of the stored samples of the keys of the samples given
-- as one JSON array of objects, each key once.
UPDATE sluice_flow_samples AS s
SET state      = u.value ->> 'state',
    reason     = u.value ->> 'reason',
    done       = u.value ->> 'done',
    remaining  = u.value ->> 'remaining',
    admitted   = u.value ->> 'admitted',
    tokens     = u.value ->> 'tokens',
    rejections = u.value ->> 'rejections',
    refusals   = u.value ->> 'refusals',
    money      = u.value ->> 'money',
    priced     = u.value ->> 'priced',
    budgets    = u.value ->> 'budgets'
FROM json_each(?1) AS u
WHERE s.flow = u.value ->> 'flow' AND s.at = u.value ->> 'at' AND s.source = u.value ->> 'source';
