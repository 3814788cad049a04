DELETE FROM sluice_lease_nodes WHERE key = ?1 AND seen_ms < ?2;
