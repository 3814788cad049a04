-- What a lease holds before it is settled (a fold, state 2, is no lease).
SELECT requests, input, output
FROM sluice_leases
WHERE key = ?1 AND id = ?2 AND state < 2;
