INSERT INTO sluice_node_flows (key, node, flow, waiting, admitted, input, output, seen_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (key, node, flow) DO UPDATE SET
    waiting  = excluded.waiting,
    admitted = excluded.admitted,
    input    = excluded.input,
    output   = excluded.output,
    seen_ms  = excluded.seen_ms;
