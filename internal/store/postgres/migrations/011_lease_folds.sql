-- Leases folded: a lease whose use changes no more (state 1, final) and
-- that no longer counts in any minute's window is folded, with the other
-- such leases of its node whose ends fall in the same minute, into one
-- row of that node and minute (state 2, folded): its use the sum of
-- theirs, its end the latest of theirs, so that it counts in every day's
-- window that any of them counted in. A key then keeps about one row per
-- node and minute of the last day, not one per lease (see
-- docs/multinode.md). A lease taken before this migration stays open
-- (state 0): it is never folded, and pruned as before.
ALTER TABLE sluice_leases ADD COLUMN state smallint NOT NULL DEFAULT 0; -- 0 open, 1 final, 2 folded

-- The final leases of a key, by end: what the next TakeLease folds.
CREATE INDEX sluice_leases_final ON sluice_leases (key, until_ms) WHERE state = 1;
