DELETE FROM sluice_leases WHERE key = ?1 AND until_ms < ?2;
