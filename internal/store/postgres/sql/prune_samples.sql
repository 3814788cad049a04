-- At most $2 of the samples before $1, the oldest first: PruneHistory
-- deletes in batches, each its own transaction.
DELETE FROM sluice_flow_samples WHERE (at, flow, source) IN (
    SELECT at, flow, source FROM sluice_flow_samples WHERE at < $1 ORDER BY at LIMIT $2
);
