-- The final leases of the key (?1) that ended by ?2, deleted and returned
-- to be folded: the node, the end, the grant time, requests, input, output,
-- money. Deleted and read in one statement, so that a lease settled
-- meanwhile by another transaction is either folded with its last use or
-- left alone.
DELETE FROM sluice_leases
WHERE key = ?1 AND state = 1 AND until_ms <= ?2
RETURNING node, until_ms, at_ms, requests, input, output, money;
