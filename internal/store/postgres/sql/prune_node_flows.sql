DELETE FROM sluice_node_flows WHERE key = $1 AND seen_ms < $2;
