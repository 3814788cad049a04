-- What each process waiting on a key asked for at its last
-- TakeLease: another process is held to its fair share of a limit only
-- while the others ask for theirs, so that room nobody asks for is not
-- held back (water-filling; see store.Grant). A row written before this
-- migration wants nothing more than its leases.
ALTER TABLE sluice_lease_nodes ADD COLUMN want_requests INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sluice_lease_nodes ADD COLUMN want_input    INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sluice_lease_nodes ADD COLUMN want_output   INTEGER NOT NULL DEFAULT 0;
