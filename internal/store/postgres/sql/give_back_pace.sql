-- Room settled unused, worth $3 nanoseconds, moves the pacer back.
UPDATE sluice_lease_pacers SET tat_ns = tat_ns - $3
WHERE key = $1 AND lim = $2;
