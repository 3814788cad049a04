-- A pacer made now keeps its start; one that is there moves on.
INSERT INTO sluice_lease_pacers (key, lim, tat_ns, start_ns, every)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (key, lim) DO UPDATE SET
    tat_ns = excluded.tat_ns,
    every  = excluded.every;
