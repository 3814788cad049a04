INSERT INTO sluice_lease_nodes (key, node, weight, flows, seen_ms, want_requests, want_input, want_output, paced_out, want_money)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (key, node) DO UPDATE SET
    weight        = excluded.weight,
    flows         = excluded.flows,
    seen_ms       = excluded.seen_ms,
    want_requests = excluded.want_requests,
    want_input    = excluded.want_input,
    want_output   = excluded.want_output,
    paced_out     = excluded.paced_out,
    want_money    = excluded.want_money;
