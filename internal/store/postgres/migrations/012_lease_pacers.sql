-- The day pacers of a key several processes share (see docs/multinode.md):
-- one row per paced day limit, charged as leases are granted and given
-- back to as their unused room is settled, so that the processes together
-- spend a day limit at the pace one process would.
CREATE TABLE sluice_lease_pacers (
    key      text             NOT NULL,
    lim      smallint         NOT NULL, -- the limit, by governor.Limit's number (RPD or TPD)
    tat_ns   bigint           NOT NULL, -- the pacer's theoretical arrival time, Unix nanoseconds
    start_ns bigint           NOT NULL, -- made at: it pays back the burst it starts with for a day from then
    every    double precision NOT NULL, -- nanoseconds a unit is worth, as of the last grant: what one given back moves it back
    PRIMARY KEY (key, lim)
);

-- Whether a process's last grant was cut on a day limit that the shared
-- pacers pace (1) or not (0): one cut wants more of the pace than it got,
-- and so claims its whole share of it (see store.Claim).
ALTER TABLE sluice_lease_nodes ADD COLUMN paced_out smallint NOT NULL DEFAULT 0;
