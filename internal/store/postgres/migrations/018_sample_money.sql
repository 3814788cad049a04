-- Money in the flows' samples, for `sluice report` and the dashboard's
-- spend: money is what the flow's calls cost in the interval, in
-- billionths of the unit of its key's prices (summed, as the other counts,
-- when two processes sample one key in the same millisecond); priced says
-- the flow's key had a price; budgets is a JSON array of the budgets in
-- money that applied to the flow at the sample's time, each with what it
-- had counted ('[]' for none), as text, as on SQLite. Samples recorded
-- before say 0, false and '[]': no money known.
ALTER TABLE sluice_flow_samples ADD COLUMN money bigint NOT NULL DEFAULT 0;
ALTER TABLE sluice_flow_samples ADD COLUMN priced boolean NOT NULL DEFAULT false;
ALTER TABLE sluice_flow_samples ADD COLUMN budgets text NOT NULL DEFAULT '[]';
