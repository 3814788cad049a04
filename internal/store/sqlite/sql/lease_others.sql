SELECT node, weight, flows, want_requests, want_input, want_output, paced_out, want_money
FROM sluice_lease_nodes
WHERE key = ?1 AND node <> ?2 AND seen_ms >= ?3 AND weight > 0;
