DELETE FROM sluice_flow_samples WHERE at < ?1;
