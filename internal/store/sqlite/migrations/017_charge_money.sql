-- A charge's cost in money, in billionths of the unit of the key's prices:
-- what a budget (per day, per month) counts. Restored as it was journaled,
-- so a restart counts what the calls cost, not their worst case again. 0
-- for charges journaled before, and on keys without a price.
ALTER TABLE sluice_quota_charges ADD COLUMN money INTEGER NOT NULL DEFAULT 0;
