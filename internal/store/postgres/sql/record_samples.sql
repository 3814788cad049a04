-- The samples come as one JSON array of objects, each key once (an upsert
-- may not touch a row twice), in the primary key's order, in which
-- concurrent writers then lock the rows.
INSERT INTO sluice_flow_samples (flow, source, at, state, reason, done, remaining, admitted, tokens, rejections, refusals)
SELECT u.flow, u.source, u.at, u.state, u.reason, u.done, u.remaining, u.admitted, u.tokens, u.rejections, u.refusals
FROM jsonb_to_recordset($1::text::jsonb)
    AS u (flow text, source text, at bigint, state text, reason text, done bigint, remaining bigint,
          admitted bigint, tokens bigint, rejections text, refusals text)
ON CONFLICT (flow, at, source) DO UPDATE SET
    state      = excluded.state,
    reason     = excluded.reason,
    done       = excluded.done,
    remaining  = excluded.remaining,
    admitted   = excluded.admitted,
    tokens     = excluded.tokens,
    rejections = excluded.rejections,
    refusals   = excluded.refusals;
