-- Leases of a provider key's capacity, for a key several processes share:
-- each process takes leases of what it may admit calls on until they end
-- (TakeLease), and the leases that count in any window of a limit's period
-- never sum to more than the limit. Times are Unix milliseconds, UTC, as
-- in the engine's tables.

-- One row per lease. The index reads the sums of a key's leases that end
-- after the start of a window, in the index alone: it carries what they
-- sum.
CREATE TABLE sluice_leases (
    key      text   NOT NULL,
    id       text   NOT NULL, -- the node, "/" and 16 random hex digits
    node     text   NOT NULL,
    at_ms    bigint NOT NULL, -- granted at
    until_ms bigint NOT NULL, -- ends; once settled, when the last call on it was made
    requests bigint NOT NULL,
    input    bigint NOT NULL,
    output   bigint NOT NULL,
    PRIMARY KEY (key, id)
);

CREATE INDEX sluice_leases_key_until ON sluice_leases (key, until_ms) INCLUDE (requests, input, output);

-- One row per process that took leases on a key: its waiting weight when
-- it last asked, the flows it had calls waiting for with their weights (a
-- JSON object, '' when it did not say), and when that was, so that each
-- process's share of the room is its weight against those of the others
-- seen lately, a flow waiting on several processes shared among them.
CREATE TABLE sluice_lease_nodes (
    key     text             NOT NULL,
    node    text             NOT NULL,
    weight  double precision NOT NULL,
    flows   text             NOT NULL,
    seen_ms bigint           NOT NULL,
    PRIMARY KEY (key, node)
);
