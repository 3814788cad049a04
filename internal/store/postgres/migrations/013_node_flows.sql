-- What each process of a key several processes share last said of its
-- flows, so that any process can show the cluster's (see
-- docs/multinode.md): a row per key, process and flow, written every few
-- seconds while the process runs, and read only as long as it is fresh.
CREATE TABLE sluice_node_flows (
    key      text NOT NULL,
    node     text NOT NULL,
    flow     text NOT NULL,
    waiting  bigint NOT NULL, -- calls waiting in its line
    admitted bigint NOT NULL, -- calls admitted since the process started
    input    bigint NOT NULL, -- tokens charged to those calls, as settled
    output   bigint NOT NULL,
    seen_ms  bigint NOT NULL, -- when the process wrote it, Unix milliseconds
    PRIMARY KEY (key, node, flow)
);
