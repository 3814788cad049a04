-- Money in leases, for a key with a budget (MPD, MPM) that several
-- processes share: a lease grants money beside requests and tokens (its
-- calls' worst-case price), and is settled down to what they cost, so
-- that the money the leases of all processes take in a budget's window
-- (a day, or 30 days) never sums to more than the budget. 0 for leases
-- taken before, and on keys without a price. The index that the sums are
-- read from carries it too. What each process waiting on the key last
-- asked for now says its money, for its claim on a budget's share.
ALTER TABLE sluice_leases ADD COLUMN money bigint NOT NULL DEFAULT 0;

DROP INDEX sluice_leases_key_until;
CREATE INDEX sluice_leases_key_until ON sluice_leases (key, until_ms) INCLUDE (requests, input, output, money);

ALTER TABLE sluice_lease_nodes ADD COLUMN want_money bigint NOT NULL DEFAULT 0;
