SELECT node, flow, waiting, admitted, input, output, seen_ms
FROM sluice_node_flows
WHERE key = ?1 AND seen_ms >= ?2
ORDER BY flow, node;
