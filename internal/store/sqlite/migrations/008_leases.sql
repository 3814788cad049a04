-- Leases of a provider key's capacity, for a key several processes share:
-- each process takes leases of what it may admit calls on until they end
-- (TakeLease), and the leases that count in any window of a limit's period
-- never sum to more than the limit. Times are Unix milliseconds, UTC.

-- One row per lease. The index reads the sums of a key's leases that end
-- after the start of a window, in the index alone: it carries what they
-- sum.
CREATE TABLE sluice_leases (
    key      TEXT    NOT NULL,
    id       TEXT    NOT NULL, -- the node, "/" and 16 random hex digits
    node     TEXT    NOT NULL,
    at_ms    INTEGER NOT NULL, -- granted at
    until_ms INTEGER NOT NULL, -- ends; once settled, when the last call on it was made
    requests INTEGER NOT NULL,
    input    INTEGER NOT NULL,
    output   INTEGER NOT NULL,
    PRIMARY KEY (key, id)
) WITHOUT ROWID;

CREATE INDEX sluice_leases_key_until ON sluice_leases (key, until_ms, requests, input, output);

-- One row per process that took leases on a key: its waiting weight when
-- it last asked, the flows it had calls waiting for with their weights (a
-- JSON object, '' when it did not say), and when that was, so that each
-- process's share of the room is its weight against those of the others
-- seen lately, a flow waiting on several processes shared among them.
CREATE TABLE sluice_lease_nodes (
    key     TEXT    NOT NULL,
    node    TEXT    NOT NULL,
    weight  REAL    NOT NULL,
    flows   TEXT    NOT NULL,
    seen_ms INTEGER NOT NULL,
    PRIMARY KEY (key, node)
) WITHOUT ROWID;
