INSERT INTO sluice_lease_nodes (key, node, weight, flows, seen_ms)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (key, node) DO UPDATE SET
    weight  = excluded.weight,
    flows   = excluded.flows,
    seen_ms = excluded.seen_ms;
