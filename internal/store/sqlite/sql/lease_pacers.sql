SELECT lim, tat_ns, start_ns, every
FROM sluice_lease_pacers
WHERE key = ?1;
